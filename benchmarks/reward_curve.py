"""Reward per domain of every saved policy of a run, on the same validation tasks: does RL move it?

    python benchmarks/reward_curve.py --project . [--tasks 100] [--samples 4] [--max-new-tokens 64]

Reads a finished run's project directory: its `domain` parameters, its validation tasks, the SFT
policy, the checkpoints `data/06_models/checkpoints/round_NNN` (`rl.checkpoint_every`) and the
final RL policy. Each policy samples `--samples` completions (temperature 1, seeded) for the first
`--tasks` validation tasks of each domain, plus a greedy one; prints the mean reward and greedy
accuracy per domain and policy, with the ratio of each mean reward to the SFT policy's.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import pandas as pd

from rlvr_factory.config_loader import ConfigLoader
from rlvr_factory.domains import get_domain, tasks_from_frame
from rlvr_factory.models.policy import load_policy
from rlvr_factory.rollout.hf import SamplingConfig, generate
from rlvr_factory.verification import VerifyConfig, verify_batch

VERIFY = VerifyConfig(workers=1, timeout_seconds=10.0, max_input_chars=100_000)


def policies(project: Path) -> list[tuple[str, Path]]:
    """(label, directory) of the SFT policy, each checkpoint in round order, and the final RL policy."""
    models = project / "data/06_models"
    found = [("sft", models / "sft_policy")]
    found += [(p.name, p) for p in sorted((models / "checkpoints").glob("round_*"))]
    return found + [("rl (final)", models / "rl_policy")]


def rewards(policy_dir: Path, tasks, domain, samples: int, sampling: SamplingConfig) -> dict[str, tuple[float, float]]:
    """Per domain: mean reward of the sampled completions and greedy accuracy."""
    policy = load_policy(policy_dir, device="cpu")
    result: dict[str, list[float]] = defaultdict(list)
    greedy: dict[str, list[float]] = defaultdict(list)
    runs = ((sampling, samples, result, "reward"), (replace(sampling, temperature=0.0), 1, greedy, "correct"))
    for config, n, sink, key in runs:
        completions, _ = generate(policy, [t.prompt for t in tasks], n, config, desc="curve")
        references = [tasks[c.prompt_index].reference for c in completions]
        scores, _ = verify_batch(domain, [c.text for c in completions], references, VERIFY)
        for c, s in zip(completions, scores):
            sink[tasks[c.prompt_index].domain].append(float(getattr(s, key)))
    return {d: (sum(v) / len(v), sum(greedy[d]) / len(greedy[d])) for d, v in result.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, default=Path("."))
    parser.add_argument("--tasks", type=int, default=100, help="validation tasks per domain")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    params = ConfigLoader(str(args.project / "conf"), base_env="base", default_run_env="local")["parameters"]
    domain = get_domain(params["domain"])
    frame = pd.read_parquet(args.project / "data/05_model_input/validation_tasks.parquet")
    tasks = [t for d, g in frame.groupby("domain", sort=True) for t in tasks_from_frame(g.head(args.tasks))]
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=1.0, seed=0, batch_size=256)
    rows = [(label, rewards(path, tasks, domain, args.samples, sampling)) for label, path in policies(args.project)]
    domains = sorted(rows[0][1])
    print(f"{'policy':14}" + "".join(f" {d + ' reward':>20} {'greedy acc':>10} {'vs sft':>7}" for d in domains))
    for label, by_domain in rows:
        print(f"{label:14}" + "".join(
            f" {by_domain[d][0]:20.3f} {by_domain[d][1]:10.3f} {by_domain[d][0] / max(rows[0][1][d][0], 1e-9):7.2f}"
            for d in domains))


if __name__ == "__main__":
    main()
