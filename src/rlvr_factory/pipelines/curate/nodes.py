"""Curate: the configured domain's raw rows -> validated, deduplicated, decontaminated, labelled, split, mixed tasks."""

from __future__ import annotations

import logging

import pandas as pd

from rlvr_factory.domains import Domain, get_domain, source_rows, tasks_to_frame
from rlvr_factory.domains.curation import (
    UNLABELLED, curate, difficulty_from_pass_rate, members, quarantine_frame, validate,
)
from rlvr_factory.evaluation import pass_rates
from rlvr_factory.flywheel import SOURCE as FLYWHEEL
from rlvr_factory.models.policy import load_policy
from rlvr_factory.rollout.hf import SamplingConfig

log = logging.getLogger(__name__)


def _measured_difficulty(rows: list[dict], domain: Domain, difficulty: dict, verify: dict) -> dict[str, int]:
    """Difficulty of each unlabelled task from the pass rate of `difficulty.model` on `difficulty.samples` samples."""
    tasks = [t for t in validate(rows, members(domain))[0] if t.difficulty == UNLABELLED]
    if not tasks:
        return {}
    policy = load_policy(difficulty["model"])
    sampling = SamplingConfig(**difficulty["sampling"], seed=difficulty.get("seed", 0))
    rates = pass_rates(policy, tasks, domain, verify, difficulty["samples"], sampling)
    return {task_id: difficulty_from_pass_rate(rate, difficulty["levels"]) for task_id, rate in rates.items()}


def curate_tasks(
    domain: dict, curate_params: dict, verify: dict, flywheel_pool: list | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The `tasks` table, the quarantine table (every removed row with its step and reason) and
    the counts as MLflow metrics (`curate.*`); the flywheel's pool joins the domain's rows and is
    curated like them (`tasks_from_flywheel` counts what survives)."""
    env = get_domain(domain)
    rows = source_rows(env) + list(flywheel_pool or [])
    difficulty = curate_params["difficulty"]
    measured = _measured_difficulty(rows, env, difficulty, verify) if difficulty.get("model") else {}
    result = curate(
        rows, env, decontamination=curate_params["decontamination"],
        validation_from_train=curate_params["validation_from_train"],
        default_difficulty=difficulty["default"], seed=curate_params["seed"], measured=measured,
    )
    quarantine = quarantine_frame(result.quarantined)
    for (stage, reason), n in quarantine.groupby(["stage", "reason"]).size().head(20).items():
        log.warning("curate: %s removed %d row(s): %s", stage, n, reason)
    counts = {**result.counts, "tasks_from_flywheel": sum(t.source == FLYWHEEL for t in result.tasks)}
    log.info("curate: %s", counts)
    metrics = {k: {"value": float(v), "step": 0} for k, v in counts.items()}
    return tasks_to_frame(result.tasks), quarantine, metrics


def split_tasks(tasks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The train, validation and test rows of the `tasks` table."""
    splits = tuple(tasks[tasks["split"] == s].reset_index(drop=True) for s in ("train", "validation", "test"))
    for name, frame in zip(("train", "validation", "test"), splits):
        if frame.empty:
            raise ValueError(f"curate produced no {name} tasks; check the domain's splits or sources")
    return splits
