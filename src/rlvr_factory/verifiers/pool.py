"""Run verifier checks as scheduler jobs: a hard wall-clock limit per check, a cache, a quick path.

A sympy-touching check can hang in C-level big-integer work that no signal interrupts
(``5^{5^{5^{5^5}}}``), so each full check runs as a job of a `rlvr_factory.scheduler.Scheduler`:
in a worker process of its own process group (or a Ray actor), killed with its whole group and
replaced when it overruns. Cheap verdicts (`Verifier.quick_score`), oversize inputs and repeated
pairs never reach a worker. A check whose worker dies is retried (`scheduler.retry`), then scored
`infra_error`; a check that overruns is a `timeout`; a verifier that raises is an `error`.

    with VerifierPool(MathVerifier(), workers=4, timeout=5.0) as pool:
        scores = pool.score_many([(completion, gold), ...])
        for score in pool.score_stream(pairs_read_lazily): ...  # in order, each as soon as it and those before are done

A pool is not thread-safe: use it from one thread at a time.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from rlvr_factory.scheduler import JobResult, Scheduler, create_scheduler
from rlvr_factory.verifiers.score import Score

logger = logging.getLogger(__name__)

Pair = tuple[str, str]  # (gold, completion): the cache key of one check
# A verifier's full check is retried once when its worker dies; an overrun is a property of the input.
DEFAULT_RETRY = {"max_attempts": 2, "retry_timeouts": False}


class Verifier(Protocol):
    """What the pool runs: a cheap verdict in the caller's process and a full check in a worker."""

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """A verdict without sympy, safe to run in the caller's process; None when the full check is needed."""

    def score(self, completion: str, gold: str) -> Score:
        """The full check; it may touch sympy, start a sandbox, hang on adversarial input, or raise
        `rlvr_factory.scheduler.InfraError` when the infrastructure (not the answer) failed."""


class FullCheck:
    """A verifier's full check as a scheduler job: (completion, gold) -> Score."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def __call__(self, pair: tuple[str, str]) -> Score:
        score = self.verifier.score(*pair)
        if not isinstance(score, Score):
            raise TypeError(f"score returned a {type(score).__name__}, not a Score")
        return score


def _failure(status: str, message: str) -> Score:
    """The zero-reward verdict of a check that could not judge (`timeout`, `error`, `infra_error`), saying why."""
    return Score(reward=0.0, correct=False, status=status, message=message)


class VerifierPool:
    """A verifier's full checks on a scheduler, with a wall-clock limit per check and a result cache.

    `workers` workers (started on entering the context, else on first use) run `verifier.score`;
    each check gets `timeout` seconds of wall-clock time; inputs longer than `max_input_chars` are
    not run; each local worker's address space is capped at `memory_limit_mb` (None: no cap).
    `scheduler` holds the rest of the scheduler's settings (`backend`, `retry`, `ray`, ...; see
    `rlvr_factory.scheduler.create_scheduler`); by default local workers, one retry of a check
    whose worker died, none of a timeout.
    """

    def __init__(
        self,
        verifier: Verifier,
        workers: int = 2,
        timeout: float = 5.0,
        max_input_chars: int = 100_000,
        memory_limit_mb: int | None = 4096,
        scheduler: dict[str, Any] | None = None,
    ) -> None:
        if max_input_chars < 0:
            raise ValueError(f"max_input_chars must be non-negative, got {max_input_chars}")
        if not callable(getattr(verifier, "quick_score", None)) or not callable(getattr(verifier, "score", None)):
            raise TypeError(f"the verifier must have quick_score and score methods, got {type(verifier).__name__}")
        settings = {"retry": DEFAULT_RETRY, **(scheduler or {})}
        if {"workers", "timeout_seconds"} & set(settings):
            raise ValueError("set a VerifierPool's workers and timeout through its own arguments, not `scheduler`")
        self.verifier = verifier
        self.workers = workers
        self.timeout = timeout
        self.max_input_chars = max_input_chars
        self.memory_limit_mb = memory_limit_mb
        self._check = FullCheck(verifier)
        self.scheduler: Scheduler = create_scheduler(
            {**settings, "workers": workers, "timeout_seconds": timeout}, memory_limit_mb
        )
        try:
            self.scheduler.register(self._check)  # workers load the verifier before they report ready
        except TypeError as e:
            self.scheduler.close()
            raise TypeError(f"the verifier must be picklable to reach the worker processes: {e.__cause__}") from e
        self._cache: dict[Pair, Score] = {}
        self._stats = dict.fromkeys(("quick", "cached", "dispatched", "timeouts", "errors", "infra_errors"), 0)

    def __enter__(self) -> VerifierPool:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def stats(self) -> dict[str, int]:
        """Counts so far: quick verdicts, cache hits, checks dispatched, failures by status,
        checks retried and workers replaced."""
        counters = self.scheduler.metrics().counters
        return {**self._stats, "retries": counters["retries"], "restarts": counters["restarts"]}

    def start(self) -> None:
        """Start any missing workers and wait until every worker is ready for a check."""
        self.scheduler.start()

    def close(self) -> None:
        """Kill every worker with its process group; the pool cannot be used afterwards."""
        self.scheduler.close()

    def score_many(self, pairs: Sequence[tuple[str, str]]) -> list[Score]:
        """A Score for each (completion, gold) pair, in input order; a failing item gets a status, never raises."""
        return list(self.score_stream(pairs))

    def score_stream(self, pairs: Iterable[tuple[str, str]]) -> Iterator[Score]:
        """A Score for each (completion, gold) pair, in input order, each handed out once it and every
        pair before it are done; `pairs` is read lazily, at most the scheduler's `max_in_flight` checks ahead.

        A pair repeated while its first check is still running is checked once; a failing item gets a
        status, never raises. Closing the iterator early abandons the checks still running.
        """
        self._check_open()
        window: deque[tuple[Pair, Score | int]] = deque()  # each pair's verdict, or the job that will give it
        running: dict[Pair, int] = {}  # pair -> its job, while the job is in the window
        references: Counter[int] = Counter()  # job -> window entries waiting for it
        finished: dict[int, Score] = {}
        try:
            for completion, gold in pairs:
                if not isinstance(completion, str) or not isinstance(gold, str):
                    raise TypeError(f"pairs must be (completion, gold) strings, got ({type(completion)}, {type(gold)})")
                key = (gold, completion)
                if key in running:  # a repeat: checked once
                    self._stats["cached"] += 1
                    entry: Score | int = running[key]
                else:
                    entry = self._screen(completion, gold)
                    if entry is None:
                        entry = running[key] = self.scheduler.submit(self._check, (completion, gold))
                        self._stats["dispatched"] += 1
                window.append((key, entry))
                if isinstance(entry, int):
                    references[entry] += 1
                while window and (isinstance(window[0][1], Score) or len(running) >= self.scheduler.max_in_flight):
                    yield self._next(window, running, references, finished)
            while window:
                yield self._next(window, running, references, finished)
        finally:
            if running:  # interrupted (an exception, or the consumer stopped): drop what is still running
                self.scheduler.abandon(j for j in running.values() if j not in finished)

    def _next(self, window: deque, running: dict[Pair, int], references: Counter, finished: dict[int, Score]) -> Score:
        """The verdict at the head of the window, waiting for its job if it has one."""
        key, entry = window.popleft()
        if isinstance(entry, Score):
            return entry
        if entry not in finished:
            finished[entry] = score = self._verdict(self.scheduler.wait(entry))
            if score.status != "infra_error":  # an infrastructure failure may pass on a later try
                self._cache[key] = score
        score = finished[entry]
        references[entry] -= 1
        if not references[entry]:
            del references[entry], finished[entry]
            if running.get(key) == entry:
                del running[key]
        return score

    def _check_open(self) -> None:
        """Refuse work once the pool is closed."""
        if self.scheduler.closed:
            raise RuntimeError("this VerifierPool is closed; create a new one")

    def _screen(self, completion: str, gold: str) -> Score | None:
        """The verdict reached without a worker (oversize, cached, quick), or None."""
        if len(completion) > self.max_input_chars or len(gold) > self.max_input_chars:
            self._stats["errors"] += 1
            return _failure("error", f"input longer than max_input_chars={self.max_input_chars}")
        cached = self._cache.get((gold, completion))
        if cached is not None:
            self._stats["cached"] += 1
            return cached
        try:
            score = self.verifier.quick_score(completion, gold)
        except Exception as e:  # noqa: BLE001  # any failure of one item is that item's status
            logger.warning("quick_score raised %r; scored as an error", e)
            self._stats["errors"] += 1
            return _failure("error", f"the verifier's quick check raised {type(e).__name__}: {e}")
        if score is not None:
            self._stats["quick"] += 1
        return score

    def _verdict(self, result: JobResult) -> Score:
        """The Score of a finished check, counting its failure."""
        if result.status == "ok":
            return result.value
        if result.status == "error":
            logger.warning("the verifier raised %s; scored as an error", result.error)
        key = {"timeout": "timeouts", "error": "errors", "infra_error": "infra_errors"}[result.status]
        self._stats[key] += 1
        why = {"timeout": f"the check ran past its {self.timeout:g} s limit and was killed",
               "error": f"the verifier raised: {result.error}",
               "infra_error": f"the check's infrastructure failed on every attempt ({result.attempts}): {result.error}"}
        return _failure(result.status, why[result.status])
