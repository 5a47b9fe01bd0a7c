"""Sampling with and without huge pages for PyTorch's CPU allocations (`THP_MEM_ALLOC_ENABLE`), and with
transformers' concatenating KV cache against the engine's in-place one.

    python benchmarks/cpu_allocator.py [--prompts 32] [--group 8] [--length 300] [--new-tokens 160] [--repeats 2]

Importing `rlvr_factory` sets `THP_MEM_ALLOC_ENABLE=1` unless the environment sets it
(src/rlvr_factory/__init__.py). This measures why: each configuration samples the same round
(`--prompts` prompts of `--length` bytes, `--group` samples each, `--new-tokens` sampled tokens, the
embedded architecture, 0.9M parameters, on the CPU) in a fresh process, since PyTorch reads the
variable once, at the first allocation. The two alternate `--repeats` times (a busy machine slows both
alike); the table gives the median wall seconds, the process's user and kernel CPU seconds, its minor
page faults, and the wall time's ratio to PyTorch's default. The generated tokens are compared too:
huge pages change where tensors live, never what is computed.

The third configuration is what the engine does now: its KV cache (`rollout/hf.py`, `InPlaceLayer`) writes
each token's keys and values into one buffer per layer instead of concatenating a fresh copy of the whole
cache per token (transformers' `DynamicCache`, which the first two configurations use), so most of the
allocations, page zeroing and copies go away; the tokens stay the same.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

# name -> (THP_MEM_ALLOC_ENABLE, KV cache)
CONFIGS = {
    "default (4 KiB pages)": ("0", "concat"),
    "THP_MEM_ALLOC_ENABLE=1": ("1", "concat"),
    "THP + in-place KV cache": ("1", "in-place"),
}


def child(args) -> None:
    import random

    import torch

    import rlvr_factory
    from rlvr_factory.models.policy import Policy
    from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
    from rlvr_factory.models.tokenizer import build_byte_tokenizer
    from rlvr_factory.rollout.engine import SamplingConfig
    from rlvr_factory.rollout import hf
    from rlvr_factory.rollout.hf import generate

    if args.cache == "concat":  # transformers' own cache, as `generate` builds it when given none
        from transformers import DynamicCache

        hf.in_place_cache = lambda model, reserve: DynamicCache(config=model.config)
    torch.set_num_threads(os.cpu_count() or 1)
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(TinyModelConfig(max_positions=1024), len(tokenizer), tokenizer.pad_token_id,
                             tokenizer.bos_token_id, tokenizer.eos_token_id, 0)
    policy = Policy(model, tokenizer)
    rng = random.Random(0)
    prompts = ["".join(rng.choice("abcdefgh =+-()\n") for _ in range(args.length)) for _ in range(args.prompts)]
    config = SamplingConfig(max_new_tokens=args.new_tokens, temperature=1.0, batch_size=512, seed=0)
    huge = rlvr_factory.cpu_huge_pages()
    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    completions, stats = generate(policy, prompts, args.group, config)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    digest = hash(tuple(tuple(c.completion_ids) for c in completions))
    print(json.dumps({"wall": wall, "user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
                      "faults": after.ru_minflt - before.ru_minflt, "tokens": stats["new_tokens"],
                      "huge_pages": huge, "digest": digest}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--length", type=int, default=300, help="prompt bytes")
    parser.add_argument("--new-tokens", type=int, default=160)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--cache", default="in-place", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    runs: dict[str, list[dict]] = {name: [] for name in CONFIGS}
    for _ in range(args.repeats):
        for name, (value, cache) in CONFIGS.items():
            env = os.environ | {"THP_MEM_ALLOC_ENABLE": value, "PYTHONHASHSEED": "0"}
            done = subprocess.run([sys.executable, __file__, "--child", "--cache", cache, *sys.argv[1:]], env=env,
                                  capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
    base = statistics.median(r["wall"] for r in runs["default (4 KiB pages)"])
    digests = {r["digest"] for rs in runs.values() for r in rs}
    first = next(iter(runs.values()))[0]
    print(f"{args.prompts * args.group} rows, {args.length}-byte prompts, {first['tokens']} sampled tokens; "
          f"median of {args.repeats}; same tokens in every run: {len(digests) == 1}")
    print(f"{'configuration':<24} {'huge pages':>10} {'wall s':>7} {'user s':>7} {'sys s':>7} {'faults':>9} {'speed-up':>9}")
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in ("wall", "user", "sys", "faults")}
        print(f"{name:<24} {str(rs[0]['huge_pages']):>10} {med['wall']:>7.1f} {med['user']:>7.1f} {med['sys']:>7.1f} "
              f"{med['faults']:>9,.0f} {base / med['wall']:>8.2f}x")


if __name__ == "__main__":
    main()
