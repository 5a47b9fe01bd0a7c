"""The verifier pool: hard wall-clock limits, killed process groups, retries, cache, and an adversarial suite."""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from multiprocessing import forkserver, resource_tracker
from pathlib import Path

import math_verify
import pytest

from rlvr_factory.verifiers import pool as pool_module
from rlvr_factory.verifiers.math import MathVerifier
from rlvr_factory.verifiers.pool import VerifierPool
from rlvr_factory.verifiers.score import Score

logging.getLogger("math_verify").setLevel(logging.ERROR)  # its "timeout is disabled" notice, once per worker

TIMEOUT = 1.0
SLACK = 1.0  # the promised bound: a check returns within its timeout plus this
REPO = Path(__file__).resolve().parents[2]


class Scripted:
    """A test verifier whose full check does what the completion says: `ok:<answer>`, `hang`, `raise`, ..."""

    def quick_score(self, completion: str, gold: str) -> Score | None:
        if completion == "quick:raise":
            raise RuntimeError("quick_score failed")
        if completion.startswith("quick:"):
            correct = completion == f"quick:{gold}"
            return Score(float(correct), correct, breakdown={"quick": 1.0})
        return None

    def score(self, completion: str, gold: str) -> Score:
        command, _, argument = completion.partition(":")
        if command == "ok":
            return Score(float(argument == gold), argument == gold)
        if command == "hang":
            time.sleep(1e6)
        if command == "raise":
            raise ValueError("the verifier broke")
        if command == "none":
            return None  # type: ignore[return-value]  # a verifier that breaks its contract
        if command == "bigint":
            pow(10, 10**8)  # minutes of C-level work that no signal interrupts
        if command == "hog":
            bytearray(2 * 1024**3)  # over the worker's 1 GiB address-space cap
        if command == "crash":
            os._exit(1)
        if command == "grandchild":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1e6)"])
            Path(argument).write_text(str(child.pid))
            time.sleep(1e6)
        raise AssertionError(f"unknown test command {completion!r}")


class BatchedScripted(Scripted):
    """The scripted verifier with a batched full check (`score_batch`): `batch_size` checks per job."""

    batch_size = 3

    def score_batch(self, pairs: list[tuple[str, str]]) -> list[Score]:
        return [self.score(completion, gold) for completion, gold in pairs]


class MathVerifyScorer:
    """Math-Verify's parse and verify with their own (signal-based) timeouts off: the pool is the only limit."""

    def quick_score(self, completion: str, gold: str) -> Score | None:
        return None

    def score(self, completion: str, gold: str) -> Score:
        answer = math_verify.parse(completion, parsing_timeout=None)
        reference = math_verify.parse(gold, parsing_timeout=None)
        correct = bool(math_verify.verify(reference, answer, timeout_seconds=None))
        return Score(float(correct), correct)


def children() -> set[int]:
    """The pids of this process's live children, from /proc."""
    pids = set()
    for path in Path("/proc/self/task").glob("*/children"):
        pids |= {int(pid) for pid in path.read_text().split()}
    return {pid for pid in pids if alive(pid)}


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def gone(pids: set[int], within: float = 2.0) -> bool:
    """Whether all these processes are dead within `within` seconds (reaping is asynchronous)."""
    deadline = time.monotonic() + within
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def shared_pool():
    """A two-worker pool of the scripted verifier; tests use distinct golds so the cache does not mix them."""
    with VerifierPool(Scripted(), workers=2, timeout=TIMEOUT, memory_limit_mb=1024) as shared:
        yield shared


@pytest.fixture
def pool(shared_pool):
    """The shared pool with every worker ready (one replaced by an earlier test may still be starting)."""
    shared_pool.start()
    return shared_pool


def delta(pool: VerifierPool, before: dict[str, int]) -> dict[str, int]:
    """The pool's counters since `before`, without the zeros."""
    return {k: v - before[k] for k, v in pool.stats.items() if v != before[k]}


# Statuses and order


def test_scores_come_back_in_input_order_with_each_failure_as_a_status(pool):
    expected = {  # (completion, gold) -> (status, correct)
        ("ok:7", "7"): ("ok", True),
        ("ok:8", "7"): ("ok", False),
        ("quick:7", "7"): ("ok", True),
        ("raise", "7"): ("error", False),
        ("hang", "7"): ("timeout", False),
        ("quick:raise", "7"): ("error", False),
        ("ok:7 ", "7"): ("ok", False),
        ("none", "7"): ("error", False),
    }
    scores = pool.score_many(list(expected))
    assert [(s.status, s.correct) for s in scores] == list(expected.values())
    assert scores[2].breakdown == {"quick": 1.0}
    assert all(s.reward == 0.0 for s in scores if s.status != "ok")


def test_an_empty_batch_is_an_empty_list(pool):
    assert pool.score_many([]) == []


# Wall-clock limits


def test_a_hanging_check_times_out_within_its_limit_while_the_other_worker_finishes_the_rest(pool):
    before = pool.stats
    pairs = [("hang", "a")] + [(f"ok:{i}", "a") for i in range(20)]
    start = time.monotonic()
    scores = pool.score_many(pairs)
    elapsed = time.monotonic() - start
    assert scores[0].status == "timeout"
    assert all(s.status == "ok" for s in scores[1:])
    assert elapsed <= TIMEOUT + SLACK
    assert delta(pool, before) == {"dispatched": 21, "timeouts": 1, "restarts": 1}


def test_two_hanging_checks_on_two_workers_time_out_together(pool):
    start = time.monotonic()
    scores = pool.score_many([("hang", "b1"), ("hang", "b2")])
    assert [s.status for s in scores] == ["timeout", "timeout"]
    assert time.monotonic() - start <= TIMEOUT + SLACK


def test_c_level_big_integer_work_that_ignores_signals_is_killed_at_the_deadline(pool):
    start = time.monotonic()
    [score] = pool.score_many([("bigint", "c")])
    assert score.status == "timeout"
    assert time.monotonic() - start <= TIMEOUT + SLACK


def test_a_timed_out_checks_grandchild_is_killed_with_its_process_group(pool, tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    [score] = pool.score_many([(f"grandchild:{pid_file}", "d")])
    assert score.status == "timeout"
    assert gone({int(pid_file.read_text())})


# Errors and crashes


def test_a_memory_blowup_is_an_error_and_the_worker_lives_on(pool):
    before = pool.stats
    scores = pool.score_many([("hog", "e"), ("ok:e", "e")])
    assert [s.status for s in scores] == ["error", "ok"]
    assert delta(pool, before) == {"dispatched": 2, "errors": 1}


def test_a_crashing_worker_is_replaced_and_its_check_retried_once_then_an_infra_error(pool):
    before = pool.stats
    scores = pool.score_many([("crash", "f"), ("ok:f", "f")])
    assert [s.status for s in scores] == ["infra_error", "ok"]
    assert delta(pool, before) == {"dispatched": 2, "infra_errors": 1, "retries": 1, "restarts": 2}


def test_an_infra_error_is_not_cached_so_a_later_batch_tries_again(pool):
    pool.score_many([("crash", "g")])
    before = pool.stats
    [score] = pool.score_many([("crash", "g")])
    assert score.status == "infra_error"
    assert delta(pool, before) == {"dispatched": 1, "infra_errors": 1, "retries": 1, "restarts": 2}


# Cache, repeats, quick path, size limit


def test_a_pair_seen_before_is_served_from_the_cache(pool):
    first = pool.score_many([("ok:h", "h"), ("hang", "h")])
    before = pool.stats
    start = time.monotonic()
    again = pool.score_many([("ok:h", "h"), ("hang", "h")])
    assert again == first
    assert time.monotonic() - start < 0.1
    assert delta(pool, before) == {"cached": 2}


def test_the_cache_keeps_the_latest_verdicts_only_so_a_long_run_does_not_grow_it(pool, monkeypatch):
    monkeypatch.setattr(pool_module, "CACHE_ENTRIES", 2)
    pool._cache.clear()  # the pool is shared with earlier tests: start from an empty cache
    pool.score_many([("ok:c1", "c"), ("ok:c2", "c"), ("ok:c3", "c")])
    assert len(pool._cache) == 2
    before = pool.stats
    pool.score_many([("ok:c3", "c"), ("ok:c1", "c")])  # c3 is remembered; c1, the oldest, was forgotten
    assert delta(pool, before) == {"cached": 1, "dispatched": 1}


def test_identical_pairs_in_one_batch_are_checked_once(pool):
    before = pool.stats
    scores = pool.score_many([("ok:i", "i")] * 5 + [("ok:j", "i")])
    assert [s.correct for s in scores] == [True] * 5 + [False]
    assert delta(pool, before) == {"dispatched": 2, "cached": 4}


def test_quick_verdicts_never_reach_a_worker(pool):
    before = pool.stats
    scores = pool.score_many([("quick:k", "k"), ("quick:x", "k")])
    assert [s.correct for s in scores] == [True, False]
    assert delta(pool, before) == {"quick": 2}


def test_an_oversize_input_is_an_error_without_being_run():
    with VerifierPool(Scripted(), workers=1, max_input_chars=10) as small:
        scores = small.score_many([("ok:" + "1" * 10, "1"), ("ok:1", "1" * 11)])
        assert [s.status for s in scores] == ["error", "error"]
        assert small.stats["dispatched"] == 0
        assert small.stats["errors"] == 2


# Process hygiene


def shared_helpers_running() -> None:
    """Start multiprocessing's shared helpers (resource tracker, fork server), which outlive any pool."""
    resource_tracker.ensure_running()
    forkserver.ensure_running()


def test_close_kills_every_worker_and_leaves_no_child_process(tmp_path):
    shared_helpers_running()
    before = children()
    others = {p.pid for p in multiprocessing.active_children()}
    pid_file = tmp_path / "grandchild.pid"
    pool = VerifierPool(Scripted(), workers=2, timeout=TIMEOUT)
    pool.score_many([("ok:1", "1"), (f"grandchild:{pid_file}", "1"), ("hang", "1")])
    workers = {p.pid for p in multiprocessing.active_children()} - others
    assert len(workers) == 2
    pool.close()
    assert gone(workers | {int(pid_file.read_text())})
    assert {p.pid for p in multiprocessing.active_children()} == others
    assert children() == before


def test_workers_die_with_their_parent_even_mid_check_in_c_code():
    script = (
        "import multiprocessing, os, sys, threading, time\n"
        f"sys.path.insert(0, {str(REPO)!r})\n"
        "from tests.verifiers.test_pool import Scripted\n"
        "from rlvr_factory.verifiers.pool import VerifierPool\n"
        "pool = VerifierPool(Scripted(), workers=2, timeout=60)\n"
        "pool.start()\n"
        "threading.Thread(target=pool.score_many, args=([('bigint', '1'), ('hang', '1')],), daemon=True).start()\n"
        "time.sleep(0.5)\n"
        "print(*[p.pid for p in multiprocessing.active_children()], flush=True)\n"
        "os._exit(0)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    workers = {int(pid) for pid in result.stdout.split()}
    assert len(workers) == 2
    assert gone(workers)


def test_workers_lost_with_the_thread_that_started_them_are_replaced_without_losing_a_check():
    pool = VerifierPool(Scripted(), workers=2)
    starter = threading.Thread(target=pool.start)
    starter.start()
    starter.join()  # the kernel kills the workers with the thread that spawned them
    with pool:
        scores = pool.score_many([("ok:1", "1"), ("ok:2", "2"), ("ok:3", "3")])
        assert [(s.status, s.correct) for s in scores] == [("ok", True)] * 3
        assert pool.stats["infra_errors"] == 0


# Misuse


def test_a_closed_pool_refuses_work():
    pool = VerifierPool(Scripted())
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.score_many([("ok:1", "1")])


@pytest.mark.parametrize("kwargs", [{"workers": 0}, {"timeout": 0}, {"max_input_chars": -1}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        VerifierPool(Scripted(), **kwargs)


def test_a_verifier_that_cannot_reach_a_worker_is_refused():
    class Local(Scripted):
        pass

    with pytest.raises(TypeError, match="picklable"):
        VerifierPool(Local())
    with pytest.raises(TypeError, match="quick_score"):
        VerifierPool(object())


def test_pairs_that_are_not_strings_are_refused(pool):
    with pytest.raises(TypeError, match="strings"):
        pool.score_many([(None, "1")])


# Adversarial suite: the real Math-Verify path, with only the pool to stop it


def nest(opening: str, core: str, closing: str, depth: int) -> str:
    """`core` wrapped `depth` times in `opening` ... `closing`."""
    return opening * depth + core + closing * depth


JUNK = random.Random(0)
ADVERSARIAL = {
    "power tower 5^5^5^5^5": r"5^{5^{5^{5^5}}}",
    "power tower 10**10**10": "10**10**10",
    "power tower 9^9^9^9": r"9^{9^{9^9}}",
    "power tower of twos": r"2^{2^{2^{2^{2^{2^{2}}}}}}",
    "power of a power": r"(10^{10})^{10^{10}}",
    "tiny power": r"10^{-10^{10}}",
    "tower of e": r"e^{e^{e^{e^{e^{e}}}}}",
    "root of a huge degree": r"\sqrt[10^{10}]{2}",
    "nested log chain": nest(r"\log(", "2", ")", 200),
    "nested ln chain": nest(r"\ln{", "x", "}", 200),
    "factorial 100000!": "100000!",
    "factorial (10^10)!": r"(10^{10})!",
    "factorial of a factorial": "(100!)!",
    "huge binomial": r"\binom{10^{10}}{5 \cdot 10^{9}}",
    "100 kB of ones": "1" * 100_000,
    "100 kB sum": "x+" * 50_000 + "x",
    "100 kB of parentheses": "(" * 50_000,
    "long decimal": "1." + "0" * 50_000 + "1",
    "unbalanced fraction": r"\frac{1}{2",
    "open braces": "{" * 4_000,
    "close braces": "}" * 4_000,
    "open sqrt": r"\sqrt{",
    "unclosed left": r"\left( 1 + \right",
    "binary junk 4 kB": JUNK.randbytes(4_096).decode("latin-1"),
    "binary junk 60 kB with NULs": JUNK.randbytes(60_000).decode("latin-1"),
    "nested fractions 500 deep": nest(r"\frac{1}{", "2", "}", 500),
    "nested square roots": nest(r"\sqrt{", "2", "}", 300),
    "huge matrix": r"\begin{pmatrix}"
    + r"\\".join("&".join(f"{i * j}^{{{i + j}}}" for j in range(60)) for i in range(60))
    + r"\end{pmatrix}",
    "sum to 10^10": r"\sum_{k=1}^{10^{10}} k",
    "product to 10^9": r"\prod_{k=1}^{10^{9}} k",
    "integral": r"\int_0^{1} e^{-x^2} \, dx",
    "integral of a tower": r"\int x^{x^{x}} dx",
    "huge polynomial power": "(x+1)^{100000}",
    "cancelling huge powers": r"x^{10^{10}} - x^{10^{10}} + 41",
    "deep exponent of a float": r"1.0000001^{10^{12}}",
}


def test_the_adversarial_suite_has_at_least_thirty_inputs():
    assert len(ADVERSARIAL) >= 30


def test_every_adversarial_input_is_judged_or_stopped_within_its_limit_and_leaves_no_process():
    shared_helpers_running()
    before = children()
    # What one fresh worker costs here (spawn, import Math-Verify, a first check): each timeout
    # replaces its worker, and on a slow or loaded machine that restart is part of the slot's time.
    start = time.monotonic()
    with VerifierPool(MathVerifyScorer(), workers=1, timeout=TIMEOUT) as pool:
        assert pool.score_many([(r"\boxed{42}", "42")])[0].correct
    cold_start = time.monotonic() - start
    workers = 4  # more workers than cores is fine: the limit is wall-clock time
    pairs = [(rf"The answer is \boxed{{{text}}}", "42") for text in ADVERSARIAL.values()]
    pairs.append((r"\boxed{42}", "42"))
    with VerifierPool(MathVerifyScorer(), workers=workers, timeout=TIMEOUT, max_input_chars=150_000) as pool:
        start = time.monotonic()
        scores = pool.score_many(pairs)
        elapsed = time.monotonic() - start
        stats = pool.stats
    statuses = dict(zip(list(ADVERSARIAL) + ["plain 42"], [s.status for s in scores]))
    print(f"\nadversarial batch: {elapsed:.1f} s, cold start {cold_start:.1f} s, {stats}\n{statuses}")
    assert set(statuses.values()) <= {"ok", "timeout", "error"}
    assert scores[-1].correct
    assert not any(s.correct for s in scores[:-1])
    restart_seconds = math.ceil(stats["restarts"] / workers) * cold_start  # per slot, measured above
    assert elapsed <= math.ceil(len(pairs) / workers) * (TIMEOUT + SLACK) + restart_seconds
    assert elapsed <= (stats["timeouts"] / workers + 3) * (TIMEOUT + SLACK) + restart_seconds  # + the quick ones
    assert children() == before


def test_the_projects_math_verifier_runs_in_the_pool():
    pairs = [(r"so \boxed{42}", "42"), (r"\boxed{41}", "42"), (r"\boxed{5^{5^{5^{5^5}}}}", "42")]
    with VerifierPool(MathVerifier(), workers=2, timeout=TIMEOUT) as pool:
        scores = pool.score_many(pairs)
    assert [s.correct for s in scores] == [True, False, False]
    assert scores[0].status == "ok"
    assert scores[2].status in {"ok", "timeout", "error"}


def test_a_batched_verifier_gets_its_checks_in_batches_streamed_in_order_each_pair_checked_once():
    checks = [(f"ok:{i % 5}", str(i % 5)) for i in range(7)] + [("ok:1", "1"), ("quick:2", "2"), ("ok:9", "8")]
    with VerifierPool(BatchedScripted(), workers=2, timeout=5.0, scheduler={"max_in_flight": 1}) as pool:
        scores = list(pool.score_stream(iter(checks)))
        submitted = pool.scheduler.metrics().counters["submitted"]
        stats = pool.stats
    assert [s.reward for s in scores] == [1.0] * 9 + [0.0]
    assert all(s.status == "ok" for s in scores)
    assert stats["dispatched"] == 6 and stats["quick"] == 1 and stats["cached"] == 3
    assert submitted == 2  # ok:0-2, then ok:3, ok:4, ok:9: one job per three distinct checks


@pytest.mark.parametrize("workers,timeout,says", [
    (0, 5.0, "scheduler.workers: must be > 0"),  # no worker would ever take a check: every batch would hang
    (1, float("nan"), "scheduler.timeout_seconds: must be a finite number"),
    (1, -1.0, "scheduler.timeout_seconds: must be > 0"),
])
def test_a_pool_without_workers_or_with_a_bad_time_limit_is_refused_before_it_starts(workers, timeout, says):
    # typed scheduler settings (`SchedulerConfig`) or a mapping: the pool's own workers and limit are checked with them
    from rlvr_factory.scheduler import SchedulerConfig

    for scheduler in (None, {"backend": "local"}, SchedulerConfig()):
        with pytest.raises(ValueError, match=says):
            VerifierPool(MathVerifier(), workers=workers, timeout=timeout, scheduler=scheduler)
