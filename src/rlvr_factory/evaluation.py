"""Held-out evaluation over whole episodes: greedy accuracy, unbiased pass@k and majority-vote
maj@k, overall, per domain, per difficulty and, for multi-turn runs, per number of turns used (and,
for domains that name them in `report_breakdown`, the greedy episodes' mean breakdown entries,
e.g. the CAD domain's build rate and volume IoU). A domain with an `evaluation_report` method adds
its own metrics computed from the same episodes (code repair: the repair rate with the first edit
alone and within `max_turns`, by mutation kind)."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from math import comb
from typing import Sequence

from rlvr_factory.domains.base import Domain, Task, answer_key, member
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.agent_loop import RolloutConfig, sample_episodes
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.rollout.episode import Episode
from rlvr_factory.verification import VerifyConfig, judge


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


@dataclass(frozen=True)
class Verdict:
    """One evaluated episode: what it answered, whether that is right, and how many turns it took."""

    answer: str
    correct: bool
    turns: int
    tool_calls: float
    breakdown: dict = field(default_factory=dict)  # the verdict's reward breakdown
    info: dict = field(default_factory=dict)  # the episode's environment counters, summed over its steps


def sample_verdicts(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: VerifyConfig, samples: int, sampling: SamplingConfig,
    desc: str, rollout: RolloutConfig | None = None,
) -> list[list[Verdict]]:
    """For each task, each of its `samples` episodes' verdict."""
    episodes, _ = sample_episodes(policy, domain, tasks, samples, rollout or RolloutConfig(), sampling, desc=desc)
    scores, _ = judge(domain, [e.score for e in episodes], [e.answer for e in episodes],
                      [tasks[e.task_index].reference for e in episodes], verify)
    verdicts: list[list[Verdict]] = [[] for _ in tasks]
    for e, score in zip(episodes, scores):
        verdicts[e.task_index].append(
            Verdict(_answer(e), score.correct, len(e.turns), e.info.get("tool_calls", 0.0), dict(score.breakdown),
                    dict(e.info))
        )
    return verdicts


def _answer(episode: Episode) -> str:
    return episode.answer if episode.answer is not None else episode.text


def correctness(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: VerifyConfig, samples: int, sampling: SamplingConfig,
    desc: str, rollout: RolloutConfig | None = None,
) -> list[list[bool]]:
    """For each task, whether each of its `samples` episodes is correct."""
    return [[v.correct for v in vs] for vs in sample_verdicts(policy, tasks, domain, verify, samples, sampling, desc, rollout)]


def pass_rates(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: VerifyConfig, samples: int, sampling: SamplingConfig,
    rollout: RolloutConfig | None = None,
) -> dict[str, float]:
    """Each task's fraction of correct episodes (by task id)."""
    hits = correctness(policy, tasks, domain, verify, samples, sampling, desc="pass rate", rollout=rollout)
    return {t.task_id: sum(h) / len(h) for t, h in zip(tasks, hits)}


def greedy_solved(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: VerifyConfig, sampling: SamplingConfig,
    rollout: RolloutConfig | None = None,
) -> int:
    """How many of `tasks` the greedy episode solves (0 for none, without sampling)."""
    if not tasks:
        return 0
    hits = correctness(policy, tasks, domain, verify, 1, replace(sampling, temperature=0.0), "eval greedy", rollout)
    return sum(h[0] for h in hits)


def greedy_accuracy(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: VerifyConfig, sampling: SamplingConfig,
    rollout: RolloutConfig | None = None,
) -> float:
    """Fraction of tasks solved by the greedy episode."""
    if not tasks:
        raise ValueError("greedy_accuracy got no tasks; is the validation split empty?")
    return greedy_solved(policy, tasks, domain, verify, sampling, rollout) / len(tasks)


def _groups(tasks: Sequence[Task], turns: Sequence[int] | None = None) -> dict[str, list[int]]:
    """Task indices per report group: overall, per difficulty, per domain, per domain and difficulty,
    and with `turns` (each task's greedy episode's) per number of turns used."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, task in enumerate(tasks):
        names = ["overall", f"difficulty_{task.difficulty}", f"domain_{task.domain}",
                 f"domain_{task.domain}/difficulty_{task.difficulty}"]
        for name in names + ([f"turns_{turns[i]}"] if turns is not None else []):
            groups[name].append(i)
    return groups


def evaluate_policy(
    policy: Policy, tasks: Sequence[Task], domain: Domain, verify: VerifyConfig, sampling: SamplingConfig, k: int,
    rollout: RolloutConfig | None = None,
) -> dict[str, float]:
    """Greedy accuracy, sampled pass@1 / pass@k and maj@k over whole episodes, overall and as
    `<metric>/<group>` (groups: `difficulty_<d>`, `domain_<name>`, `domain_<name>/difficulty_<d>`,
    and for multi-turn runs `turns_<n>`, the tasks whose greedy episode took n turns, with the
    greedy episodes' `turns_per_episode` and `tool_calls_per_episode`).

    maj@k is reported over the tasks whose domain has comparable answers (`answer_key`);
    a group without such tasks has none. The domain's own `evaluation_report(policy, tasks, verify,
    sampling, rollout, greedy, sampled, k)`, when it has one, adds its metrics (from these greedy and
    sampled verdicts, and any episodes of its own).
    """
    if not tasks:
        raise ValueError("evaluate_policy got no tasks; is the held-out split empty?")
    rollout = rollout or RolloutConfig()
    greedy = [v[0] for v in sample_verdicts(policy, tasks, domain, verify, 1, replace(sampling, temperature=0.0),
                                            "eval greedy", rollout)]
    sampled = sample_verdicts(policy, tasks, domain, verify, k, sampling, f"eval pass@{k}", rollout)
    majority: dict[int, bool] = {}
    for i, (task, verdicts) in enumerate(zip(tasks, sampled)):
        keys = [answer_key(member(domain, task.domain), v.answer) for v in verdicts]
        if callable(getattr(member(domain, task.domain), "answer_key", None)):
            majority[i] = majority_vote(keys, [v.correct for v in verdicts])
    multi_turn = rollout.max_turns > 1
    reported = [getattr(member(domain, task.domain), "report_breakdown", ()) for task in tasks]
    report = {}
    for name, idx in sorted(_groups(tasks, [v.turns for v in greedy] if multi_turn else None).items()):
        suffix = "" if name == "overall" else f"/{name}"
        report[f"greedy_accuracy{suffix}"] = sum(greedy[i].correct for i in idx) / len(idx)
        for key in sorted({key for i in idx for key in reported[i]}):
            values = [float(greedy[i].breakdown.get(key, 0.0)) for i in idx if key in reported[i]]
            report[f"greedy_{key}{suffix}"] = sum(values) / len(values)
        for kk in (1, k):
            report[f"pass@{kk}{suffix}"] = sum(pass_at_k(k, sum(v.correct for v in sampled[i]), kk) for i in idx) / len(idx)
        voted = [majority[i] for i in idx if i in majority]
        if voted:
            report[f"maj@{k}{suffix}"] = sum(voted) / len(voted)
        report[f"num_tasks{suffix}"] = float(len(idx))
    if multi_turn:
        report["turns_per_episode"] = sum(v.turns for v in greedy) / len(greedy)
        report["tool_calls_per_episode"] = sum(v.tool_calls for v in greedy) / len(greedy)
    own = getattr(domain, "evaluation_report", None)
    if callable(own):
        report.update(own(policy, tasks, verify, sampling, rollout, greedy, sampled, k))
    return report
