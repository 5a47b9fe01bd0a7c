"""The scheduler: submit jobs, get each result exactly once, whatever happens to the workers.

    with Scheduler(LocalBackend(), workers=4, timeout=5.0) as scheduler:
        ids = [scheduler.submit(score, pair) for pair in pairs]
        for result in scheduler.as_completed(ids):
            ...

Idle workers take the next job, several at once when jobs are short (fewer round trips),
one at a time when they are long (a slow job holds up no queue). A job that overruns its
timeout is killed with its worker (and whatever the job started), the worker is replaced and
the job reported as `timeout` (or retried first, per the `RetryPolicy`); a worker that dies
mid-job is replaced and the job retried with backoff up to the policy's attempts, then
reported as `infra_error`, as is a job that keeps raising `InfraError`. A job that raises
anything else is an `error`, reported with its message and never retried. Jobs a dead or
killed worker had not started yet go back to the queue without losing an attempt.

Work happens while the caller waits for results (`as_completed`, `results`, `map`, `wait`),
on the caller's thread: a Scheduler is not thread-safe.
"""

from __future__ import annotations

import heapq
import logging
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rlvr_factory.scheduler.backend import Backend
from rlvr_factory.scheduler.job import JobResult, RetryPolicy
from rlvr_factory.scheduler.metrics import COUNTERS, SchedulerMetrics

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 120.0  # a worker (or a job function) not loaded by then cannot load
TARGET_CHUNK_SECONDS = 0.005  # send a worker about this much work per message
EWMA_WEIGHT = 0.1  # weight of the newest job in the running mean of job durations


@dataclass(eq=False)
class _Job:
    id: int
    fn_id: int
    payload: Any
    cpus: int
    timeout: float
    attempts: int = 0  # attempts that ran (finished, failed or were killed)
    cancelled: bool = False


@dataclass(eq=False)
class _Slot:
    """A worker position: the current worker in it and what it has been sent."""

    index: int
    worker: Any
    deadline: float  # monotonic time by which the worker must say something
    ready: bool = False
    loading: bool = False  # it was sent job functions and has not said `started` yet
    jobs: deque[_Job] = field(default_factory=deque)  # sent, unanswered, in order; jobs[0] runs
    known: set[int] = field(default_factory=set)  # job functions it holds
    cpus: int = 0  # CPUs reserved for its jobs


class Scheduler:
    """Runs jobs on `workers` workers of a `backend`.

    `timeout`: default wall-clock seconds per job attempt. `retry`: the retry policy.
    `max_in_flight`: jobs queued or running at most; `submit` waits for room (backpressure).
    `num_cpus`: the CPUs that jobs running at the same time may need together (default: one per worker).
    """

    def __init__(
        self,
        backend: Backend,
        workers: int = 2,
        timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        max_in_flight: int | None = None,
        num_cpus: int | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        self.backend = backend
        self.workers = workers
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.max_in_flight = max_in_flight or 1024 * workers
        self.num_cpus = num_cpus or workers
        if self.max_in_flight < 1 or self.num_cpus < 1:
            raise ValueError(f"max_in_flight and num_cpus must be at least 1, got {max_in_flight}, {num_cpus}")
        self._functions: dict[int, tuple[Callable[[Any], Any], int]] = {}  # id(fn) -> (fn, fn_id)
        self._definitions: dict[int, bytes] = {}  # fn_id -> pickled fn
        self._slots: list[_Slot] = []
        self._queue: deque[_Job] = deque()
        self._delayed: list[tuple[float, int, _Job]] = []  # (when, job id, job): retries waiting out a backoff
        self._pending: dict[int, _Job] = {}  # queued, delayed or running
        self._done: dict[int, JobResult] = {}  # finished, not yet handed out
        self._next_id = 0
        self._cpus_used = 0
        self._mean_job_seconds: float | None = None
        self._counters = dict.fromkeys(COUNTERS, 0)
        self._busy: list[float] = [0.0] * workers
        self._peaks = [0, 0]  # queue depth, in flight
        self._close = weakref.finalize(self, _stop_all, backend, self._slots)

    # Lifecycle

    def __enter__(self) -> Scheduler:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start any missing workers and wait until every worker is ready."""
        self._check_open()
        self._fill()
        while not all(s.ready for s in self._slots):
            self._step()

    def close(self) -> None:
        """Kill every worker with everything it started; the scheduler cannot be used afterwards."""
        self._close()

    @property
    def closed(self) -> bool:
        return not self._close.alive

    # Submitting

    def register(self, fn: Callable[[Any], Any]) -> None:
        """Send `fn` to every worker as it starts (so loading it costs no job its time); optional."""
        self._function_id(fn)

    def submit(self, fn: Callable[[Any], Any], payload: Any, *, cpus: int = 1, timeout: float | None = None) -> int:
        """Queue `fn(payload)` and return its job id; waits while `max_in_flight` jobs are pending.

        `fn` must be picklable (a module-level function or an instance of a module-level class);
        submitting the same `fn` object again reuses the copy the workers hold. `cpus`: CPUs the job
        needs; `timeout`: seconds per attempt (default: the scheduler's).
        """
        self._check_open()
        if not 1 <= cpus <= self.num_cpus:
            raise ValueError(f"a job needs 1 to num_cpus={self.num_cpus} CPUs, got cpus={cpus}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive seconds, got {timeout}")
        fn_id = self._function_id(fn)
        while len(self._pending) >= self.max_in_flight:
            self._step()
        job = _Job(self._next_id, fn_id, payload, cpus, timeout or self.timeout)
        self._next_id += 1
        self._pending[job.id] = job
        self._queue.append(job)
        self._counters["submitted"] += 1
        return job.id

    def cancel(self, job_id: int) -> bool:
        """Cancel a job that has not finished (a running one is killed with its worker); False if it had."""
        job = self._pending.get(job_id)
        if job is None:
            return False
        job.cancelled = True
        for slot in self._slots:
            if slot.jobs and slot.jobs[0] is job:
                self._replace(slot)
                break
        if job in self._queue:
            self._queue.remove(job)
        self._finish(job, "cancelled", error="cancelled by the caller")
        return True

    def abandon(self, job_ids: Iterable[int]) -> None:
        """Cancel these jobs where still pending and drop their unclaimed results (an interrupted batch)."""
        for job_id in job_ids:
            self.cancel(job_id)
            self._done.pop(job_id, None)

    # Results

    def as_completed(self, job_ids: Iterable[int] | None = None) -> Iterator[JobResult]:
        """Each result of these jobs (default: all not yet handed out) as it finishes, exactly once."""
        waiting = set(self._pending) | set(self._done) if job_ids is None else set(job_ids)
        unknown = [i for i in waiting if i not in self._pending and i not in self._done]
        if unknown:
            raise KeyError(f"no pending or unclaimed result for job ids {sorted(unknown)[:10]}")
        while waiting:
            if len(self._done) < len(waiting):
                ready = [i for i in self._done if i in waiting]
            else:
                ready = [i for i in waiting if i in self._done]
            for job_id in ready:
                waiting.discard(job_id)
                yield self._done.pop(job_id)
            if waiting and not ready:
                self._step()

    def results(self, job_ids: Iterable[int]) -> list[JobResult]:
        """The results of these jobs, in the order given."""
        ids = list(job_ids)
        collected = {r.job_id: r for r in self.as_completed(ids)}
        return [collected[i] for i in ids]

    def wait(self, job_id: int) -> JobResult:
        """The result of one job, once it finishes."""
        return self.results([job_id])[0]

    def map(
        self, fn: Callable[[Any], Any], payloads: Iterable[Any], *, ordered: bool = True, cpus: int = 1,
        timeout: float | None = None,
    ) -> Iterator[JobResult]:
        """`fn` on every payload, results in payload order (or as completed), never more than
        `max_in_flight` jobs submitted ahead of what has been handed out."""
        window: deque[int] = deque()
        for payload in payloads:
            if len(window) >= self.max_in_flight:
                yield from self._drain_one(window, ordered)
            window.append(self.submit(fn, payload, cpus=cpus, timeout=timeout))
        while window:
            yield from self._drain_one(window, ordered)

    def _drain_one(self, window: deque[int], ordered: bool) -> Iterator[JobResult]:
        """Hand out the oldest job's result (ordered) or any finished one in the window."""
        if ordered:
            yield self.wait(window.popleft())
            return
        while not any(i in self._done for i in window):
            self._step()
        for job_id in [i for i in window if i in self._done]:
            window.remove(job_id)
            yield self._done.pop(job_id)

    # Metrics

    def metrics(self, reset_peaks: bool = False) -> SchedulerMetrics:
        """The counters, queue depth, in-flight jobs, their peaks and each worker's busy seconds now."""
        in_flight = sum(len(s.jobs) for s in self._slots)
        snapshot = SchedulerMetrics(
            time=time.monotonic(), counters=dict(self._counters), queue_depth=len(self._queue) + len(self._delayed),
            in_flight=in_flight, peak_queue_depth=self._peaks[0], peak_in_flight=self._peaks[1],
            busy_seconds=tuple(self._busy),
        )
        if reset_peaks:
            self._peaks = [snapshot.queue_depth, in_flight]
        return snapshot

    # The event loop

    def _step(self) -> None:
        """Dispatch what can run, wait for the next event or deadline, and handle what happened."""
        self._check_open()
        now = time.monotonic()
        while self._delayed and self._delayed[0][0] <= now:
            job = heapq.heappop(self._delayed)[2]
            if not job.cancelled:
                self._queue.appendleft(job)
        self._fill()
        self._dispatch()
        wake = min([s.deadline for s in self._slots] + [d[0] for d in self._delayed[:1]])
        events = self.backend.poll([s.worker for s in self._slots], max(0.0, min(wake - now, 1.0)))
        by_worker = {id(s.worker): s for s in self._slots}
        for kind, worker, detail in events:
            slot = by_worker.get(id(worker))
            if slot is not None and slot.worker is worker:
                getattr(self, f"_on_{kind}")(slot, detail)
        now = time.monotonic()
        for slot in list(self._slots):
            if now >= slot.deadline:
                self._overrun(slot)

    def _fill(self) -> None:
        """Start workers until there are `workers` of them."""
        while len(self._slots) < self.workers:
            index = len(self._slots)
            self._slots.append(self._new_slot(index))

    def _new_slot(self, index: int) -> _Slot:
        worker = self.backend.start(dict(self._definitions))
        return _Slot(index, worker, deadline=time.monotonic() + STARTUP_TIMEOUT_S, known=set(self._definitions))

    def _chunk_size(self, ready_slots: int) -> int:
        """Jobs per message: about TARGET_CHUNK_SECONDS of work, and a fair share of the queue."""
        if self._mean_job_seconds is None:
            return 1
        by_speed = int(TARGET_CHUNK_SECONDS / max(self._mean_job_seconds, 1e-6))
        return max(1, min(self.backend.max_chunk, by_speed, len(self._queue) // max(1, ready_slots)))

    def _dispatch(self) -> None:
        """Give queued jobs to ready workers with room, least loaded first, within the CPU budget."""
        if not self._queue:
            return
        slots = sorted((s for s in self._slots if s.ready and not s.loading), key=lambda s: len(s.jobs))
        chunk = self._chunk_size(len(slots))
        limit = 2 * chunk if chunk > 1 else 1  # short jobs: one chunk queued behind the running one
        for slot in slots:
            if not self._queue:
                break
            if len(slot.jobs) > limit - chunk:
                continue
            jobs: list[_Job] = []
            while self._queue and len(slot.jobs) + len(jobs) < limit:
                need = max(slot.cpus, self._queue[0].cpus)
                if self._cpus_used - slot.cpus + need > self.num_cpus:
                    break
                self._cpus_used += need - slot.cpus
                slot.cpus = need
                jobs.append(self._queue.popleft())
            if jobs:
                self._send(slot, jobs)
        self._peaks[0] = max(self._peaks[0], len(self._queue) + len(self._delayed))
        self._peaks[1] = max(self._peaks[1], sum(len(s.jobs) for s in self._slots))

    def _send(self, slot: _Slot, jobs: list[_Job]) -> None:
        definitions = {i: self._definitions[i] for i in {j.fn_id for j in jobs} - slot.known}
        was_idle = not slot.jobs
        slot.jobs.extend(jobs)
        if not self.backend.send(slot.worker, definitions, [(j.id, j.fn_id, j.payload, j.timeout) for j in jobs]):
            # The worker is gone; the results it sent before dying are still to be read, and then its
            # end (`lost`) tells which job it died in. These jobs never reached it: back to the queue.
            for _ in jobs:
                slot.jobs.pop()
            self._queue.extendleft(reversed(jobs))
            self._release_cpus(slot)
            return
        slot.known |= definitions.keys()
        if definitions:
            slot.loading = True
            slot.deadline = time.monotonic() + STARTUP_TIMEOUT_S
        elif was_idle:
            slot.deadline = self._head_deadline(slot)

    # Events

    def _on_ready(self, slot: _Slot, _: None) -> None:
        slot.ready = True
        slot.deadline = float("inf")

    def _on_started(self, slot: _Slot, _: None) -> None:
        slot.loading = False
        slot.deadline = self._head_deadline(slot)

    def _on_result(self, slot: _Slot, result: tuple[int, str, Any, float, float]) -> None:
        job_id, status, value, started, finished = result
        job = slot.jobs.popleft()
        assert job.id == job_id, f"worker answered job {job_id} while running job {job.id}"
        seconds = finished - started
        self._busy[slot.index] += seconds
        self._mean_job_seconds = seconds if self._mean_job_seconds is None else (
            (1 - EWMA_WEIGHT) * self._mean_job_seconds + EWMA_WEIGHT * seconds
        )
        self._release_cpus(slot)
        slot.deadline = self._head_deadline(slot) if slot.jobs else float("inf")
        if job.cancelled:
            return
        job.attempts += 1
        if status == "ok":
            self._finish(job, "ok", value=value, seconds=seconds)
        elif status == "error":
            self._finish(job, "error", error=value, seconds=seconds)
        elif status == "timeout":  # the worker enforced the limit itself (a Ray actor's runner)
            self._timed_out(job)
        else:
            self._counters["infra_failures"] += 1
            self._retry_or_finish(job, "infra_error", value, seconds)

    def _on_lost(self, slot: _Slot, reason: str) -> None:
        """A worker died: replace it; the job it was running failed, the jobs queued behind it go back."""
        if not slot.ready:
            self.backend.stop(slot.worker)
            raise RuntimeError(
                f"a {self.backend.name} worker failed before it was ready ({reason}); check that the job "
                "functions unpickle in a fresh interpreter and that the main script runs its work under "
                "`if __name__ == '__main__':`"
            )
        head = slot.jobs[0] if slot.jobs and not slot.loading else None
        self._replace(slot, skip=head)
        if head is not None and not head.cancelled:
            head.attempts += 1
            self._counters["infra_failures"] += 1
            logger.warning("a %s worker died during job %d (attempt %d): %s", self.backend.name, head.id,
                           head.attempts, reason)
            self._retry_or_finish(head, "infra_error", f"its worker died: {reason}", 0.0)

    def _overrun(self, slot: _Slot) -> None:
        """A worker past its deadline: at start-up or while loading, a broken setup; else its job timed out."""
        if not slot.ready or slot.loading:
            self.backend.stop(slot.worker)
            raise RuntimeError(
                f"a {self.backend.name} worker did not load its job functions within {STARTUP_TIMEOUT_S:.0f} s"
            )
        head = slot.jobs[0]
        self._busy[slot.index] += head.timeout
        self._replace(slot, skip=head)
        if not head.cancelled:
            head.attempts += 1
            self._timed_out(head)

    def _timed_out(self, job: _Job) -> None:
        """Count an attempt killed at its deadline; retry it if the policy says so, else report it."""
        self._counters["timeouts"] += 1
        error = f"it ran past its {job.timeout:g} s timeout"
        if self.retry.retry_timeouts:
            self._retry_or_finish(job, "timeout", error, job.timeout)
        else:
            self._finish(job, "timeout", error=error, seconds=job.timeout)

    def _head_deadline(self, slot: _Slot) -> float:
        """When the job a worker is running must have answered (plus the backend's grace)."""
        return time.monotonic() + slot.jobs[0].timeout + self.backend.deadline_grace

    # Bookkeeping

    def _retry_or_finish(self, job: _Job, status: str, error: str, seconds: float) -> None:
        """Retry a job after its backoff if attempts remain, else report it with `status`."""
        if job.attempts < self.retry.max_attempts:
            self._counters["retries"] += 1
            when = time.monotonic() + self.retry.backoff(job.attempts)
            heapq.heappush(self._delayed, (when, job.id, job))
        else:
            self._finish(job, status, error=f"{error} (attempt {job.attempts} of {self.retry.max_attempts})",
                         seconds=seconds)

    def _finish(self, job: _Job, status: str, value: Any = None, error: str | None = None,
                seconds: float = 0.0) -> None:
        del self._pending[job.id]
        self._done[job.id] = JobResult(job.id, status, value, error, job.attempts, seconds)
        self._counters[status] += 1

    def _replace(self, slot: _Slot, skip: _Job | None = None) -> None:
        """Stop a slot's worker, start a fresh one in its place; its unstarted jobs go back to the queue front."""
        self.backend.stop(slot.worker)
        leftover = [j for j in slot.jobs if j is not skip and not j.cancelled]
        self._queue.extendleft(reversed(leftover))
        slot.jobs.clear()
        self._release_cpus(slot)
        self._slots[self._slots.index(slot)] = self._new_slot(slot.index)
        self._counters["restarts"] += 1

    def _release_cpus(self, slot: _Slot) -> None:
        need = max((j.cpus for j in slot.jobs), default=0)
        self._cpus_used -= slot.cpus - need
        slot.cpus = need

    def _function_id(self, fn: Callable[[Any], Any]) -> int:
        known = self._functions.get(id(fn))
        if known is not None:
            return known[1]
        if not callable(fn):
            raise TypeError(f"a job function must be callable, got {type(fn).__name__}")
        try:
            blob = self.backend.serialize(fn)
        except Exception as e:
            raise TypeError(
                f"the job function must be picklable to reach the workers (define it at module level): {e}"
            ) from e
        fn_id = len(self._definitions)
        self._functions[id(fn)] = (fn, fn_id)  # holding fn keeps its id from being reused
        self._definitions[fn_id] = blob
        return fn_id

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("this Scheduler is closed; create a new one")


def _stop_all(backend: Backend, slots: list[_Slot]) -> None:
    """Stop every slot's worker and the backend."""
    while slots:
        backend.stop(slots.pop().worker)
    backend.close()
