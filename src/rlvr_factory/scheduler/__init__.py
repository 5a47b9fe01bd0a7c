"""Dispatch jobs to workers with timeouts, retries of infrastructure failures and load balancing,
on worker processes here (`local`) or on a Ray cluster (`ray`).

    with create_scheduler({"backend": "local", "workers": 4, "timeout_seconds": 5.0}) as scheduler:
        for result in scheduler.map(score, payloads):
            ...
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from rlvr_factory.scheduler.core import Scheduler
from rlvr_factory.scheduler.job import JOB_STATUSES, InfraError, JobResult, RetryPolicy
from rlvr_factory.scheduler.metrics import SchedulerMetrics
from rlvr_factory.schema import PositiveFloat, PositiveInt, parse

BACKENDS = ("local", "ray")


@dataclass(frozen=True)
class RayConfig:
    address: str = "local"  # local: start Ray here | auto: join the running cluster | ray://host:port
    num_cpus: PositiveInt | None = None  # CPUs of a Ray started here (null: all)


@dataclass(frozen=True)
class SchedulerConfig:
    backend: Literal["local", "ray"] = "local"  # local: worker processes on this machine | ray: Ray actors (pip install '.[ray]')
    max_in_flight: PositiveInt | None = None  # jobs queued or running at most (null: 1024 per worker)
    num_cpus: PositiveFloat | None = None  # CPUs the jobs running at once may need together (null: one per worker)
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # only infrastructure failures are retried
    ray: RayConfig = field(default_factory=RayConfig)  # backend: ray only


@dataclass(frozen=True)
class SchedulerSettings(SchedulerConfig):
    """A scheduler's whole configuration: the `scheduler` block of a parameter file and what its user sets
    beside it (the verifier pool: `verify.workers`, `verify.timeout_seconds`)."""

    workers: PositiveInt = 2  # worker processes (local) or actors (ray)
    timeout_seconds: PositiveFloat = 5.0  # wall-clock limit of one job
    hash_seed: int | None = None  # local backend: the workers' PYTHONHASHSEED (null: Python's random one)
    isolate_jobs: bool = False  # local backend: each job runs in a fork of its worker that exits with it, so nothing a job leaves in its process reaches the next job

__all__ = [
    "BACKENDS", "JOB_STATUSES", "InfraError", "JobResult", "RayConfig", "RetryPolicy", "Scheduler", "SchedulerConfig",
    "SchedulerMetrics", "SchedulerSettings", "create_scheduler",
]


def create_scheduler(settings: SchedulerSettings | Mapping[str, Any], memory_limit_mb: int | None = 4096) -> Scheduler:
    """A scheduler from its settings (`SchedulerSettings`, or a mapping of its keys: checked by
    `schema.parse`, a key left out takes its default there): `backend` (local|ray), `workers`,
    `timeout_seconds`, `retry` (RetryPolicy's fields), `max_in_flight`, `num_cpus`, for the local
    backend `hash_seed` (the workers' PYTHONHASHSEED: jobs whose output follows the order of a set of
    strings repeat across runs; `isolate_jobs`: each job in a fork of its worker) and for Ray `ray.address` (local|auto|an address) and `ray.num_cpus`.
    `memory_limit_mb` caps each job process's address space."""
    config = settings if isinstance(settings, SchedulerSettings) else parse(SchedulerSettings, settings, "scheduler")
    if config.backend == "local":
        from rlvr_factory.scheduler.local import LocalBackend

        backend: Any = LocalBackend(memory_limit_mb, hash_seed=config.hash_seed, isolate_jobs=config.isolate_jobs)
    else:
        if config.hash_seed is not None:
            raise ValueError("scheduler hash_seed is a setting of the local backend; Ray starts its own workers")
        if config.isolate_jobs:
            raise ValueError("scheduler isolate_jobs forks a local worker for every job; Ray's actors run their jobs "
                             "in place: use backend: local, or turn isolate_jobs off")
        from rlvr_factory.scheduler.ray_backend import RayBackend

        backend = RayBackend(address=config.ray.address, num_cpus=config.ray.num_cpus, memory_limit_mb=memory_limit_mb)
    return Scheduler(backend, workers=config.workers, timeout=config.timeout_seconds, retry=config.retry,
                     max_in_flight=config.max_in_flight, num_cpus=config.num_cpus)
