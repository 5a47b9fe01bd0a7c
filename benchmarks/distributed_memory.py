"""Per-rank peak memory of an RL update under `distributed.strategy: ddp` and `fsdp` (issue 47's table), measured on
CPU ranks (gloo), and the per-GPU figure the same accounting projects for 7B and 14B models.

    python benchmarks/distributed_memory.py [--sizes 54M 185M] [--ranks 2] [--samples 8] [--tokens 128]

Each configuration runs in fresh processes (`torch.multiprocessing`, spawned with the variables torchrun sets): one
process, then `--ranks` ranks under `ddp`, then under `fsdp`. Each builds a Llama of the size asked for (vocabulary
32,000, tied embeddings, the same seed) and runs two RL updates (`rl_update`, the second one reloading the first one's
optimizer state as a round does) on the same `--samples` samples of `--tokens` tokens, in micro-batches of 2; then
`ddp` and `fsdp` again with activation checkpointing (`rl.update.gradient_checkpointing`).

**Memory** is the process's peak resident set (VmHWM, reset after the imports) less its resident set then: the
weights, gradients, optimizer state, activations and everything else the update holds. glibc's mmap threshold is
fixed (`MALLOC_MMAP_THRESHOLD_`) so that a freed tensor leaves the resident set instead of staying in the heap; the
peak then follows what the update really holds.

**Projection.** Per parameter, in the model's dtype of `d` bytes (AdamW's two moments in the same dtype, as here):
`ddp` holds the weights, their gradients, two moments and the gradients' flat all-reduce buffer, `5d` on every
rank; `fsdp` holds `4d/N` during the update (shards of the weights, gradients and moments), and at most
`d (1 + 3/N)` when the whole weights are gathered back (the rollout copy beside the shards of the weights and moments).
Activations and the root unit (embeddings and head, gathered whole for a pass) come on top: the measured table
shows how much on these sizes.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys
import tempfile
from pathlib import Path

SIZES = {"54M": (512, 12), "185M": (1024, 12)}  # hidden size, layers (intermediate 2.6875 x hidden, heads of 64)
VOCAB = 32_000
GIB = 2**30


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key):
            return int(line.split()[1]) * 1024
    raise KeyError(key)


def _rank(rank: int, world: int, port: int, strategy: str, size: str, samples: int, tokens: int, checkpointing: bool,
          out: str) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from rlvr_factory import distributed
    from rlvr_factory.models.policy import Policy
    from rlvr_factory.models.tokenizer import build_byte_tokenizer
    from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update

    torch.set_num_threads(1)
    if world > 1:
        distributed.init(distributed.DistributedConfig(backend="gloo", strategy=strategy))
    tokenizer = build_byte_tokenizer()  # for its pad id: the samples are token ids
    base = _status("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here
    hidden, layers = SIZES[size]
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=int(hidden * 2.6875),
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         tie_word_embeddings=True)
    policy = Policy(LlamaForCausalLM(config), tokenizer)
    draw = random.Random(0)
    prompt = tokens // 4
    batch = [Sample(f"t{i // 4}", [draw.randrange(VOCAB) for _ in range(prompt)],
                    [draw.randrange(VOCAB) for _ in range(tokens - prompt)], float(i % 3)) for i in range(samples)]
    for round_index in range(2):
        rl_update(policy, batch, UpdateConfig(lr=1e-5, minibatch_size=samples, micro_batch_size=2, seed=round_index,
                                              gradient_checkpointing=checkpointing))
    parameters = sum(p.numel() for p in policy.model.parameters())
    torch.save({"parameters": parameters, "peak": _status("VmHWM") - base}, Path(out) / f"rank{rank}.pt")
    if world > 1:
        torch.distributed.destroy_process_group()


def measure(strategy: str, world: int, size: str, samples: int, tokens: int,
            checkpointing: bool = False) -> tuple[int, list[int]]:
    """(parameters, each rank's peak bytes) of two RL updates under `strategy` on `world` ranks."""
    import torch
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank, args=(world, port, strategy, size, samples, tokens, checkpointing, out), nprocs=world,
                           start_method="spawn")
        results = [torch.load(Path(out) / f"rank{r}.pt") for r in range(world)]
    return results[0]["parameters"], [r["peak"] for r in results]


def projection(parameters: float, dtype_bytes: int, ranks: int) -> tuple[float, float]:
    """GiB per GPU for the model states alone: `ddp`, and `fsdp` on `ranks` ranks (the module docstring's accounting)."""
    return 5 * dtype_bytes * parameters / GIB, dtype_bytes * parameters * max(4 / ranks, 1 + 3 / ranks) / GIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") != "65536":  # the children inherit it from a re-executed parent
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})

    print(f"RL update, {args.samples} samples x {args.tokens} tokens, micro-batches of 2, two rounds; per-rank peak "
          f"resident memory (MiB, and bytes per parameter); {args.ranks} gloo ranks on this CPU\n")
    n = args.ranks
    print(f"| model | parameters | 1 process | ddp x{n} | fsdp x{n} | fsdp / ddp | ddp x{n}, checkpointing | "
          f"fsdp x{n}, checkpointing | fsdp / ddp, checkpointing |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        parameters, (single,) = measure("ddp", 1, size, args.samples, args.tokens)
        peaks = {(strategy, checkpointing): max(measure(strategy, n, size, args.samples, args.tokens, checkpointing)[1])
                 for checkpointing in (False, True) for strategy in ("ddp", "fsdp")}

        def cell(peak: int) -> str:
            return f"{peak / 2**20:,.0f} ({peak / parameters:.1f} B)"

        cells = [f"{cell(peaks['ddp', c])} | {cell(peaks['fsdp', c])} | **{peaks['fsdp', c] / peaks['ddp', c]:.2f}x**"
                 for c in (False, True)]
        print(f"| Llama {size} | {parameters / 1e6:.1f}M | {cell(single)} | {' | '.join(cells)} |", flush=True)

    print("\nProjected per GPU, model states only (weights, gradients, AdamW moments; activations on top), bf16:\n")
    print("| model | ddp | fsdp x2 | fsdp x4 | fsdp x8 |")
    print("|---|---|---|---|---|")
    for name, parameters in (("7B", 7e9), ("14B", 14e9)):
        ddp = projection(parameters, 2, 1)[0]
        cells = [f"{projection(parameters, 2, n)[1]:.1f} GiB" for n in (2, 4, 8)]
        print(f"| {name} | {ddp:.1f} GiB | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
