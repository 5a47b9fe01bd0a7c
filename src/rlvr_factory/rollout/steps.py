"""Run a turn's environment calls (`reset`, `step`): in this process, or as jobs of the task scheduler.

`inline` calls each environment in turn in the rollout's process: right for cheap steps (a
calculator, a single-turn answer whose verdict the verify station computes). `scheduler`
sends each call, with its environment, to a worker process as a scheduler job: calls run in
parallel, each under a wall-clock limit, and the environment comes back with its new state.
With `isolate_calls`, a third-party environment's calls (`untrusted`) each run in a fork of their
worker that exits with them, so its state travels only in the environment itself, never in a
worker's memory from one call or episode to the next; our own environments keep what is warm in a
worker (a started sandbox, an OpenEnv server) across calls on purpose.
That suits expensive steps (a sandboxed test run); the environment must be picklable. An
environment that runs a third-party package's code (`untrusted = True`) runs this way only.

Either way a call that raises ends its episode only: `error` (the environment failed on this
input), `timeout` (it overran, scheduler only) or `infra_error` (it raised
`rlvr_factory.scheduler.InfraError`, e.g. a sandbox that would not start, on every attempt a
retry policy allows; such an episode is left out of the loss).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from rlvr_factory.domains.base import Environment, Step
from rlvr_factory.scheduler import InfraError, RetryPolicy, create_scheduler

EXECUTORS = ("inline", "scheduler")


@dataclass(frozen=True)
class Failed:
    """An environment call that did not return: why (`error`, `timeout`, `infra_error`) and what was said."""

    status: str
    message: str


@dataclass(frozen=True)
class ExecutorConfig:
    executor: str = "inline"  # inline: in the rollout's process | scheduler: jobs on worker processes
    timeout_seconds: float = 60.0  # wall-clock limit of one call (scheduler only)
    workers: int = 2  # scheduler workers
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # a reset that raises InfraError is retried
    isolate_calls: bool = False  # scheduler: each call of a third-party environment (`untrusted`) runs in a fork of its worker that exits with it, so nothing a call leaves in the process (a package's module globals) reaches another call or episode; the local backend only
    scheduler: dict[str, Any] = field(default_factory=dict)  # further scheduler settings (backend, ray, ...)

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"rollout.environment.executor must be one of {EXECUTORS}, got {self.executor!r}")
        if self.timeout_seconds <= 0:
            raise ValueError(f"rollout.environment.timeout_seconds must be positive, got {self.timeout_seconds}")


class _EnvironmentCall:
    """The scheduler job function: one environment call, returned with the environment it changed.

    It carries one environment of the run, so a worker imports the environment's code when it
    loads the function as it starts, not inside the first call's time limit.
    """

    def __init__(self, example: Environment) -> None:
        self.example = example

    def __call__(self, payload: tuple[Environment, str, Any]) -> tuple[Environment, Any]:
        env, method, argument = payload
        return env, _checked(method, getattr(env, method)(argument))


def _checked(method: str, result: Any) -> Any:
    if method == "step" and not isinstance(result, Step):
        raise TypeError(f"step() returned a {type(result).__name__}, not a Step")
    if method == "reset" and not isinstance(result, str):
        raise TypeError(f"reset() returned a {type(result).__name__}, not the observation as a str")
    return result


def _refuse_untrusted(envs: Sequence[Environment]) -> None:
    """Third-party environments (`untrusted = True`, e.g. `domains.gym_text.GameEnvironment`) run in workers only."""
    untrusted = next((env for env in envs if getattr(env, "untrusted", False)), None)
    if untrusted is not None:
        raise ValueError(f"{type(untrusted).__name__} runs a third-party package's code, which runs in worker "
                         "processes only: set rollout.environment.executor: scheduler")


class Executor:
    """Runs `reset` or `step` on many environments; `run` returns each one's (environment, result or `Failed`)."""

    def __init__(self, config: ExecutorConfig) -> None:
        self.config = config
        self.retry = config.retry
        self.seconds = 0.0
        self._scheduler = None
        self._isolated = False  # whether the scheduler's workers run each call in a fork
        self._job: _EnvironmentCall | None = None

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the scheduler's workers, if any."""
        if self._scheduler is not None:
            self._scheduler.close()

    def _scheduler_for(self, envs: Sequence[Environment]) -> Any:
        """The scheduler, started on first use; its calls isolated once an untrusted environment comes (a running
        scheduler whose calls are not is replaced)."""
        isolate = self.config.isolate_calls and any(getattr(env, "untrusted", False) for env in envs)
        if self._scheduler is not None and (self._isolated or not isolate):
            return self._scheduler
        self.close()
        config = self.config
        self._scheduler = create_scheduler({
            **config.scheduler, "workers": config.workers, "timeout_seconds": config.timeout_seconds,
            "retry": asdict(config.retry), "isolate_jobs": isolate,
        })
        self._isolated, self._job = isolate, None
        return self._scheduler

    def run(self, method: str, envs: Sequence[Environment], arguments: Sequence[Any]) -> list[tuple[Environment, Any]]:
        """`env.<method>(argument)` for each pair, in order."""
        start = time.perf_counter()
        if self.config.executor == "inline":
            _refuse_untrusted(envs)
            out = [(env, self._inline(method, env, argument)) for env, argument in zip(envs, arguments, strict=True)]
        else:
            scheduler = self._scheduler_for(envs)
            if self._job is None and envs:
                self._job = _EnvironmentCall(envs[0])
                scheduler.register(self._job)
            ids = [scheduler.submit(self._job, (env, method, a)) for env, a in zip(envs, arguments, strict=True)]
            out = [
                r.value if r.ok else (env, Failed(r.status, r.error or r.status))
                for env, r in zip(envs, scheduler.results(ids))
            ]
        self.seconds += time.perf_counter() - start
        return out

    def _inline(self, method: str, env: Environment, argument: Any) -> Any:
        """One call here; a `reset` that raises `InfraError` is retried with the policy's backoff."""
        attempts = self.retry.max_attempts if method == "reset" else 1
        attempt = 1
        while True:
            try:
                return _checked(method, getattr(env, method)(argument))
            except InfraError as e:
                if attempt >= attempts:
                    return Failed("infra_error", f"{method}: {e}")
                time.sleep(self.retry.backoff(attempt))
                attempt += 1
            except Exception as e:  # noqa: BLE001 - an environment that fails ends its episode, not the run
                return Failed("error", f"{method}: {type(e).__name__}: {e}")
