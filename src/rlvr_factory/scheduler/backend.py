"""What the scheduler needs from a backend: start, feed, watch and stop workers."""

from __future__ import annotations

from typing import Any, Protocol

# What a backend reports about a worker, in order per worker:
#   ("ready", worker, None)     it started and holds the job functions it was started with;
#   ("started", worker, None)   it loaded the job functions sent with its last chunk and runs the chunk;
#   ("result", worker, result)  a job finished: `rlvr_factory.scheduler.worker.WireResult`;
#   ("lost", worker, reason)    it died or cannot be reached; the backend has already stopped it.
Event = tuple[str, Any, Any]


class Backend(Protocol):
    """Worker processes somewhere; each runs the jobs it is sent one after another, in order."""

    name: str
    max_chunk: int  # the most jobs worth sending to a worker in one message
    deadline_grace: float  # seconds past a job's timeout before the scheduler kills its worker

    def serialize(self, fn: Any) -> bytes:
        """A job function as bytes its workers can unpickle."""

    def start(self, definitions: dict[int, bytes]) -> Any:
        """Start a worker that holds these pickled job functions (by id); it reports `ready`."""

    def send(self, worker: Any, definitions: dict[int, bytes], jobs: list[tuple[int, int, Any, float]]) -> bool:
        """Send job functions it lacks and `(job_id, fn_id, payload, timeout)` jobs; False when it is gone."""

    def poll(self, workers: list[Any], timeout: float) -> list[Event]:
        """The events of these workers within `timeout` seconds (sooner when one arrives)."""

    def stop(self, worker: Any) -> None:
        """Kill a worker, with everything it started, and release it."""

    def close(self) -> None:
        """Release what the backend holds beyond its workers."""
