"""Seconds per RL update with a KL term in the loss: every zero-advantage sample backpropagated (full KL)
against a share of them (`rl.update.kl_sample_fraction`), and without KL, on the same round.

    python benchmarks/kl_sampling.py [--prompts 32] [--group 8] [--success 0.3] [--length 300] [--repeats 3]

The round is shaped like a code-repair round (docs/code_repair.md): `--prompts` groups of `--group`
samples, a share `--success` of the groups with one rewarded sample (the others all 0: zero
advantage), prompts and completions of about `--length` bytes, the embedded architecture
(0.9M parameters) on the CPU. With a KL term (`kl_coef` 0.05, k3, in the loss) a zero-advantage sample
still has a gradient, so full KL backpropagates all of them; a fraction f backpropagates a seeded f of
them with their KL term weighted 1/f (an unbiased KL gradient). Each configuration updates a fresh
copy of the same model; the configurations alternate `--repeats` times (a busy machine slows all
alike) and the table gives the median seconds per update, its ratio to full KL, the share of samples
that got a backward pass, and the cosine between the update's parameter change and full KL's (1.0:
the same direction).
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time

import torch

from rlvr_factory.models.policy import Policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update

CONFIGS = {"no KL": (0.0, 1.0), "full KL": (0.05, 1.0), "KL, f=0.5": (0.05, 0.5), "KL, f=0.25": (0.05, 0.25)}


def round_samples(tokenizer, args) -> list[Sample]:
    rng = random.Random(0)
    out = []
    for g in range(args.prompts):
        prompt = tokenizer("".join(rng.choice("abcdefgh =+-()\n") for _ in range(args.length)))["input_ids"]
        winner = rng.randrange(args.group) if rng.random() < args.success else -1
        for k in range(args.group):
            completion = tokenizer("".join(rng.choice("xyz<>=+-\n") for _ in range(rng.randint(args.length // 4, args.length // 2))))["input_ids"]
            out.append(Sample(f"t{g}", prompt, completion + [tokenizer.eos_token_id], float(k == winner)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--success", type=float, default=0.3, help="share of groups with a rewarded sample")
    parser.add_argument("--length", type=int, default=300, help="prompt bytes (completions: a quarter to a half)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.manual_seed(0)
    tokenizer = build_byte_tokenizer()
    base = build_tiny_model(TinyModelConfig(max_positions=1024), len(tokenizer), tokenizer.pad_token_id,
                            tokenizer.bos_token_id, tokenizer.eos_token_id, 0)
    reference = copy.deepcopy(base)
    with torch.no_grad():  # the policy has moved off the reference, so the KL has a gradient
        for p in base.parameters():
            p.add_(0.01 * torch.randn_like(p))
    samples = round_samples(tokenizer, args)
    start = torch.cat([p.detach().flatten() for p in base.parameters()])
    seconds, trained, moves = {k: [] for k in CONFIGS}, {}, {}
    for _ in range(args.repeats):
        for name, (coef, fraction) in CONFIGS.items():
            policy = Policy(copy.deepcopy(base), tokenizer)
            config = UpdateConfig(lr=1e-4, warmup_steps=0, minibatch_size=len(samples), kl_coef=coef,
                                  kl_sample_fraction=fraction, seed=0)
            t0 = time.perf_counter()
            stats = rl_update(policy, samples, config, reference=reference if coef else None)
            seconds[name].append(time.perf_counter() - t0)
            trained[name] = stats["trained_sample_fraction"]
            moves[name] = torch.cat([p.detach().flatten() for p in policy.model.parameters()]) - start
    full = statistics.median(seconds["full KL"])
    print(f"{len(samples)} samples, {args.prompts} groups of {args.group}, {args.success:.0%} with a success; "
          f"median of {args.repeats}")
    print(f"{'update':<12} {'s/update':>9} {'vs full KL':>11} {'backward share':>15} {'cos to full KL':>15}")
    for name in CONFIGS:
        median = statistics.median(seconds[name])
        cos = torch.nn.functional.cosine_similarity(moves[name].double(), moves["full KL"].double(), dim=0).item()
        print(f"{name:<12} {median:>9.2f} {median / full:>10.2f}x {trained[name]:>15.2f} {cos:>15.3f}")


if __name__ == "__main__":
    main()
