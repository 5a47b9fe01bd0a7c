"""Fixtures: schedulers on each backend; Ray starts once per test session, on few logical CPUs."""

from __future__ import annotations

import pytest

from rlvr_factory.scheduler import RetryPolicy, Scheduler
from rlvr_factory.scheduler.local import LocalBackend

RAY_CPUS = 8  # logical CPUs of the test Ray: room for 8 one-CPU worker actors (most jobs sleep)


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray instance for the tests that need one, shut down at the end of the session."""
    ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install '.[ray]'")
    import logging

    ray.init(num_cpus=RAY_CPUS, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield ray
    ray.shutdown()


def make_backend(name: str):
    """A fresh backend by name (`ray` needs the `ray_cluster` fixture)."""
    if name == "local":
        return LocalBackend(memory_limit_mb=1024)
    from rlvr_factory.scheduler.ray_backend import RayBackend

    return RayBackend(address="local")


@pytest.fixture
def local():
    """A 2-worker local scheduler with a 1 s timeout and quick retries, of timeouts too."""
    with Scheduler(LocalBackend(memory_limit_mb=1024), workers=2, timeout=1.0,
                   retry=RetryPolicy(max_attempts=3, backoff_seconds=0.01, retry_timeouts=True)) as scheduler:
        yield scheduler
