"""Rollout engines: vLLM vs transformers' `generate`, in the same run, at three model sizes.

    python benchmarks/engines.py [--sizes 1m 20m 100m] [--prompts 64] [--samples 8] [--rounds 3]
                                 [--device auto|cpu|cuda] [--dtype auto|float32|bfloat16] [--no-enforce-eager]
                                 [--multiprocessing]

Run it in the vLLM venv (`bash scripts/install_vllm.sh`, then `.venv-vllm/bin/python benchmarks/engines.py`).
Each size is a freshly initialised Llama (the embedded ~1M architecture with its byte vocabulary;
~20M and ~100M with a real-size 32k vocabulary). A round samples `--samples` completions of
`--max-new-tokens` tokens for each of `--prompts` chat-templated prompts (a group shares its
prompt); between rounds the weights change (a small random step, as an update would), so the
vLLM engine gets them pushed (`reload_weights`) and the transformers engine samples from the
model itself. The table gives per size and engine the median seconds per round, the median of
tokens sampled per second, the median weight-sync seconds (vLLM) and the ratio vLLM /
transformers in tokens/s, over `--rounds` timed rounds after `--warmup` untimed ones; vLLM is
measured twice, as the engine samples by default (every request with its own seeded generator,
so its tokens do not depend on its batch) and with `per_request_seed: false` (one generator for
the engine; vLLM draws for seeded requests one kernel each). Start-up (vLLM's engine, once per
run) is reported apart.

On a GPU (`--device auto` picks one when there is one) both engines run in bfloat16 (`--dtype
auto`), the transformers engine on the policy's device and vLLM's CUDA build beside it;
`--no-enforce-eager` lets vLLM capture CUDA graphs (and compile), as it is run on GPUs in
production, at the cost of a longer start-up.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr_factory.models.policy import Policy, resolve_device
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.engine import Request, SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine
from rlvr_factory.rollout.vllm_engine import EngineStartError, VllmEngine, VllmSettings
from rlvr_factory.training.sft import encode_prompts

# hidden, intermediate, layers, heads, vocabulary (None: the byte tokenizer's)
SIZES = {"1m": (128, 256, 4, 4, None), "20m": (320, 1280, 6, 5, 32_000), "100m": (768, 2048, 10, 12, 32_000)}


def policy_of(size: str, device: str = "cpu", dtype: torch.dtype = torch.float32) -> Policy:
    hidden, intermediate, layers, heads, vocab = SIZES[size]
    tokenizer = build_byte_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab or len(tokenizer), hidden_size=hidden, intermediate_size=intermediate,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=512, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    return Policy(LlamaForCausalLM(config).eval().to(device=device, dtype=dtype), tokenizer)


def step(policy: Policy, seed: int) -> None:
    """A stand-in for an update: every weight moves a little."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(1e-3 * torch.randn(p.shape, generator=generator).to(device=p.device, dtype=p.dtype))
    policy.version += 1


def measure(policy: Policy, engine, requests: list[Request], args, sync) -> dict[str, float]:
    """Median seconds per round, tokens/s and weight-sync seconds over `args.rounds` timed rounds,
    after `args.warmup` untimed ones (vLLM's first `generate` compiles and allocates: at 1M it
    takes ten times a later round's time)."""
    seconds, rates, syncs = [], [], []
    for r in range(args.warmup + args.rounds):
        step(policy, r)
        synced = sync(policy)
        start = time.perf_counter()
        generations, _ = engine.generate(requests, SamplingConfig(max_new_tokens=args.max_new_tokens, seed=r,
                                                                  batch_size=len(requests)))
        elapsed = time.perf_counter() - start
        if r >= args.warmup:
            seconds.append(elapsed)
            rates.append(sum(len(g.token_ids) for g in generations) / elapsed)
            syncs.append(synced)
    return {"s_round": statistics.median(seconds), "tok_s": statistics.median(rates), "sync": statistics.median(syncs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", nargs="+", default=list(SIZES), choices=list(SIZES))
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per engine and size")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before them")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--device", default="auto", help="auto (a GPU when there is one) | cpu | cuda | cuda:N")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="auto: bfloat16 on a GPU, float32 on the CPU")
    parser.add_argument("--no-enforce-eager", dest="enforce_eager", action="store_false",
                        help="let vLLM capture CUDA graphs (GPU; slower start-up)")
    parser.add_argument("--multiprocessing", dest="in_process", action="store_false",
                        help="run vLLM's engine core in its own process (scheduling overlaps the GPU's work)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.2,
                        help="share of the GPU vLLM takes (each size starts its own engine)")
    args = parser.parse_args()
    device = resolve_device(args.device)
    dtype = args.dtype if args.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16")
    where = torch.cuda.get_device_name(device) if device.startswith("cuda") else f"CPU, threads {torch.get_num_threads()}"
    print(f"{args.prompts} prompts x {args.samples} samples x {args.max_new_tokens} new tokens, "
          f"medians of {args.rounds} rounds after {args.warmup} warm-up; {where}, {dtype}, "
          f"vLLM {'eager' if args.enforce_eager else 'with CUDA graphs'}, engine core "
          f"{'in this process' if args.in_process else 'in its own process'}")
    rows = []
    for size in args.sizes:
        policy = policy_of(size, device, getattr(torch, dtype))
        params = sum(p.numel() for p in policy.model.parameters()) / 1e6
        prompts = [f"Compute {i}+{i * 7 % 13}*{i % 5 + 2}" for i in range(args.prompts)]
        requests = [Request(ids) for ids in encode_prompts(policy.tokenizer, prompts) for _ in range(args.samples)]
        hf = measure(policy, TransformersEngine(policy, reuse_kv=False, desc=f"{size} transformers"), requests, args,
                     lambda p: 0.0)
        start = time.perf_counter()
        try:
            engine = VllmEngine(policy, VllmSettings(dtype=dtype, enforce_eager=args.enforce_eager,
                                                     in_process=args.in_process, gpu_memory_utilization=args.gpu_memory_utilization))
        except EngineStartError as e:  # report the size, go on with the next
            print(f"{size}: {e}", flush=True)
            rows.append((size, params, hf, None, None))
            continue
        startup = time.perf_counter() - start
        ours = measure(policy, engine, requests, args, engine.sync)
        engine.settings = replace(engine.settings, per_request_seed=False)  # the same engine, one generator
        ours["engine_seed_tok_s"] = measure(policy, engine, requests, args, engine.sync)["tok_s"]
        engine.close()
        rows.append((size, params, hf, ours, startup))
        del policy, engine
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(f"| size | params | transformers s/round | transformers tok/s | vLLM s/round | vLLM tok/s | "
          f"vLLM / transformers tok/s | vLLM, one generator: tok/s | ratio | vLLM weight sync s | vLLM start-up s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for size, params, hf, ours, startup in rows:
        if ours is None:
            print(f"| {size} | {params:.1f}M | {hf['s_round']:.2f} | {hf['tok_s']:.0f} | cannot serve | | | | | | |")
            continue
        print(f"| {size} | {params:.1f}M | {hf['s_round']:.2f} | {hf['tok_s']:.0f} | {ours['s_round']:.2f} | "
              f"{ours['tok_s']:.0f} | {ours['tok_s'] / hf['tok_s']:.2f}x | {ours['engine_seed_tok_s']:.0f} | "
              f"{ours['engine_seed_tok_s'] / hf['tok_s']:.2f}x | {ours['sync']:.3f} | {startup:.1f} |")


if __name__ == "__main__":
    main()
