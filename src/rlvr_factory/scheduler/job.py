"""What a job is, what comes back, and when a failed attempt is tried again.

A job is a picklable callable and its payload. Its result has one of five statuses:
`ok` (the callable returned; a wrong answer is still `ok`), `error` (the callable raised:
a genuine failure, never retried), `timeout` (it overran and was killed with its worker),
`infra_error` (its worker died or it raised `InfraError` on every allowed attempt) and
`cancelled`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JOB_STATUSES = ("ok", "error", "timeout", "infra_error", "cancelled")


class InfraError(Exception):
    """Raised by a job when the infrastructure, not the work, failed (a sandbox that would not
    start, a lost connection): the scheduler retries the job instead of reporting an error."""


@dataclass(frozen=True)
class JobResult:
    """The outcome of one job: its id, status, return value (when `ok`), what went wrong
    (otherwise), the attempts it took and the wall-clock seconds of its last attempt."""

    job_id: int
    status: str
    value: Any = None
    error: str | None = None
    attempts: int = 1
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class RetryPolicy:
    """Infrastructure failures are retried up to `max_attempts` attempts in all, the n-th retry
    waiting `backoff_seconds * backoff_factor**(n-1)` (at most `max_backoff_seconds`).
    With `retry_timeouts`, a job killed at its deadline is retried the same way (a hang may be
    a stuck sandbox); after its last attempt it is reported as `timeout`."""

    max_attempts: int = 2  # attempts per job in all; after the last, status infra_error
    backoff_seconds: float = 0.05  # wait before the first retry ...
    backoff_factor: float = 2.0  # ... multiplied by this for each further one
    max_backoff_seconds: float = 5.0  # the longest wait
    retry_timeouts: bool = False  # an overrun is a property of the input: report it, do not retry

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"retry max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_seconds < 0 or self.backoff_factor < 1 or self.max_backoff_seconds < 0:
            raise ValueError(
                "retry backoff_seconds and max_backoff_seconds must be >= 0 and backoff_factor >= 1, "
                f"got {self.backoff_seconds}, {self.max_backoff_seconds}, {self.backoff_factor}"
            )

    def backoff(self, attempts: int) -> float:
        """Seconds to wait before the attempt after `attempts` failed ones."""
        return min(self.max_backoff_seconds, self.backoff_seconds * self.backoff_factor ** (attempts - 1))
