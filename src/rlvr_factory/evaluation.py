"""Held-out evaluation: greedy pass@1 and sampled pass@k, overall and per difficulty."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from math import comb
from typing import Sequence

from rlvr_factory.domains.base import Domain, Task
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.hf import SamplingConfig, generate
from rlvr_factory.verification import verify_batch


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, Eq. 1)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def correctness(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, samples: int, sampling: SamplingConfig,
    desc: str,
) -> list[list[bool]]:
    """For each task, whether each of its `samples` completions is correct."""
    completions, _ = generate(policy, [t.prompt for t in tasks], samples, sampling, desc=desc)
    scores, _ = verify_batch(
        domain, [c.text for c in completions], [tasks[c.prompt_index].reference for c in completions], verify
    )
    hits: list[list[bool]] = [[] for _ in tasks]
    for c, score in zip(completions, scores):
        hits[c.prompt_index].append(score.correct)
    return hits


def greedy_accuracy(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, sampling: SamplingConfig
) -> float:
    """Fraction of tasks solved by the greedy completion."""
    hits = correctness(policy, tasks, domain, verify, 1, replace(sampling, temperature=0.0), desc="eval greedy")
    return sum(h[0] for h in hits) / len(tasks)


def evaluate_policy(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, sampling: SamplingConfig, k: int
) -> dict[str, float]:
    """Greedy accuracy and sampled pass@1 / pass@k, overall and as `<metric>/difficulty_<d>`."""
    if not tasks:
        raise ValueError("evaluate_policy got no tasks; is the held-out split empty?")
    greedy = correctness(policy, tasks, domain, verify, 1, replace(sampling, temperature=0.0), desc="eval greedy")
    sampled = correctness(policy, tasks, domain, verify, k, sampling, desc=f"eval pass@{k}")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, task in enumerate(tasks):
        groups["overall"].append(i)
        groups[f"difficulty_{task.difficulty}"].append(i)
    report = {}
    for name, idx in sorted(groups.items()):
        suffix = "" if name == "overall" else f"/{name}"
        report[f"greedy_accuracy{suffix}"] = sum(greedy[i][0] for i in idx) / len(idx)
        for kk in (1, k):
            report[f"pass@{kk}{suffix}"] = sum(pass_at_k(k, sum(sampled[i]), kk) for i in idx) / len(idx)
    report["num_tasks"] = float(len(tasks))
    return report
