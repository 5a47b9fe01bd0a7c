"""The transformers engine in a process of its own, so sampling and the trainer run at the same time.

Asynchronous rounds (`rl.max_staleness`) overlap round k+1's rollout with round k's update. In one
Python process the two contend for the interpreter lock and for the same torch threads, and on a
small model they do not overlap at all (measured: 0.99x on the embedded model, 0.74x at hidden 512,
two threads against one after the other). `rollout.background: true` moves the engine's forward passes into a
spawned worker process, and waiting on the worker releases the lock, so the agent loop, the
environments and the update go on meanwhile.

How many torch threads each side gets follows the DAG, never timing (so the same commit and
configuration sample the same log-probs and train the same weights, whatever the machine's load):

* a rollout running ahead (`running_ahead()`, the thread `prefetch_rollout` starts) samples in the
  worker on `rollout.background_threads` threads, and an update that runs while such a rollout is
  pending, started and not yet collected by its round (`sharing_cores()`), trains on the other cores;
* everything else, the synchronous rounds' rollouts on the worker and the updates between them, uses
  every core: the other side is waiting meanwhile, so splitting the cores would only idle half of them.

The worker runs the same `TransformersEngine` (same sampling, same log-probs, same KV reuse
across turns) on its own copy of the weights. `sync(policy)` sends the policy's weights when the
worker does not already hold that policy's version: cloned CPU tensors through shared memory, so
the trainer can change its own weights in place while the worker samples from the copy.
"""

from __future__ import annotations

import atexit
import copy
import logging
import os
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import torch
import torch.multiprocessing as mp

from rlvr_factory.models.lora import is_lora, merged_copy, served_model
from rlvr_factory.models.policy import Policy, freeze
from rlvr_factory.rollout.engine import EngineStats, Generation, Request, SamplingConfig

log = logging.getLogger(__name__)
START_TIMEOUT_S = 300.0  # the worker imports torch and transformers, then receives the model


def available_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_AHEAD_MARK = threading.local()
_PENDING_LOCK = threading.Lock()
_PENDING_AHEAD = 0  # rollouts started ahead (prefetch_rollout) and not yet collected by their round


@contextmanager
def running_ahead() -> Iterator[None]:
    """Mark this thread's sampling as a rollout running ahead of its round (it samples on `background_threads`)."""
    before = getattr(_AHEAD_MARK, "on", False)
    _AHEAD_MARK.on = True
    try:
        yield
    finally:
        _AHEAD_MARK.on = before


def is_running_ahead() -> bool:
    """Whether this thread samples a rollout ahead of its round."""
    return getattr(_AHEAD_MARK, "on", False)


def rollout_started_ahead() -> None:
    """A round started the next round's rollout before its own update (the DAG's `prefetch_next_rollout`)."""
    global _PENDING_AHEAD
    with _PENDING_LOCK:
        _PENDING_AHEAD += 1


def rollout_collected() -> None:
    """The round that rollout belongs to took it (the DAG's `rollout` node of an asynchronous round)."""
    global _PENDING_AHEAD
    with _PENDING_LOCK:
        _PENDING_AHEAD = max(0, _PENDING_AHEAD - 1)


def forget_rollouts_ahead() -> None:
    """A run ended (or failed): no rollout of it is pending any more."""
    global _PENDING_AHEAD
    with _PENDING_LOCK:
        _PENDING_AHEAD = 0


def rollouts_pending_ahead() -> int:
    """How many rollouts were started ahead and not yet collected."""
    with _PENDING_LOCK:
        return _PENDING_AHEAD


def trainer_threads(background_threads: int) -> int:
    """The torch threads an update gets now: the cores the worker's rollout ahead leaves while one is pending
    (a DAG rule: started and not yet collected, however far it got), otherwise this process's setting."""
    if rollouts_pending_ahead():
        return max(1, min(torch.get_num_threads(), available_cores() - background_threads))
    return torch.get_num_threads()


@contextmanager
def sharing_cores(background_threads: int) -> Iterator[int]:
    """Train with `trainer_threads(background_threads)` torch threads; this process's setting back afterwards."""
    before = torch.get_num_threads()
    threads = trainer_threads(background_threads)
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


class BackgroundEngineError(RuntimeError):
    """The worker process died, or a command failed inside it; the run stops rather than sample from stale weights."""


def _cpu_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The served model's weights as fresh CPU tensors (LoRA merged), safe to share with another process."""
    return {k: v.detach().to("cpu", copy=True) for k, v in served_model(model).state_dict().items()}


def _serve(conn: Any, threads: int, reuse_kv: bool, device: str) -> None:
    """The worker: load a model, take weights, generate, until told to close or the pipe closes."""
    torch.set_num_threads(threads)
    from rlvr_factory.rollout.hf import TransformersEngine  # the worker imports transformers itself

    engine = None
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        kind = message[0]
        try:
            if kind == "load":
                _, model, tokenizer, version = message
                model = freeze(model.to(device))
                engine = TransformersEngine(Policy(model, tokenizer, version), reuse_kv=reuse_kv, desc="background rollout")
                reply: Any = None
            elif kind == "weights":
                _, weights, version = message
                engine.policy.model.load_state_dict(weights, strict=True)
                engine.policy.version = version
                engine._caches = []  # KV computed by other weights is never continued
                reply = None
            elif kind == "generate":
                _, requests, config, wanted = message
                if torch.get_num_threads() != wanted:
                    torch.set_num_threads(wanted)
                reply = engine.generate(requests, config)
            elif kind == "threads":
                reply = torch.get_num_threads()
            elif kind == "close":
                conn.send(("ok", None))
                return
            else:
                raise ValueError(f"unknown command {kind!r}")
            conn.send(("ok", reply))
        except Exception as e:  # the host raises it with the worker's traceback
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


class BackgroundEngine:
    """`Engine` whose forward passes run in a spawned worker process (see the module doc)."""

    def __init__(self, policy: Policy, threads: int = 1, reuse_kv: bool = True) -> None:
        self.threads = threads
        self.sync_seconds: list[float] = []
        self.loaded: tuple[int, int] | None = None
        self.lock = threading.RLock()  # one command at a time: a rollout ahead and an evaluation may share the worker
        context = mp.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, threads, reuse_kv, str(policy.device)),
                                        name="rlvr-background-engine", daemon=True)
        start = time.perf_counter()
        self._process.start()
        child.close()
        # a copy either way: .to("cpu") must not move the live model
        served = merged_copy(policy.model) if is_lora(policy.model) else copy.deepcopy(policy.model)
        self._call(("load", served.to("cpu"), policy.tokenizer, policy.version), START_TIMEOUT_S)
        self.loaded = (id(policy.model), policy.version)
        self.cores = available_cores()
        log.info("background engine: worker pid %d started in %.1f s; a rollout running ahead samples on %d torch "
                 "thread(s) beside the update, any other on all %d cores", self._process.pid,
                 time.perf_counter() - start, threads, self.cores)

    def _call(self, message: tuple, timeout: float | None = None) -> Any:
        with self.lock:
            return self._exchange(message, timeout)

    def _exchange(self, message: tuple, timeout: float | None) -> Any:
        if not self._process.is_alive():
            raise BackgroundEngineError(f"the background engine's worker (pid {self._process.pid}) is not running "
                                        f"(exit code {self._process.exitcode}); resume from the last checkpoint")
        self._conn.send(message)
        while not self._conn.poll(1.0 if timeout is None else min(1.0, timeout)):
            if not self._process.is_alive():
                raise BackgroundEngineError(f"the background engine's worker (pid {self._process.pid}) died during "
                                            f"{message[0]!r} (exit code {self._process.exitcode})")
            if timeout is not None:
                timeout -= 1.0
                if timeout <= 0:
                    raise BackgroundEngineError(f"the background engine's worker did not answer {message[0]!r} in time")
        status, reply = self._conn.recv()
        if status != "ok":
            raise BackgroundEngineError(f"the background engine failed on {message[0]!r}: {reply}")
        return reply

    def push_weights(self, policy: Policy) -> float:
        """Send the policy's weights to the worker; the seconds it took."""
        start = time.perf_counter()
        self._call(("weights", _cpu_weights(policy.model), policy.version))
        self.loaded = (id(policy.model), policy.version)
        seconds = time.perf_counter() - start
        self.sync_seconds.append(seconds)
        return seconds

    def sync(self, policy: Policy) -> float:
        """Push the policy's weights unless the worker holds them already; the seconds spent."""
        with self.lock:
            return 0.0 if self.loaded == (id(policy.model), policy.version) else self.push_weights(policy)

    def bound(self, policy: Policy) -> BoundEngine:
        """An `Engine` that always samples from `policy`'s weights, whoever else uses the worker meanwhile."""
        return BoundEngine(self, policy)

    def sampling_threads(self) -> int:
        """The worker's torch threads for a `generate` from this thread: `threads` for a rollout running ahead
        of its round (the update trains on the other cores meanwhile), all cores otherwise."""
        return self.threads if is_running_ahead() else max(self.threads, self.cores)

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> tuple[list[Generation], EngineStats]:
        """One turn for every request, sampled in the worker exactly as `TransformersEngine.generate` does,
        on `sampling_threads()` torch threads."""
        return self._call(("generate", [Request(list(r.context), r.key) for r in requests], config,
                           self.sampling_threads()))

    def worker_threads(self) -> int:
        """The worker's torch threads now (those of its last `generate`)."""
        return self._call(("threads",))

    def close(self) -> None:
        """Stop the worker."""
        if self._process.is_alive():
            try:
                self._call(("close",), 10.0)
            except BackgroundEngineError:
                pass
            self._process.join(5.0)
            if self._process.is_alive():
                self._process.kill()
        self._conn.close()


class BoundEngine:
    """The background engine sampling from one policy: each `generate` makes sure the worker holds that
    policy's weights (a rollout running ahead and an evaluation may alternate on one worker)."""

    def __init__(self, engine: BackgroundEngine, policy: Policy) -> None:
        self.engine, self.policy = engine, policy

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> tuple[list[Generation], EngineStats]:
        with self.engine.lock:
            self.engine.sync(self.policy)
            return self.engine.generate(requests, config)


_RUNNING: dict[tuple, BackgroundEngine] = {}


def shared_background_engine(policy: Policy, threads: int, reuse_kv: bool) -> BackgroundEngine:
    """The process's background engine for this architecture and settings (started on first use)."""
    key = (type(policy.model).__name__, policy.model.config.to_json_string(), threads, reuse_kv, str(policy.device))
    engine = _RUNNING.get(key)
    if engine is None:
        close_background_engines()
        engine = _RUNNING[key] = BackgroundEngine(policy, threads, reuse_kv)
    return engine


def close_background_engines() -> None:
    """Stop the process's background engine, if any."""
    for key in list(_RUNNING):
        _RUNNING.pop(key).close()


atexit.register(close_background_engines)
