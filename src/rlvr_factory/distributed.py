"""Data-parallel training across processes (torchrun): one full model replica per rank.

Every rank holds the whole round (the same samples, in the same order), so each computes the
global batch's normalisers (token counts, sequence counts, advantages) itself; it then runs
forward and backward on its contiguous share of each batch only, the gradients are summed
across ranks once per optimizer step, and every rank takes the same optimizer step, so the
weights stay identical and equal those of one process on the global batch (up to the order
of floating-point sums). Rollouts and verification are sharded the same way and gathered in
rank order, so every rank sees the round exactly as one process would have assembled it.

With one process (no `WORLD_SIZE`, or 1) every function here is the identity or a no-op, so
a single-process run does exactly what it did before this module existed.
"""

from __future__ import annotations

import copy
import logging
import os
import random
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Callable, Iterator, Literal, Sequence, TypeVar, get_args

import torch
import torch.distributed as dist

from rlvr_factory.rollout.episode import Episode

log = logging.getLogger(__name__)
T = TypeVar("T")
U = TypeVar("U")
Backend = Literal["auto", "gloo", "nccl"]
Strategy = Literal["ddp", "fsdp"]
BACKENDS = get_args(Backend)
STRATEGIES = get_args(Strategy)


@dataclass(frozen=True)
class DistributedConfig:
    backend: Backend = "auto"  # auto: nccl when CUDA is available, else gloo | gloo | nccl
    strategy: Strategy = "ddp"  # ddp: a full replica per rank, gradients summed across ranks once per optimizer step | fsdp: the trained weights, their gradients and the optimizer state sharded across ranks (FSDP2)
    cpu_offload: bool = False  # fsdp: the sharded weights, gradients and optimizer state live in CPU memory between uses
    timeout_minutes: float = 30.0  # how long a rank waits for the others at a collective before failing

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"distributed.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"distributed.strategy must be one of {STRATEGIES}, got {self.strategy!r}")
        if self.cpu_offload and self.strategy != "fsdp":
            raise ValueError("distributed.cpu_offload offloads FSDP's shards: set distributed.strategy: fsdp too")
        if self.timeout_minutes <= 0:
            raise ValueError(f"distributed.timeout_minutes must be positive, got {self.timeout_minutes}")


_ACTIVE = DistributedConfig()  # the configuration `init` joined the group with


def launched_world_size() -> int:
    """The number of processes the launcher (torchrun, or Ray setting the same variables) started: `WORLD_SIZE`, else 1."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init(config: DistributedConfig = DistributedConfig()) -> bool:
    """Join the process group the launcher's environment describes (`WORLD_SIZE`, `RANK`, `LOCAL_RANK`,
    `MASTER_ADDR`, `MASTER_PORT`); returns whether this process now runs data-parallel.

    A single process (no `WORLD_SIZE`, or 1) does nothing; a group already joined is kept.
    """
    global _ACTIVE
    if launched_world_size() <= 1:
        return False
    _ACTIVE = config
    if not dist.is_initialized():  # a launcher such as Ray Train may have joined the group already
        _init_process_group(config)
    log.info("data-parallel: rank %d of %d (%s, %s)", rank(), world_size(), dist.get_backend(), config.strategy)
    return True


def _init_process_group(config: DistributedConfig) -> None:
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(f"WORLD_SIZE={launched_world_size()} but {', '.join(missing)} unset: launch with torchrun "
                           "(or set RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as torchrun does); see docs/distributed.md")
    backend = config.backend if config.backend != "auto" else ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("distributed.backend is nccl but CUDA is unavailable; use gloo (or auto) on CPUs")
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    timeout = timedelta(minutes=config.timeout_minutes)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # torchrun keeps one store for every attempt of a launch (the same MASTER_PORT), and torch 2.13 no longer
        # keys it by attempt: the ranks of a restarted group would read the dead attempt's addresses. Each attempt
        # gets its own prefix, as torch itself did before.
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        store = dist.PrefixStore(f"/rlvr/attempt_{attempt}", dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), launched_world_size(), is_master=False,
            timeout=timeout))
        dist.init_process_group(backend, store=store, rank=int(os.environ["RANK"]), world_size=launched_world_size(),
                                timeout=timeout)
        return
    dist.init_process_group(backend, timeout=timeout)


def world_size() -> int:
    """Processes training together (1 without a process group)."""
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    """This process's rank (0 without a process group)."""
    return dist.get_rank() if dist.is_initialized() else 0


def is_main() -> bool:
    """Whether this process writes files and logs to MLflow (rank 0)."""
    return rank() == 0


def barrier() -> None:
    """Wait until every rank gets here (nothing with one process)."""
    if world_size() > 1:
        dist.barrier()


def shard(n: int) -> slice:
    """This rank's contiguous share of `n` items; shares differ in size by at most one, rank 0's first."""
    size, extra = divmod(n, world_size())
    r = rank()
    start = r * size + min(r, extra)
    return slice(start, start + size + (r < extra))


def rank_seed(seed: int, of_rank: int | None = None) -> int:
    """This rank's sampling seed (or rank `of_rank`'s), derived from the run's `seed` (rank 0 keeps it), so a run
    is deterministic for a fixed world size."""
    r = rank() if of_rank is None else of_rank
    return seed if r == 0 else random.Random(f"{seed}/rank{r}").getrandbits(62)


def gather(local: list[T]) -> list[T]:
    """Every rank's list joined in rank order, on every rank (`local` itself with one process)."""
    if world_size() == 1:
        return local
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, local)
    return [item for part in parts for item in part]


def map_sharded(fn: Callable[[Sequence[T]], list[U]], items: Sequence[T]) -> list[U]:
    """`fn(items)`, with each rank applying `fn` to its `shard` and the results gathered in order."""
    if world_size() == 1:
        return fn(items)
    local = items[shard(len(items))]
    out = gather(list(fn(local)) if len(local) else [])
    if len(out) != len(items):
        raise RuntimeError(f"map_sharded: {len(out)} results for {len(items)} items; fn must return one per item")
    return out


def combine_stats(stats: dict[str, float], maxima: Sequence[str] = ()) -> dict[str, float]:
    """Per-rank partial stats summed over ranks (the keys in `maxima`: their maximum), on every rank."""
    if world_size() == 1:
        return stats
    parts: list[Any] = [None] * world_size()
    dist.all_gather_object(parts, stats)
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = (max(out[key], value) if key in maxima else out[key] + value) if key in out else value
    return out


def sum_gradients(model: torch.nn.Module) -> None:
    """Sum every trainable parameter's gradient across ranks, in one flat all-reduce (a missing
    gradient counts as zero), so each rank holds the global batch's gradient."""
    if world_size() == 1 or sharded():  # FSDP reduces (sums) the gradients in the backward pass
        return
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    at = 0
    for p in params:
        p.grad.copy_(flat[at : at + p.numel()].view_as(p.grad))
        at += p.numel()


def sum_value(value: torch.Tensor) -> float:
    """A scalar summed across ranks (its float with one process)."""
    if world_size() == 1:
        return float(value)
    total = value.detach().clone().reshape(1)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return float(total)


def sum_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` summed elementwise across ranks, in place (unchanged with one process)."""
    if world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def broadcast_parameters(model: torch.nn.Module) -> None:
    """Every rank's weights (trainable or not) and buffers set to rank 0's."""
    if world_size() == 1:
        return
    with torch.no_grad():
        for tensor in [*model.parameters(), *model.buffers()]:
            dist.broadcast(tensor.data, src=0)


Run = Callable[[list[int], int], tuple[list[Episode], dict[str, float]]]


def shard_run(run: Run) -> Run:
    """A rollout `run(prompt indices, seed)` whose prompts are split across ranks: each rank samples
    its share with its `rank_seed`, and the episodes (task-major, `task_index` into the indices) and the
    summed loop stats are gathered, the same on every rank. With one process, `run` itself."""
    if world_size() == 1:
        return run

    def sharded(indices: list[int], seed: int) -> tuple[list[Episode], dict[str, float]]:
        part = shard(len(indices))
        episodes, stats = run(indices[part], rank_seed(seed)) if part.stop > part.start else ([], {})
        local = [replace(e, task_index=e.task_index + part.start) for e in episodes]
        totals: Counter = Counter()
        for s in gather([stats]):
            totals.update(s)
        return gather(local), dict(totals)

    return sharded


# FSDP2 (`strategy: fsdp`): the model a training loop steps is a copy sharded across the ranks; the policy keeps its
# whole weights on every rank (what rollouts and evaluation read), released while the copy trains and gathered back
# into place when it is done.


def sharded() -> bool:
    """Whether training shards the model across ranks: `strategy: fsdp` with more than one rank."""
    return world_size() > 1 and _ACTIVE.strategy == "fsdp"


def _fsdp_modules(model: torch.nn.Module) -> list:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def shard_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` sharded with FSDP2: each decoder layer (the classes in the model's `_no_split_modules`,
    Hugging Face's name for them) is one unit and the root holds the rest. Weights stay in the model's dtype and
    gradients are reduced in float32, summed rather than averaged (the losses are normalised by the global batch,
    as under `ddp`). The copy is made on the meta device and sharded there, then each rank fills its shards from
    `model`'s weights: the weights are never held twice whole."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    from torch.distributed.tensor import distribute_tensor

    params = dict(model.named_parameters())
    first = next(iter(params.values()))
    meta = {id(p): torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
            for p in params.values()}
    trained = copy.deepcopy(model, meta)
    offload = _ACTIVE.cpu_offload and first.device.type != "cpu"  # on a CPU the shards are in CPU memory already
    options = {"mp_policy": MixedPrecisionPolicy(param_dtype=first.dtype, reduce_dtype=torch.float32),
               "offload_policy": CPUOffloadPolicy() if offload else OffloadPolicy()}
    layers = set(getattr(model, "_no_split_modules", None) or ())
    for module in list(trained.modules()):
        if module is not trained and type(module).__name__ in layers:
            fully_shard(module, **options)
    fully_shard(trained, **options)
    trained.to_empty(device=first.device)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            trained.get_buffer(name).copy_(buffer)
        for name, shard in trained.named_parameters():
            mine = distribute_tensor(params[name].detach(), shard.device_mesh, shard.placements, src_data_rank=None)
            shard.to_local().copy_(mine.to_local())
    for module in _fsdp_modules(trained):
        module.set_gradient_divide_factor(1.0)
        module.set_force_sum_reduction_for_comms(True)  # a plain sum: gloo has no pre-multiplied one
    return trained


@contextmanager
def training_copy(model: torch.nn.Module, checkpointing: bool = False) -> Iterator[torch.nn.Module]:
    """The module a training loop steps: `model` itself, or under `strategy: fsdp` a sharded copy (`shard_copy`).
    While the copy trains, `model`'s weights are released; when the loop ends they are the copy's, gathered whole
    on every rank one weight at a time, and the copy's shards are freed. A loop that fails leaves `model` without
    weights (the run is over). With `checkpointing`, the module trains with activation checkpointing."""
    if not sharded():
        with activation_checkpointing(model, checkpointing):
            yield model
        return
    trained = shard_copy(model)
    params = dict(model.named_parameters())
    for p in params.values():
        p.data = torch.empty(0, dtype=p.dtype, device=p.device)
    with activation_checkpointing(trained, checkpointing):
        yield trained
    reshard(trained)
    with torch.no_grad():
        for name, shard in trained.named_parameters():
            shard.grad = None
            params[name].data = shard.full_tensor().to(params[name].device)
            shard.to_local().untyped_storage().resize_(0)  # the copy is spent: its shards go now, not when a
            # collection finds its cycles (which would hold them through the next round's update)


@contextmanager
def activation_checkpointing(model: torch.nn.Module, on: bool) -> Iterator[None]:
    """With `on`, `model` (a Hugging Face model, LoRA or not) recomputes each layer's activations in the backward
    pass instead of keeping them (Hugging Face's `activation_checkpointing_enable`, non-reentrant: a layer's
    `forward` is checkpointed and FSDP2's hooks stay outside it) until the block ends: less activation memory for
    about a third more compute. Nothing without `on`."""
    if not on:
        yield
        return
    if not getattr(model, "supports_gradient_checkpointing", False):
        raise ValueError(f"{type(model).__name__} does not support activation checkpointing (a Hugging Face model "
                         "that sets supports_gradient_checkpointing does); turn gradient_checkpointing off")
    new = hasattr(model, "activation_checkpointing_enable")  # transformers >= 5.x; gradient_* before
    (model.activation_checkpointing_enable if new else model.gradient_checkpointing_enable)({"use_reentrant": False})
    try:
        yield
    finally:
        (model.activation_checkpointing_disable if new else model.gradient_checkpointing_disable)()


def most_passes(n: int) -> int:
    """The largest `n` over the ranks (`n` itself unless sharded): a sharded model's forward and backward passes
    are collectives, so every rank makes as many as the busiest, the others with weight zero."""
    if not sharded():
        return n
    most = torch.tensor([n])
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    return int(most)


def empty_pass(model: torch.nn.Module, ids: torch.Tensor, backward: bool) -> None:
    """A forward pass (and backward, with `backward`) on one token of `ids` that changes no gradient: a sharded
    model's collectives on a rank that has no rows left."""
    out = model(input_ids=ids[:1, :1]).logits
    if backward:
        (out.float().sum() * 0.0).backward()


def reshard(model: torch.nn.Module) -> None:
    """Put a sharded model's weights back to their shards (the root keeps its own whole after a forward pass), so
    that `parameters()` are the shards the optimizer steps; nothing otherwise."""
    if sharded():
        for module in _fsdp_modules(model):
            module.reshard()


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict | None) -> None:
    """`state` (what `optimizer_state` or `whole_optimizer_state` returned, under any strategy, or a checkpoint's)
    into `optimizer`. Under `strategy: fsdp` each rank takes its shards of a whole state itself (no collective)."""
    if state is None:
        return
    names = _parameter_names(model, optimizer)
    state = keyed_by(state, names, by_name=False)
    if sharded():
        from torch.distributed.tensor import DTensor, distribute_tensor

        params = [p for group in optimizer.param_groups for p in group["params"]]
        state = {**state, "state": {
            at: {key: distribute_tensor(value, params[at].device_mesh, params[at].placements, src_data_rank=None)
                 if isinstance(params[at], DTensor) and torch.is_tensor(value) and not isinstance(value, DTensor)
                 and value.shape == params[at].shape else value
                 for key, value in values.items()}
            for at, values in state["state"].items()}}
    optimizer.load_state_dict(state)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's state to keep between rounds: its `state_dict()`; under `strategy: fsdp` keyed by parameter
    name, each rank holding its shards (`whole_optimizer_state` gathers it for a checkpoint)."""
    state = optimizer.state_dict()
    return keyed_by(state, _parameter_names(model, optimizer), by_name=True) if sharded() else state


def whole_optimizer_state(state: dict | None) -> dict | None:
    """`state` with every sharded tensor gathered whole into CPU memory, one at a time (a collective: every rank
    calls it, and gets the whole state): what a checkpoint holds. Nothing to do unless sharded."""
    if not sharded() or state is None:
        return state
    from torch.distributed.tensor import DTensor

    names = [name for group in state["param_groups"] for name in group["params"]]  # the same order on every rank
    whole = {name: {key: value.full_tensor().cpu() if isinstance(value, DTensor) else value
                    for key, value in state["state"][name].items()} for name in names if name in state["state"]}
    return {"state": whole, "param_groups": state["param_groups"]}


def _parameter_names(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The name of each parameter the optimizer steps, in its order (the positions of a `state_dict()`)."""
    names = {id(p): name for name, p in model.named_parameters()}
    return [names[id(p)] for group in optimizer.param_groups for p in group["params"]]


def keyed_by(state: dict, names: list[str], by_name: bool) -> dict:
    """An optimizer state dict keyed by parameter name (FSDP's whole state) or by position (`state_dict()`), as
    `by_name` asks, from either: a checkpoint written under one strategy resumes under the other."""
    keys = [key for group in state.get("param_groups", []) for key in group["params"]]
    if not keys or isinstance(keys[0], str) == by_name:
        return state
    if len(keys) != len(names):
        raise ValueError(f"the optimizer state holds {len(keys)} parameters, the model trains {len(names)}: "
                         "it was written for another model or another set of trained weights (LoRA or not)")
    to = dict(enumerate(names)) if by_name else {name: at for at, name in enumerate(names)}
    try:
        return {"state": {to[key]: value for key, value in state["state"].items()},
                "param_groups": [{**group, "params": [to[key] for key in group["params"]]} for group in state["param_groups"]]}
    except KeyError as missing:
        raise ValueError(f"the optimizer state names a parameter the model does not have: {missing}") from None
