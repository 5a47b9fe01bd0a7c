"""Dispatch jobs to workers with timeouts, retries of infrastructure failures and load balancing,
on worker processes here (`local`) or on a Ray cluster (`ray`).

    with create_scheduler({"backend": "local", "workers": 4, "timeout_seconds": 5.0}) as scheduler:
        for result in scheduler.map(score, payloads):
            ...
"""

from __future__ import annotations

from typing import Any

from rlvr_factory.scheduler.core import Scheduler
from rlvr_factory.scheduler.job import JOB_STATUSES, InfraError, JobResult, RetryPolicy
from rlvr_factory.scheduler.metrics import SchedulerMetrics

BACKENDS = ("local", "ray")

__all__ = [
    "BACKENDS", "JOB_STATUSES", "InfraError", "JobResult", "RetryPolicy", "Scheduler", "SchedulerMetrics",
    "create_scheduler",
]


def create_scheduler(settings: dict[str, Any], memory_limit_mb: int | None = 4096) -> Scheduler:
    """A scheduler from parameters: `backend` (local|ray), `workers`, `timeout_seconds`,
    `retry` (RetryPolicy's fields), `max_in_flight`, `num_cpus`, for the local backend `hash_seed`
    (the workers' PYTHONHASHSEED: jobs whose output follows the order of a set of strings repeat
    across runs) and for Ray `ray.address` (local|auto|an address) and `ray.num_cpus`. Missing keys
    take their defaults; `memory_limit_mb` caps each job process's address space."""
    known = {"backend", "workers", "timeout_seconds", "retry", "max_in_flight", "num_cpus", "ray", "hash_seed"}
    unknown = set(settings) - known
    if unknown:
        raise ValueError(f"unknown scheduler settings {sorted(unknown)}; expected some of {sorted(known)}")
    backend_name = settings.get("backend", "local")
    if backend_name == "local":
        from rlvr_factory.scheduler.local import LocalBackend

        backend: Any = LocalBackend(memory_limit_mb, hash_seed=settings.get("hash_seed"))
    elif backend_name == "ray":
        if settings.get("hash_seed") is not None:
            raise ValueError("scheduler hash_seed is a setting of the local backend; Ray starts its own workers")
        from rlvr_factory.scheduler.ray_backend import RayBackend

        ray = settings.get("ray") or {}
        backend = RayBackend(address=ray.get("address", "local"), num_cpus=ray.get("num_cpus"),
                             memory_limit_mb=memory_limit_mb)
    else:
        raise ValueError(f"unknown scheduler backend {backend_name!r}; choose one of {BACKENDS}")
    return Scheduler(
        backend,
        workers=settings.get("workers", 2),
        timeout=settings.get("timeout_seconds", 5.0),
        retry=RetryPolicy(**(settings.get("retry") or {})),
        max_in_flight=settings.get("max_in_flight"),
        num_cpus=settings.get("num_cpus"),
    )
