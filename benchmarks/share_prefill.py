"""The transformers engine with and without `share_prefill`, in the same run: a group's samples repeat
their prompt, and sharing runs it through the model once per batch instead of once per sample.

    python benchmarks/share_prefill.py [--widths 128 320] [--prompts 64] [--samples 4 8] [--repeats 2]

Each model is a freshly initialised embedded Llama (`models/tiny.py`, byte vocabulary, the
reasoning-gym environment's 768 positions) at each `--widths` hidden size (128: the embedded
model, ~1M parameters). The prompts are reasoning-gym test questions of several families
(50-700 bytes, as in `conf/reasoning_gym`), chat-templated; batches as that configuration samples
them (`batch_by_length`, `--batch-size`). With random weights every sample runs to
`--max-new-tokens`. The table gives per size and samples a prompt the best seconds of `--repeats`
(alternating), the ratio, and whether both sampled the same tokens (seeded).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from rlvr_factory.domains import get_domain
from rlvr_factory.models.policy import Policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.engine import Request, SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine
from rlvr_factory.training.sft import encode_prompts

FAMILIES = ["isomorphic_strings", "syllogism", "course_schedule", "largest_island", "coin_flip", "gcd", "zebra_puzzles",
            "letter_counting"]


def prompts_of(n: int) -> list[str]:
    rg = get_domain({"name": "reasoning_gym", "datasets": FAMILIES, "splits": {"test": -(-n // len(FAMILIES))},
                     "max_prompt_chars": 620, "max_answer_chars": 48})
    return [t.prompt for t in rg.generate_tasks()][:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--widths", type=int, nargs="+", default=[128])
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--samples", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--max-new-tokens", type=int, default=56)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    prompts = prompts_of(args.prompts)
    tokenizer = build_byte_tokenizer()
    rows = []
    for width in args.widths:
        architecture = replace(TinyModelConfig(max_positions=768), hidden_size=width, intermediate_size=3 * width)
        model = build_tiny_model(architecture, len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id,
                                 tokenizer.eos_token_id, seed=0)
        policy = Policy(model.eval(), tokenizer)
        size = f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M"
        encoded = encode_prompts(tokenizer, prompts)
        for k in args.samples:
            requests = [Request(p) for p in encoded for _ in range(k)]
            best, tokens = {False: float("inf"), True: float("inf")}, {}
            for _ in range(args.repeats):
                for share in (False, True):
                    config = SamplingConfig(max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                                            batch_by_length=True, share_prefill=share, seed=0)
                    start = time.perf_counter()
                    generations, _ = TransformersEngine(policy, reuse_kv=False, desc=f"{size} k={k}").generate(requests, config)
                    best[share] = min(best[share], time.perf_counter() - start)
                    tokens[share] = [g.token_ids for g in generations]
            rows.append((size, k, len(requests), best[False], best[True], tokens[False] == tokens[True]))
    mean_prompt = sum(map(len, encode_prompts(tokenizer, prompts))) / len(prompts)  # the same for every width
    print(f"\n{len(prompts)} prompts of {mean_prompt:.0f} tokens on average, {args.max_new_tokens} new tokens, "
          f"batch {args.batch_size}, best of {args.repeats}")
    print("| model | samples a prompt | sequences | own prefill s | shared prefill s | ratio | same tokens |")
    print("|---|---|---|---|---|---|---|")
    for size, k, n, own, shared, same in rows:
        print(f"| {size} | {k} | {n} | {own:.1f} | {shared:.1f} | {own / shared:.2f}x | {'yes' if same else 'NO'} |")


if __name__ == "__main__":
    main()
