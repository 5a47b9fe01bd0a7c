"""The `ray` backend: each worker is a Ray actor, so the same scheduler runs across a Ray cluster.

`address: local` starts a Ray instance on this machine (tests, one box); `address: auto` joins
the running cluster. Ray places each actor where a CPU is free; an actor runs the calls it is
sent in order. It runs each job in a local worker process of its own (a one-worker local
scheduler: own process group, memory cap, killed with its whole group at the job's timeout and
replaced in milliseconds), so a hung or crashed job costs a fork, not an actor, and whatever a
job started dies with it on every node. An actor that stops answering is killed (`ray.kill`)
and replaced. Ray's own retries are off: the scheduler decides what is retried.
"""

from __future__ import annotations

import importlib.machinery
import logging
import os
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rlvr_factory.scheduler.backend import Event
from rlvr_factory.scheduler.core import Scheduler
from rlvr_factory.scheduler.job import RetryPolicy
from rlvr_factory.scheduler.local import LocalBackend
from rlvr_factory.scheduler.worker import JobRunner, describe

# What a job's end in the actor's local runner is to the driver; the driver retries.
_WIRE_STATUS = {"ok": "ok", "error": "error", "timeout": "timeout", "infra_error": "infra"}


class _ActorBody:
    """The code of one worker actor: a one-worker local scheduler that runs each job it is sent."""

    def __init__(self, definitions: dict[int, bytes], memory_limit_mb: int | None) -> None:
        # Job functions come pickled from the driver, never from this process's main script (Ray's
        # worker loop): name the main module so multiprocessing does not re-run that script in
        # every job process it starts (0.5 s each).
        sys.modules["__main__"].__spec__ = importlib.machinery.ModuleSpec("__main__", None)
        self.runner = JobRunner()
        import ray

        self.local = Scheduler(LocalBackend(memory_limit_mb, serialize=ray.cloudpickle.dumps), workers=1,
                               retry=RetryPolicy(max_attempts=1, retry_timeouts=False))
        self.define(definitions)
        self.local.start()

    def ready(self) -> int:
        return os.getpid()

    def define(self, definitions: dict[int, bytes]) -> None:
        self.runner.define(definitions)
        for fn_id in definitions:
            self.local.register(self.runner.functions[fn_id])

    def run(self, job_id: int, fn_id: int, payload: Any, timeout: float) -> tuple[int, str, Any, float, float]:
        started = time.monotonic()
        result = self.local.wait(self.local.submit(self.runner.functions[fn_id], payload, timeout=timeout))
        value = result.value if result.status == "ok" else result.error.rsplit(" (attempt", 1)[0]
        return job_id, _WIRE_STATUS[result.status], value, started, time.monotonic()


@dataclass(eq=False)
class RayWorker:
    """One actor and its calls not yet answered, in order: (object ref, event kind, job id)."""

    actor: Any
    calls: deque[tuple[Any, str, int | None]] = field(default_factory=deque)


class RayBackend:
    """Worker actors on a Ray cluster at `address` (`local`: start one here with `num_cpus` CPUs);
    each actor reserves `cpus_per_worker` CPUs, so Ray places actors where CPUs are free, and caps
    its job processes' address space at `memory_limit_mb` (None: no cap)."""

    name = "ray"
    max_chunk = 32  # calls queued on an actor at once (one call per job)
    deadline_grace = 30.0  # the actor enforces each job's timeout; past this it is deemed stuck

    def __init__(
        self, address: str = "local", num_cpus: int | None = None, cpus_per_worker: float = 1.0,
        memory_limit_mb: int | None = 4096,
    ) -> None:
        try:
            import ray
        except ImportError as e:
            raise ImportError("the ray backend needs Ray: pip install 'rlvr_factory[ray]'") from e
        self._ray = ray
        self.address = address
        self.num_cpus = num_cpus
        self.cpus_per_worker = cpus_per_worker
        self.memory_limit_mb = memory_limit_mb
        self._actor_class: Any = None

    def _connect(self) -> Any:
        """The actor class, connecting to (or starting) Ray on first use."""
        if self._actor_class is None:
            ray = self._ray
            if not ray.is_initialized():
                if self.address == "local":
                    ray.init(num_cpus=self.num_cpus, include_dashboard=False, log_to_driver=False,
                             logging_level=logging.ERROR)
                else:
                    ray.init(address=self.address, log_to_driver=False, logging_level=logging.ERROR)
            self._actor_class = ray.remote(_ActorBody).options(
                num_cpus=self.cpus_per_worker, max_restarts=0, max_task_retries=0
            )
        return self._actor_class

    def serialize(self, fn: Any) -> bytes:
        """Ray's cloudpickle: a function of the driver's main script travels by value, as with Ray tasks."""
        return self._ray.cloudpickle.dumps(fn)

    def start(self, definitions: dict[int, bytes]) -> RayWorker:
        """A new actor holding these job functions; it reports `ready` once created."""
        actor = self._connect().remote(definitions, self.memory_limit_mb)
        return RayWorker(actor, deque([(actor.ready.remote(), "ready", None)]))

    def send(
        self, worker: RayWorker, definitions: dict[int, bytes], jobs: list[tuple[int, int, Any, float]]
    ) -> bool:
        """Queue new job functions and the jobs on the actor (it runs them in order)."""
        if definitions:
            worker.calls.append((worker.actor.define.remote(definitions), "started", None))
        for job in jobs:
            worker.calls.append((worker.actor.run.remote(*job), "result", job[0]))
        return True

    def poll(self, workers: list[RayWorker], timeout: float) -> list[Event]:
        """The answers that arrived within `timeout` seconds, in order per actor."""
        ray = self._ray
        refs = [call[0] for w in workers for call in w.calls]
        if not refs:
            time.sleep(timeout)
            return []
        ray.wait(refs, num_returns=1, timeout=timeout)
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        done_set = set(done)
        events: list[Event] = []
        for worker in workers:
            while worker.calls and worker.calls[0][0] in done_set:
                ref, kind, job_id = worker.calls.popleft()
                try:
                    value = ray.get(ref)
                except ray.exceptions.RayActorError as e:
                    self.stop(worker)
                    events.append(("lost", worker, f"the Ray actor died: {str(e).splitlines()[0][:300]}"))
                    break
                except ray.exceptions.RayError as e:  # e.g. a return value Ray could not serialise
                    if kind != "result":
                        self.stop(worker)
                        events.append(("lost", worker, describe(e)))
                        break
                    value = (job_id, "error", describe(e), 0.0, 0.0)
                events.append((kind, worker, value if kind == "result" else None))
        return events

    def stop(self, worker: RayWorker) -> None:
        """Kill the actor (SIGKILL to its process) and forget its calls."""
        worker.calls.clear()
        if self._ray.is_initialized():  # after ray.shutdown() the actors are gone already
            self._ray.kill(worker.actor, no_restart=True)

    def close(self) -> None:
        """Leave Ray running: it is shared by the process (Ray shuts it down at exit)."""
