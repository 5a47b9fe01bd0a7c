"""The worker side of every backend: hold the job functions sent so far and run jobs.

A job's result travels back as ``(job_id, status, value, started, finished)`` with status
`ok` (value: the return value), `error` (value: what the job raised), `infra` (value: the
message of an `InfraError`, or why the job's process died) or `timeout` (the worker enforced
the limit itself); the times are `time.monotonic()` readings of the worker.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Callable
from typing import Any

from rlvr_factory.scheduler.job import InfraError

WireResult = tuple[int, str, Any, float, float]


def describe(e: BaseException) -> str:
    """`Type: message` of an exception, cut to a readable length."""
    return f"{type(e).__name__}: {str(e)[:500]}"


class _Unloadable:
    """Stands in for a job function that would not unpickle here, so each of its jobs says why."""

    def __init__(self, problem: str) -> None:
        self.problem = problem

    def __call__(self, payload: Any) -> Any:
        raise RuntimeError(f"the job function could not be loaded in the worker: {self.problem}")


class JobRunner:
    """The job functions a worker holds, by id, and the loop body that runs one job."""

    def __init__(self) -> None:
        self.functions: dict[int, Callable[[Any], Any]] = {}

    def define(self, definitions: dict[int, bytes]) -> None:
        """Unpickle newly sent job functions (an unloadable one fails its jobs, not the worker)."""
        for fn_id, blob in definitions.items():
            try:
                self.functions[fn_id] = pickle.loads(blob)
            except Exception as e:  # noqa: BLE001  # reported per job
                self.functions[fn_id] = _Unloadable(describe(e))

    def run(self, job_id: int, fn_id: int, payload: Any) -> WireResult:
        """Call one job's function on its payload; what it raises becomes its status."""
        started = time.monotonic()
        try:
            value, status = self.functions[fn_id](payload), "ok"
        except InfraError as e:
            value, status = describe(e), "infra"
        except Exception as e:  # noqa: BLE001  # any failure of one job is that job's status
            value, status = describe(e), "error"
        return job_id, status, value, started, time.monotonic()


def unsendable(result: WireResult, problem: BaseException) -> WireResult:
    """The error result of a job whose return value cannot be pickled back."""
    job_id, _, _, started, finished = result
    return job_id, "error", f"the job's return value cannot be sent back: {describe(problem)}", started, finished
