"""Code-repair evaluation: repair rate with the first edit alone and within `max_turns`, pass@k,
overall and by mutation kind and difficulty.

The repair rate at one turn runs the same tasks in environments that judge the first edit (the
feedback is never seen); at `max_turns` the policy may read the visible tests' report and edit
again. A policy that uses the feedback repairs more within `max_turns` than with its first edit.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import replace
from typing import TYPE_CHECKING, Sequence

from rlvr_factory.domains.base import Task
from rlvr_factory.evaluation import Verdict, pass_at_k, sample_verdicts
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.rollout.engine import SamplingConfig

if TYPE_CHECKING:  # the domain imports this module when evaluation asks it for its report
    from rlvr_factory.domains.code_repair import CodeRepairDomain
    from rlvr_factory.verification import VerifyConfig


def _groups(tasks: Sequence[Task]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, task in enumerate(tasks):
        names = ["overall", f"difficulty_{task.difficulty}"]
        names += [f"kind_{kind}" for kind in sorted(set(task.reference.get("kinds") or ["external"]))]
        for name in names:
            groups[name].append(i)
    return groups


def first_turn_verdicts(policy: Policy, tasks: Sequence[Task], domain: CodeRepairDomain, verify: VerifyConfig,
                        sampling: SamplingConfig, rollout: RolloutConfig) -> list[Verdict]:
    """Each task's greedy episode in an environment that judges the first edit (no feedback is seen)."""
    one_turn = copy.copy(domain)
    one_turn.max_turns = 1
    greedy = replace(sampling, temperature=0.0)
    return [v[0] for v in sample_verdicts(policy, tasks, one_turn, verify, 1, greedy, "repair@1turn",
                                          replace(rollout, max_turns=1))]


def repair_rates(tasks: Sequence[Task], max_turns: int, first: Sequence[Verdict], full: Sequence[Verdict],
                 sampled: Sequence[Sequence[Verdict]], k: int) -> dict[str, float]:
    """`repair@1turn` (the `first` verdicts), `repair@<max_turns>turns` (`full`: greedy episodes of up to
    `max_turns` edits), `pass@1` and `pass@k` (`sampled`: k episodes per task), each overall and as
    `<metric>/<group>` (groups: `difficulty_<d>`, `kind_<mutation kind>`). `edit_error@1turn` is the share of
    first edits that did not apply (a SEARCH text not found or ambiguous, a malformed block, a refused path):
    what a policy that cannot yet copy the lines it edits fails on, before the bug is even in question."""
    report: dict[str, float] = {}
    for name, idx in sorted(_groups(tasks).items()):
        suffix = "" if name == "overall" else f"/{name}"
        report[f"repair@1turn{suffix}"] = sum(first[i].correct for i in idx) / len(idx)
        report[f"edit_error@1turn{suffix}"] = sum(first[i].info.get("edit_errors", 0.0) > 0 for i in idx) / len(idx)
        report[f"repair@{max_turns}turns{suffix}"] = sum(full[i].correct for i in idx) / len(idx)
        for kk in (1, k):
            report[f"pass@{kk}{suffix}"] = sum(pass_at_k(k, sum(v.correct for v in sampled[i]), kk)
                                               for i in idx) / len(idx)
        report[f"num_tasks{suffix}"] = float(len(idx))
    return report


def repair_report(policy: Policy, tasks: Sequence[Task], domain: CodeRepairDomain, verify: VerifyConfig,
                  sampling: SamplingConfig, k: int, rollout: RolloutConfig) -> dict[str, float]:
    """`repair_rates` of the policy's episodes on `tasks`: greedy with the first edit alone, greedy within
    `max_turns`, and `k` sampled within `max_turns`."""
    if not tasks:
        raise ValueError("repair_report got no tasks; is the held-out split empty?")
    first = first_turn_verdicts(policy, tasks, domain, verify, sampling, rollout)
    greedy = replace(sampling, temperature=0.0)
    full = [v[0] for v in sample_verdicts(policy, tasks, domain, verify, 1, greedy, "repair@max", rollout)]
    sampled = sample_verdicts(policy, tasks, domain, verify, k, sampling, f"repair pass@{k}", rollout)
    return repair_rates(tasks, domain.max_turns, first, full, sampled, k)
