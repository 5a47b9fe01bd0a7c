"""Rollouts on vLLM with an engine per rank: one process against N data-parallel ranks, on the same cores.

    .venv-vllm/bin/python benchmarks/vllm_ranks.py [--sizes 1m 20m] [--ranks 1 2] [--prompts 64] [--samples 8]
                                                   [--rounds 3] [--max-new-tokens 40]

Run it in the vLLM venv (`bash scripts/install_vllm.sh`). For each size (`benchmarks/engines.py`'s Llamas) and each
world size N, N fresh processes join one gloo group the way torchrun joins them and each starts its vLLM engine as a
data-parallel run does (`rollout.engine=vllm` under torchrun: vLLM's `external_launcher`, the engine in the rank's
process, `rollout.vllm.cpu_threads_bind` giving each rank its share of the machine's cores). A round: every rank
takes a small random step on its weights (a stand-in for the update, the same on every rank), pushes them into its
engine, then samples its share of the `--prompts` groups of `--samples` completions (whole groups, with its rank's
seed); the round ends when the slowest rank is done. The table gives the median seconds per round (sampling, and
the weight push), the round's tokens per second over all ranks, and each N's speed-up over one process on the
same cores (one process uses them all). Start-up (the engines, at once) is reported apart.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


def _rank(rank: int, world: int, port: int, size: str, cores: str, args: argparse.Namespace, out: str) -> None:
    os.environ.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), VLLM_NO_USAGE_STATS="1")
    import torch
    import torch.distributed as dist

    from engines import policy_of, step
    from rlvr_factory import distributed
    from rlvr_factory.rollout.engine import Request, SamplingConfig
    from rlvr_factory.rollout.vllm_engine import VllmEngine, VllmSettings
    from rlvr_factory.training.sft import encode_prompts

    if world > 1:
        distributed.init(distributed.DistributedConfig(backend="gloo"))
    policy = policy_of(size)
    prompts = [f"Compute {i}+{i * 7 % 13}*{i % 5 + 2}" for i in range(args.prompts)]
    mine = encode_prompts(policy.tokenizer, prompts)[distributed.shard(args.prompts)]
    requests = [Request(ids) for ids in mine for _ in range(args.samples)]
    start = time.perf_counter()
    engine = VllmEngine(policy, VllmSettings(cpu_threads_bind=cores))
    distributed.barrier()
    startup = time.perf_counter() - start
    rounds, syncs, tokens = [], [], []
    for r in range(args.warmup + args.rounds):
        step(policy, r)
        distributed.barrier()
        start = time.perf_counter()
        engine.sync(policy)
        synced = time.perf_counter() - start
        generations, _ = engine.generate(requests, SamplingConfig(max_new_tokens=args.max_new_tokens,
                                                                  seed=distributed.rank_seed(r),
                                                                  batch_size=len(requests)))
        distributed.barrier()  # the round ends with the slowest rank
        elapsed = time.perf_counter() - start
        if r >= args.warmup:
            rounds.append(elapsed)
            syncs.append(distributed.sum_value(torch.tensor(synced)) / world)
            tokens.append(distributed.sum_value(torch.tensor(float(sum(len(g.token_ids) for g in generations)))))
    engine.close()
    if rank == 0:
        torch.save({"parameters": sum(p.numel() for p in policy.model.parameters()), "startup": startup,
                    "s_round": statistics.median(rounds), "sync": statistics.median(syncs),
                    "tok_s": statistics.median(t / s for t, s in zip(tokens, rounds))}, Path(out) / "result.pt")
    if world > 1:
        dist.destroy_process_group()


def measure(size: str, world: int, args: argparse.Namespace) -> dict:
    import torch
    import torch.multiprocessing as mp

    cores = sorted(os.sched_getaffinity(0))
    share = len(cores) // world
    bind = "|".join(",".join(map(str, cores[r * share:(r + 1) * share])) for r in range(world))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as out:
        mp.start_processes(_rank, args=(world, port, size, bind, args, out), nprocs=world, start_method="spawn")
        return {**torch.load(Path(out) / "result.pt"), "bind": bind}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["1m", "20m"], choices=["1m", "20m", "100m"])
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before them")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    if any(cores % n for n in args.ranks):
        parser.error(f"every --ranks value must divide the {cores} cores this process may use")
    print(f"{args.prompts} prompts x {args.samples} samples x {args.max_new_tokens} new tokens a round, medians of "
          f"{args.rounds} rounds after {args.warmup} warm-up; {cores} cores shared by the ranks, float32\n")
    print("| size | params | ranks | cores per rank | start-up s | s/round | weight push s | tok/s | speed-up over 1 process |")
    print("|---|---|---|---|---|---|---|---|---|")
    for size in args.sizes:
        base = None
        for world in args.ranks:
            row = measure(size, world, args)
            base = base or (row["tok_s"] if world == 1 else None)
            speedup = f"**{row['tok_s'] / base:.2f}x**" if base else "-"
            print(f"| {size} | {row['parameters'] / 1e6:.1f}M | {world} | {cores // world} | {row['startup']:.1f} | "
                  f"{row['s_round']:.2f} | {row['sync']:.2f} | {row['tok_s']:,.0f} | {speedup} |", flush=True)


if __name__ == "__main__":
    main()
