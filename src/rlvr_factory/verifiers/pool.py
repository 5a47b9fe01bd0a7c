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
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from rlvr_factory.scheduler import JobResult, Scheduler, SchedulerConfig, create_scheduler
from rlvr_factory.schema import parse, to_dict
from rlvr_factory.verifiers.isolation import require_sandbox, start_servers, time_limit
from rlvr_factory.verifiers.score import Score

logger = logging.getLogger(__name__)

Pair = tuple[str, str]  # (gold, completion): the cache key of one check
CACHE_ENTRIES = 65_536  # verdicts a pool remembers (least recently used forgotten first)
_FAILURE_COUNTERS = {"timeout": "timeouts", "error": "errors", "infra_error": "infra_errors"}  # status -> stat


class Verifier(Protocol):
    """What the pool runs: a cheap verdict in the caller's process and a full check in a worker."""

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """A verdict without sympy, safe to run in the caller's process; None when the full check is needed."""

    def score(self, completion: str, gold: str) -> Score:
        """The full check; it may touch sympy, start a sandbox, hang on adversarial input, or raise
        `rlvr_factory.scheduler.InfraError` when the infrastructure (not the answer) failed."""


class FullCheck:
    """A verifier's full check as a scheduler job: (completion, gold) -> Score.

    Unpickled in a worker, it starts the scoring servers of the sandboxed verifiers it holds before the
    worker reports ready (`isolation.start_servers`); each check's sandboxed part ends within the pool's
    `timeout` (`isolation.time_limit`), so the sandbox reports a `timeout` before the worker is killed."""

    def __init__(self, verifier: Verifier, timeout: float) -> None:
        self.verifier = verifier
        self.timeout = timeout

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        start_servers(self.verifier)

    def __call__(self, pair: tuple[str, str]) -> Score:
        with time_limit(self.timeout):
            score = self.verifier.score(*pair)
        if not isinstance(score, Score):
            raise TypeError(f"score returned a {type(score).__name__}, not a Score")
        return score


class BatchCheck:
    """A batched verifier's full check as a scheduler job: [(completion, gold), ...] -> [Score, ...]."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier

    def __call__(self, pairs: list[tuple[str, str]]) -> list[Score]:
        scores = self.verifier.score_batch(pairs)
        if len(scores) != len(pairs) or not all(isinstance(s, Score) for s in scores):
            raise TypeError(f"score_batch must return one Score per pair ({len(pairs)}), got {scores!r:.200}")
        return scores


def batch_size_of(verifier: Verifier) -> int | None:
    """How many checks a batched verifier (one with `score_batch` and `batch_size`) takes per job; None: one."""
    return getattr(verifier, "batch_size", None) if callable(getattr(verifier, "score_batch", None)) else None


@dataclass(eq=False)
class _Job:
    """The checks of one scheduler job (one, or a batch), its id once submitted, its verdicts once
    finished, and how many window entries still wait for them."""

    checks: list[tuple[str, str]] = field(default_factory=list)
    id: int | None = None
    scores: list[Score] | None = None
    waiting: int = 0


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
    whose worker died, none of a timeout. A batched verifier (`score_batch`, `batch_size`: a
    reward model's forward pass) gets up to `batch_size` checks per job, and `timeout` bounds the
    job; a batch that fails gives each of its checks the failure's status.
    """

    def __init__(
        self,
        verifier: Verifier,
        workers: int = 2,
        timeout: float = 5.0,
        max_input_chars: int = 100_000,
        memory_limit_mb: int | None = 4096,
        scheduler: SchedulerConfig | Mapping[str, Any] | None = None,
    ) -> None:
        if max_input_chars < 0:
            raise ValueError(f"max_input_chars must be non-negative, got {max_input_chars}")
        if not callable(getattr(verifier, "quick_score", None)) or not callable(getattr(verifier, "score", None)):
            raise TypeError(f"the verifier must have quick_score and score methods, got {type(verifier).__name__}")
        require_sandbox(verifier)
        if isinstance(scheduler, Mapping) and {"workers", "timeout_seconds"} & set(scheduler):
            raise ValueError("set a VerifierPool's workers and timeout through its own arguments, not `scheduler`")
        config = parse(SchedulerConfig, scheduler, "scheduler")
        self.verifier = verifier
        self.workers = workers
        self.timeout = timeout
        self.max_input_chars = max_input_chars
        self.memory_limit_mb = memory_limit_mb
        self._batch_size = batch_size_of(verifier)
        self._check = FullCheck(verifier, timeout) if self._batch_size is None else BatchCheck(verifier)
        self.scheduler: Scheduler = create_scheduler(  # checked whole, the pool's workers and timeout included
            {**to_dict(config), "workers": workers, "timeout_seconds": timeout}, memory_limit_mb
        )
        try:
            self.scheduler.register(self._check)  # workers load the verifier before they report ready
        except TypeError as e:
            self.scheduler.close()
            raise TypeError(f"the verifier must be picklable to reach the worker processes: {e.__cause__}") from e
        self._cache: OrderedDict[Pair, Score] = OrderedDict()  # the latest CACHE_ENTRIES verdicts
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
        pair before it are done; `pairs` is read lazily, at most the scheduler's `max_in_flight` jobs ahead
        (a job: one check, or a batched verifier's `batch_size` checks).

        A pair repeated while its first check is still running is checked once; a failing item gets a
        status, never raises. Closing the iterator early abandons the checks still running.
        """
        self._check_open()
        window: deque[tuple[Pair, Score | tuple[_Job, int]]] = deque()  # each pair's verdict, or its job's slot
        running: dict[Pair, tuple[_Job, int]] = {}  # pair -> its slot, while its job is in the window
        live: set[_Job] = set()  # submitted jobs with window entries still waiting
        job = _Job()  # the job collecting checks, submitted when full or when the window's head needs it
        try:
            for completion, gold in pairs:
                if not isinstance(completion, str) or not isinstance(gold, str):
                    raise TypeError(f"pairs must be (completion, gold) strings, got ({type(completion)}, {type(gold)})")
                key = (gold, completion)
                if key in running:  # a repeat: checked once
                    self._stats["cached"] += 1
                    entry: Score | tuple[_Job, int] = running[key]
                else:
                    entry = self._screen(completion, gold)
                    if entry is None:
                        if job.id is not None:
                            job = _Job()
                        entry = running[key] = (job, len(job.checks))
                        job.checks.append((completion, gold))
                        self._stats["dispatched"] += 1
                        if len(job.checks) == (self._batch_size or 1):
                            self._submit(job, live)
                window.append((key, entry))
                if not isinstance(entry, Score):
                    entry[0].waiting += 1
                while window and (isinstance(window[0][1], Score) or len(live) >= self.scheduler.max_in_flight):
                    yield self._next(window, running, live)
            while window:
                yield self._next(window, running, live)
        finally:
            # interrupted (an exception, or the consumer stopped): drop what is still running
            self.scheduler.abandon(j.id for j in live if j.scores is None)

    def _submit(self, job: _Job, live: set[_Job]) -> None:
        """Send a job's checks to the scheduler: one check, or a batched verifier's list of them."""
        job.id = self.scheduler.submit(self._check, job.checks if self._batch_size else job.checks[0])
        live.add(job)

    def _next(self, window: deque, running: dict[Pair, tuple[_Job, int]], live: set[_Job]) -> Score:
        """The verdict at the head of the window, waiting for its job if it has one."""
        key, entry = window.popleft()
        if isinstance(entry, Score):
            return entry
        job, index = entry
        if job.id is None:
            self._submit(job, live)
        if job.scores is None:
            job.scores = self._verdicts(self.scheduler.wait(job.id), len(job.checks))
            for (completion, gold), score in zip(job.checks, job.scores):
                if score.status != "infra_error":  # an infrastructure failure may pass on a later try
                    self._remember((gold, completion), score)
        job.waiting -= 1
        if not job.waiting:
            live.discard(job)
            for i, (completion, gold) in enumerate(job.checks):
                if running.get((gold, completion)) == (job, i):
                    del running[(gold, completion)]
        return job.scores[index]

    def _remember(self, pair: Pair, score: Score) -> None:
        """Cache a verdict, forgetting the least recently used beyond CACHE_ENTRIES (a run of thousands of rounds
        verifies millions of completions: a cache of them all would grow with the run)."""
        self._cache[pair] = score
        self._cache.move_to_end(pair)
        if len(self._cache) > CACHE_ENTRIES:
            self._cache.popitem(last=False)

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
            self._cache.move_to_end((gold, completion))
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

    def _verdicts(self, result: JobResult, size: int) -> list[Score]:
        """The Scores of a finished job of `size` checks: a batch's own (counting those it could not
        judge), or the job's verdict for each check."""
        if result.status == "ok" and self._batch_size is not None:
            for score in result.value:
                if score.status in _FAILURE_COUNTERS:
                    self._stats[_FAILURE_COUNTERS[score.status]] += 1
            return result.value
        return [self._verdict(result) for _ in range(size)]

    def _verdict(self, result: JobResult) -> Score:
        """The Score of a finished check, counting its failure."""
        if result.status == "ok":
            return result.value
        if result.status == "error":
            logger.warning("the verifier raised %s; scored as an error", result.error)
        self._stats[_FAILURE_COUNTERS[result.status]] += 1
        why = {"timeout": f"the check ran past its {self.timeout:g} s limit and was killed",
               "error": f"the verifier raised: {result.error}",
               "infra_error": f"the check's infrastructure failed on every attempt ({result.attempts}): {result.error}"}
        return _failure(result.status, why[result.status])
