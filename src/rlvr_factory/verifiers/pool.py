"""Run verifier checks in killable worker processes with a wall-clock limit per check.

A sympy-touching check can hang in C-level big-integer work that no signal interrupts
(``5^{5^{5^{5^5}}}``), so each full check runs in a worker process of its own process group;
a worker that overruns its deadline is killed with its whole group and replaced. Cheap
verdicts (`Verifier.quick_score`), oversize inputs and repeated pairs never reach a worker.

    with VerifierPool(MathVerifier(), workers=4, timeout=5.0) as pool:
        scores = pool.score_many([(completion, gold), ...])

A pool is not thread-safe: use it from one thread at a time. On Linux the kernel kills the
workers when the thread that started them ends; the pool then replaces them and retries their checks.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import pickle
import resource
import signal
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Protocol

from rlvr_factory.verifiers.score import Score

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 120.0  # a worker that is not ready by then means the verifier cannot load
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

Pair = tuple[str, str]  # (gold, completion): the cache key of one check


class Verifier(Protocol):
    """What the pool runs: a cheap verdict in the caller's process and a full check in a worker."""

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """A verdict without sympy, safe to run in the caller's process; None when the full check is needed."""

    def score(self, completion: str, gold: str) -> Score:
        """The full check; it may touch sympy and hang on adversarial input."""


def _failure(status: str) -> Score:
    """The zero-reward verdict of a check that could not judge (`timeout`, `error`, `infra_error`)."""
    return Score(reward=0.0, correct=False, status=status)


@dataclass
class _Worker:
    """One worker process and the parent's end of its pipe."""

    process: BaseProcess
    conn: Connection
    ready: bool = False
    job: tuple[Pair, int] | None = None  # (pair, attempt) while a check runs
    born: float = field(default_factory=time.monotonic)
    deadline: float = float("inf")  # monotonic time by which the worker must answer


@dataclass
class _Batch:
    """The checks of one `score_many` call: waiting, waiting for a retry, and done."""

    queue: deque[Pair]
    retries: deque[tuple[Pair, float]] = field(default_factory=deque)  # (pair, when its worker died)
    results: dict[Pair, Score] = field(default_factory=dict)

    def next_job(self, worker: _Worker) -> tuple[Pair, int] | None:
        """The (pair, attempt) this idle worker should run next, or None."""
        if self.retries and worker.born > self.retries[0][1]:  # a retry runs on a worker started since
            return self.retries.popleft()[0], 1
        if self.queue:
            return self.queue.popleft(), 0
        return None


class VerifierPool:
    """A pool of verifier worker processes with a wall-clock limit per check and a result cache.

    `workers` processes (started on entering the context, else on first use) run `verifier.score`;
    each check gets `timeout` seconds of wall-clock time; inputs longer than `max_input_chars` are
    not run; each worker's address space is capped at `memory_limit_mb` (None: no cap).
    """

    def __init__(
        self,
        verifier: Verifier,
        workers: int = 2,
        timeout: float = 5.0,
        max_input_chars: int = 100_000,
        memory_limit_mb: int | None = 4096,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        if max_input_chars < 0:
            raise ValueError(f"max_input_chars must be non-negative, got {max_input_chars}")
        if not callable(getattr(verifier, "quick_score", None)) or not callable(getattr(verifier, "score", None)):
            raise TypeError(f"the verifier must have quick_score and score methods, got {type(verifier).__name__}")
        try:
            self._verifier_bytes = pickle.dumps(verifier)
        except Exception as e:
            raise TypeError(f"the verifier must be picklable to reach the worker processes: {e}") from e
        self.verifier = verifier
        self.workers = workers
        self.timeout = timeout
        self.max_input_chars = max_input_chars
        self.memory_limit_mb = memory_limit_mb
        self._context = multiprocessing.get_context("spawn")  # fork would copy the caller's torch/OpenMP threads
        self._workers: list[_Worker] = []
        self._cache: dict[Pair, Score] = {}
        self._close = weakref.finalize(self, _stop_all, self._workers)  # also runs if the pool is dropped unclosed
        self._stats = dict.fromkeys(
            ("quick", "cached", "dispatched", "timeouts", "errors", "infra_errors", "restarts"), 0
        )

    def __enter__(self) -> VerifierPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def stats(self) -> dict[str, int]:
        """Counts so far: quick verdicts, cache hits, checks dispatched, failures by status, worker restarts."""
        return dict(self._stats)

    def start(self) -> None:
        """Start any missing workers and wait until every worker is ready for a check."""
        self._check_open()
        self._fill()
        while not all(w.ready for w in self._workers):
            self._await_workers(_Batch(deque()))

    def close(self) -> None:
        """Kill every worker with its process group and reap it; the pool cannot be used afterwards."""
        self._close()

    def score_many(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        """A Score for each (completion, gold) pair, in input order; a failing item gets a status, never raises."""
        self._check_open()
        for completion, gold in pairs:
            if not isinstance(completion, str) or not isinstance(gold, str):
                raise TypeError(f"pairs must be (completion, gold) strings, got ({type(completion)}, {type(gold)})")
        scores: list[Score | None] = [None] * len(pairs)
        waiting: dict[Pair, list[int]] = {}
        for i, (completion, gold) in enumerate(pairs):
            if (gold, completion) in waiting:  # a repeat within this batch is checked once
                self._stats["cached"] += 1
                waiting[(gold, completion)].append(i)
                continue
            scores[i] = self._screen(completion, gold)
            if scores[i] is None:
                waiting[(gold, completion)] = [i]
        for pair, score in self._run(list(waiting)).items():
            self._count(score)
            if score.status != "infra_error":  # an infrastructure failure may pass on a later try
                self._cache[pair] = score
            for i in waiting[pair]:
                scores[i] = score
        return scores  # type: ignore[return-value]  # every slot is filled above

    def _check_open(self) -> None:
        """Refuse work once the pool is closed."""
        if not self._close.alive:
            raise RuntimeError("this VerifierPool is closed; create a new one")

    def _fill(self) -> None:
        """Start workers until there are `workers` of them."""
        while len(self._workers) < self.workers:
            self._workers.append(self._start_worker())

    def _screen(self, completion: str, gold: str) -> Score | None:
        """The verdict reached without a worker (oversize, cached, quick), or None."""
        if len(completion) > self.max_input_chars or len(gold) > self.max_input_chars:
            self._stats["errors"] += 1
            return _failure("error")
        cached = self._cache.get((gold, completion))
        if cached is not None:
            self._stats["cached"] += 1
            return cached
        try:
            score = self.verifier.quick_score(completion, gold)
        except Exception as e:  # noqa: BLE001  # any failure of one item is that item's status
            logger.warning("quick_score raised %r; scored as an error", e)
            self._stats["errors"] += 1
            return _failure("error")
        if score is not None:
            self._stats["quick"] += 1
        return score

    def _count(self, score: Score) -> None:
        """Add a worker's verdict to the failure counters."""
        key = {"timeout": "timeouts", "error": "errors", "infra_error": "infra_errors"}.get(score.status)
        if key is not None:
            self._stats[key] += 1

    def _run(self, pairs: list[Pair]) -> dict[Pair, Score]:
        """The full check of each pair, run by idle workers as they free up."""
        batch = _Batch(deque(pairs))
        self._stats["dispatched"] += len(pairs)
        try:
            while len(batch.results) < len(pairs):
                self._fill()
                for worker in list(self._workers):
                    job = batch.next_job(worker) if worker.ready and worker.job is None else None
                    if job is not None:
                        self._assign(worker, job, batch)
                self._await_workers(batch)
        except BaseException:
            for worker in [w for w in self._workers if w.job is not None]:
                self._workers.remove(worker)  # its answer would otherwise arrive in a later batch
                _stop(worker)
            raise
        return batch.results

    def _start_worker(self) -> _Worker:
        """A new worker process, not yet ready, with the verifier sent to it."""
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main,
            args=(child_conn, self._verifier_bytes, os.getpid(), self.memory_limit_mb),
            name="verifier-worker",
            daemon=True,
        )
        process.start()
        child_conn.close()  # so the parent reads EOF when the worker dies
        return _Worker(process, parent_conn, deadline=time.monotonic() + STARTUP_TIMEOUT_S)

    def _assign(self, worker: _Worker, job: tuple[Pair, int], batch: _Batch) -> None:
        """Send one check to an idle worker and start its clock."""
        worker.job = job
        (gold, completion), _ = job
        try:
            worker.conn.send((completion, gold))
        except OSError:
            self._lost(worker, batch)
            return
        worker.deadline = time.monotonic() + self.timeout

    def _await_workers(self, batch: _Batch) -> None:
        """Wait for the next answer or deadline among busy and starting workers, and handle what happened."""
        active = [w for w in self._workers if w.job is not None or not w.ready]
        if not active:
            return
        next_deadline = min(w.deadline for w in active)
        readable = wait([w.conn for w in active], timeout=max(0.0, next_deadline - time.monotonic()))
        now = time.monotonic()
        for worker in active:
            if worker.conn in readable:
                self._receive(worker, batch)
            elif now >= worker.deadline:
                self._overrun(worker, batch)

    def _receive(self, worker: _Worker, batch: _Batch) -> None:
        """Take a worker's message: its ready signal or the verdict of its check."""
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            self._lost(worker, batch)
            return
        worker.deadline = float("inf")
        if not worker.ready:
            worker.ready = True
            return
        score, problem = message
        if problem is not None:
            logger.warning("the verifier raised %s; scored as an error", problem)
        pair, _ = worker.job
        batch.results[pair] = score
        worker.job = None

    def _overrun(self, worker: _Worker, batch: _Batch) -> None:
        """Replace a worker past its deadline; its check is a timeout."""
        self._replace(worker)
        if not worker.ready:
            raise RuntimeError(f"a verifier worker did not start within {STARTUP_TIMEOUT_S:.0f} s")
        pair, _ = worker.job
        batch.results[pair] = _failure("timeout")

    def _lost(self, worker: _Worker, batch: _Batch) -> None:
        """Replace a worker that died; its check is retried once on a fresh worker, then an infra error."""
        died = time.monotonic()
        self._replace(worker)
        exitcode = worker.process.exitcode
        if not worker.ready:
            raise RuntimeError(
                f"a verifier worker exited (code {exitcode}) before it was ready; "
                "check that the verifier unpickles in a fresh interpreter and that the main script "
                "runs its work under `if __name__ == '__main__':` (workers are spawned)"
            )
        pair, attempt = worker.job
        logger.warning("a verifier worker died (exit code %s) during a check (attempt %d)", exitcode, attempt + 1)
        if attempt == 0:
            batch.retries.append((pair, died))
        else:
            batch.results[pair] = _failure("infra_error")

    def _replace(self, worker: _Worker) -> None:
        """Stop a worker and start a fresh one in its place, so it warms up while the others work."""
        _stop(worker)
        self._workers[self._workers.index(worker)] = self._start_worker()
        self._stats["restarts"] += 1


def _stop(worker: _Worker) -> None:
    """Kill a worker's whole process group and reap the worker."""
    try:
        os.killpg(worker.process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the worker has not made its group yet, or the group is gone
    worker.process.kill()
    worker.process.join()
    worker.conn.close()


def _stop_all(workers: list[_Worker]) -> None:
    """Stop every worker in the list and empty it."""
    while workers:
        _stop(workers.pop())


def _worker_main(conn: Connection, verifier_bytes: bytes, parent_pid: int, memory_limit_mb: int | None) -> None:
    """A worker's life: lead a new process group, die with the parent, then run checks until EOF."""
    os.setsid()
    _die_with_parent(parent_pid)
    if memory_limit_mb is not None:
        _limit_memory(memory_limit_mb)
    verifier = pickle.loads(verifier_bytes)
    conn.send("ready")
    while True:
        try:
            completion, gold = conn.recv()
        except (EOFError, OSError):  # the parent closed the pool
            return
        conn.send(_check(verifier, completion, gold))


def _check(verifier: Verifier, completion: str, gold: str) -> tuple[Score, str | None]:
    """The verifier's Score, or an error Score and what went wrong."""
    try:
        score = verifier.score(completion, gold)
        if not isinstance(score, Score):
            raise TypeError(f"score returned a {type(score).__name__}, not a Score")
        return score, None
    except Exception as e:  # noqa: BLE001  # any failure of one item is that item's status
        return _failure("error"), f"{type(e).__name__}: {str(e)[:200]}"


def _die_with_parent(parent_pid: int) -> None:
    """Have the kernel kill this process when its parent exits (Linux), else watch the parent from a thread."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died before the kernel was told
        os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    """Exit this process once its parent is gone."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def _limit_memory(memory_limit_mb: int) -> None:
    """Cap this process's address space, so a memory blowup raises MemoryError here, not elsewhere."""
    limit = memory_limit_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
