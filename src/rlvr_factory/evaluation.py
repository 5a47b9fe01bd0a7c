"""Held-out evaluation: greedy accuracy, unbiased pass@k and majority-vote maj@k, overall, per
domain and per difficulty (and, for domains that name them in `report_breakdown`, the greedy
completions' mean breakdown entries, e.g. the CAD domain's build rate and volume IoU)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from math import comb
from typing import Sequence

from rlvr_factory.domains.base import Domain, Task, answer_key, member
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.hf import SamplingConfig, generate
from rlvr_factory.verification import verify_batch
from rlvr_factory.verifiers.score import Score


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct (Chen et al. 2021, Eq. 1)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def majority_vote(keys: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """maj@k for one task: is the most common stated answer right? (Wang et al. 2023, self-consistency)

    `keys` are the samples' canonical answers (None: none stated); ties go to the answer stated
    first; the vote is right when a sample giving the winning answer is correct.
    """
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return False
    top = max(votes.values())
    winner = next(k for k in keys if k is not None and votes[k] == top)
    return next(c for k, c in zip(keys, correct) if k == winner)


def sample_verdicts(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, samples: int, sampling: SamplingConfig,
    desc: str,
) -> list[list[tuple[str, Score]]]:
    """For each task, each of its `samples` completions and its verdict."""
    completions, _ = generate(policy, [t.prompt for t in tasks], samples, sampling, desc=desc)
    scores, _ = verify_batch(
        domain, [c.text for c in completions], [tasks[c.prompt_index].reference for c in completions], verify
    )
    verdicts: list[list[tuple[str, Score]]] = [[] for _ in tasks]
    for c, score in zip(completions, scores):
        verdicts[c.prompt_index].append((c.text, score))
    return verdicts


def correctness(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, samples: int, sampling: SamplingConfig,
    desc: str,
) -> list[list[bool]]:
    """For each task, whether each of its `samples` completions is correct."""
    return [[s.correct for _, s in v] for v in sample_verdicts(policy, tasks, domain, verify, samples, sampling, desc)]


def pass_rates(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, samples: int, sampling: SamplingConfig
) -> dict[str, float]:
    """Each task's fraction of correct samples (by task id)."""
    hits = correctness(policy, tasks, domain, verify, samples, sampling, desc="pass rate")
    return {t.task_id: sum(h) / len(h) for t, h in zip(tasks, hits)}


def greedy_accuracy(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, sampling: SamplingConfig
) -> float:
    """Fraction of tasks solved by the greedy completion."""
    hits = correctness(policy, tasks, domain, verify, 1, replace(sampling, temperature=0.0), desc="eval greedy")
    return sum(h[0] for h in hits) / len(tasks)


def _groups(tasks: Sequence[Task]) -> dict[str, list[int]]:
    """Task indices per report group: overall, per difficulty, per domain, per domain and difficulty."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, task in enumerate(tasks):
        for name in ("overall", f"difficulty_{task.difficulty}", f"domain_{task.domain}",
                     f"domain_{task.domain}/difficulty_{task.difficulty}"):
            groups[name].append(i)
    return groups


def evaluate_policy(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: dict, sampling: SamplingConfig, k: int
) -> dict[str, float]:
    """Greedy accuracy, sampled pass@1 / pass@k and maj@k, overall and as `<metric>/<group>`
    (groups: `difficulty_<d>`, `domain_<name>`, `domain_<name>/difficulty_<d>`).

    maj@k is reported over the tasks whose domain has comparable answers (`answer_key`);
    a group without such tasks has none.
    """
    if not tasks:
        raise ValueError("evaluate_policy got no tasks; is the held-out split empty?")
    greedy = [[s for _, s in v] for v in sample_verdicts(
        policy, tasks, domain, verify, 1, replace(sampling, temperature=0.0), desc="eval greedy")]
    sampled = [[(text, s.correct) for text, s in v] for v in sample_verdicts(
        policy, tasks, domain, verify, k, sampling, desc=f"eval pass@{k}")]
    majority: dict[int, bool] = {}
    for i, (task, verdicts) in enumerate(zip(tasks, sampled)):
        keys = [answer_key(member(domain, task.domain), text) for text, _ in verdicts]
        if callable(getattr(member(domain, task.domain), "answer_key", None)):
            majority[i] = majority_vote(keys, [ok for _, ok in verdicts])
    reported = [getattr(member(domain, task.domain), "report_breakdown", ()) for task in tasks]
    report = {}
    for name, idx in sorted(_groups(tasks).items()):
        suffix = "" if name == "overall" else f"/{name}"
        report[f"greedy_accuracy{suffix}"] = sum(greedy[i][0].correct for i in idx) / len(idx)
        for key in sorted({key for i in idx for key in reported[i]}):
            values = [float(greedy[i][0].breakdown.get(key, 0.0)) for i in idx if key in reported[i]]
            report[f"greedy_{key}{suffix}"] = sum(values) / len(values)
        for kk in (1, k):
            report[f"pass@{kk}{suffix}"] = sum(pass_at_k(k, sum(ok for _, ok in sampled[i]), kk) for i in idx) / len(idx)
        voted = [majority[i] for i in idx if i in majority]
        if voted:
            report[f"maj@{k}{suffix}"] = sum(voted) / len(voted)
        report[f"num_tasks{suffix}"] = float(len(idx))
    return report
