"""Flywheel: logged interactions -> verified, deduplicated, decontaminated train tasks; the last
evaluation's failures -> the regression set. The next `curate` reads the pool."""

from __future__ import annotations

import logging
from dataclasses import replace

import pandas as pd

from rlvr_factory import flywheel
from rlvr_factory.domains import DomainConfig, Task, get_domain, tasks_from_frame
from rlvr_factory.domains.curation import members, quarantine_frame, validate_row
from rlvr_factory.evaluation import correctness, greedy_accuracy
from rlvr_factory.models.policy import Policy
from rlvr_factory.parameters import CurateConfig, EvaluateConfig
from rlvr_factory.verification import VerifyConfig

log = logging.getLogger(__name__)


def _tasks(rows: list[dict], domain) -> list[Task]:
    """Task rows this project wrote (the pool, the regression set) as tasks."""
    known = members(domain)
    return [task for task, _ in (validate_row(r, known) for r in rows) if task is not None]


def ingest_interactions(
    interactions: list, previous_pool: list[dict], tasks: pd.DataFrame, regression: list[dict], domain: DomainConfig,
    verify: VerifyConfig, curate: CurateConfig,
) -> tuple[list[dict], pd.DataFrame, dict]:
    """The flywheel pool (the previous one plus this batch's new train tasks), the rows held back
    with their reasons, and the counts as MLflow metrics (`flywheel.*`)."""
    env = get_domain(domain)
    pool = _tasks(previous_pool, env)
    current = tasks_from_frame(tasks)
    evaluation = [t for t in current if t.split != "train"] + _tasks(regression, env)
    result = flywheel.ingest(interactions, [*current, *pool], evaluation, env, verify, curate.decontamination)
    log.info("flywheel: %s", result.counts)
    counts = {**result.counts, "pool": float(len(pool) + len(result.tasks))}
    return ([t.to_row() for t in [*pool, *result.tasks]], quarantine_frame(result.held_back),
            {k: {"value": v, "step": 0} for k, v in counts.items()})


def collect_regression(
    rl_policy: Policy, test_tasks: pd.DataFrame, regression: list[dict], domain: DomainConfig, verify: VerifyConfig,
    evaluate: EvaluateConfig,
) -> list[dict]:
    """The regression set: the last one plus the test tasks the policy answers wrong greedily (the
    evaluation's own greedy pass)."""
    env = get_domain(domain)
    tasks = tasks_from_frame(test_tasks)
    greedy = replace(evaluate.sampling, temperature=0.0, seed=evaluate.seed)
    verdicts = [v[0] for v in correctness(rl_policy, tasks, env, verify, 1, greedy, desc="flywheel failures")]
    added = flywheel.regression_set(_tasks(regression, env), tasks, verdicts)
    log.info("flywheel: regression set of %d tasks (%d failed now)", len(added), verdicts.count(False))
    return [replace(t, split="test").to_row() for t in added]


def evaluate_regression(
    policy: Policy, regression: list[dict], domain: DomainConfig, verify: VerifyConfig, evaluate: EvaluateConfig,
) -> dict:
    """Greedy accuracy of the policy on the regression set (MLflow `eval.regression.*`); none when it is empty."""
    env = get_domain(domain)
    tasks = _tasks(regression, env)
    if not tasks:
        return {"num_tasks": {"value": 0.0, "step": 0}}
    greedy = replace(evaluate.sampling, temperature=0.0, seed=evaluate.seed)
    accuracy = greedy_accuracy(policy, tasks, env, verify, greedy)
    log.info("regression set: greedy accuracy %.3f on %d tasks", accuracy, len(tasks))
    return {"greedy_accuracy": {"value": accuracy, "step": 0}, "num_tasks": {"value": float(len(tasks)), "step": 0}}
