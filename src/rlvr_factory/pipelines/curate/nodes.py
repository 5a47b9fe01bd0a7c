"""Curate: the configured domain's raw rows -> validated, deduplicated, decontaminated, labelled, split, mixed tasks."""

from __future__ import annotations

import logging
from dataclasses import replace

import pandas as pd

from rlvr_factory.audit import audit, hold_back
from rlvr_factory.domains import Domain, DomainConfig, get_domain, source_rows, tasks_from_frame, tasks_to_frame
from rlvr_factory.domains.curation import (
    EVAL_SPLITS, UNLABELLED, curate, difficulty_from_pass_rate, members, quarantine_frame, quarantine_record, validate,
)
from rlvr_factory.evaluation import pass_rates
from rlvr_factory.flywheel import SOURCE as FLYWHEEL
from rlvr_factory.models.policy import load_policy
from rlvr_factory.parameters import CurateConfig, DifficultyConfig
from rlvr_factory.preferences import curate_pairs, pair_quarantine_frame, pairs_to_frame, raw_pair_rows
from rlvr_factory.preferences.sources import PreferencesConfig
from rlvr_factory.training.pairs import token_budget
from rlvr_factory.verification import VerifyConfig

log = logging.getLogger(__name__)


def _measured_difficulty(
    rows: list[dict], domain: Domain, difficulty: DifficultyConfig, verify: VerifyConfig,
) -> dict[str, int]:
    """Difficulty of each unlabelled task from the pass rate of `difficulty.model` on `difficulty.samples` samples."""
    tasks = [t for t in validate(rows, members(domain))[0] if t.difficulty == UNLABELLED]
    if not tasks:
        return {}
    policy = load_policy(difficulty.model)
    rates = pass_rates(policy, tasks, domain, verify, difficulty.samples, replace(difficulty.sampling, seed=difficulty.seed))
    return {task_id: difficulty_from_pass_rate(rate, difficulty.levels) for task_id, rate in rates.items()}


def curate_tasks(
    domain: DomainConfig, curate_params: CurateConfig, verify: VerifyConfig, flywheel_pool: list | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The `tasks` table, the quarantine table (every removed row with its step and reason) and
    the counts as MLflow metrics (`curate.*`); the flywheel's pool joins the domain's rows and is
    curated like them (`tasks_from_flywheel` counts what survives)."""
    env = get_domain(domain)
    rows = source_rows(env) + list(flywheel_pool or [])
    difficulty = curate_params.difficulty
    measured = _measured_difficulty(rows, env, difficulty, verify) if difficulty.model else {}
    result = curate(
        rows, env, decontamination=curate_params.decontamination,
        validation_from_train=curate_params.validation_from_train,
        default_difficulty=difficulty.default, seed=curate_params.seed, measured=measured,
    )
    quarantine = quarantine_frame(result.quarantined)
    counts = {**result.counts, "tasks_from_flywheel": sum(t.source == FLYWHEEL for t in result.tasks)}
    return tasks_to_frame(result.tasks), quarantine, _report("curate", "row(s)", quarantine, counts)


def audit_rewards(tasks: pd.DataFrame, quarantine: pd.DataFrame, domain: DomainConfig, curate_params: CurateConfig,
                  verify: VerifyConfig) -> tuple[pd.DataFrame, pd.DataFrame, dict, dict]:
    """The reward audit (`rlvr_factory.audit`) on the curated tasks, when `curate.audit.enabled`: the tasks (those
    of every domain or family whose reward pays a generic attack moved to the quarantine table, stage
    `reward_audit`, when `curate.audit.quarantine`), the quarantine table, the report (`reward_audit.json`, an
    MLflow artifact) and its counts as MLflow metrics (`reward_audit.*`)."""
    config = curate_params.audit
    if not config.enabled:
        return tasks, quarantine, {"enabled": False}, {}
    env = get_domain(domain)
    curated = tasks_from_frame(tasks)
    report = audit(env, curated, verify, config)
    log.info("reward audit\n%s", report.table())
    kept, held = hold_back(env, curated, report) if config.quarantine else (curated, [])
    if held:
        tasks = tasks_to_frame(kept)
        quarantine = pd.concat([quarantine, quarantine_frame([quarantine_record(t, "reward_audit", why) for t, why in held])],
                               ignore_index=True)
    counts = {"groups": len(report.groups), "failing_groups": len(report.failing), "quarantined_tasks": len(held),
              "attacks": sum(sum(g.tried.values()) for g in report.groups.values())}
    return tasks, quarantine, report.to_json(timed=False), {k: {"value": float(v), "step": 0} for k, v in counts.items()}


def _report(name: str, what: str, quarantine: pd.DataFrame, counts: dict) -> dict:
    """Log what curation removed and why, and its counts as MLflow metrics."""
    for (stage, reason), n in quarantine.groupby(["stage", "reason"]).size().head(20).items():
        log.warning("%s: %s removed %d %s: %s", name, stage, n, what, reason)
    log.info("%s: %s", name, counts)
    return {k: {"value": float(v), "step": 0} for k, v in counts.items()}


def split_tasks(tasks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The train, validation and test rows of the `tasks` table."""
    splits = tuple(tasks[tasks["split"] == s].reset_index(drop=True) for s in ("train", "validation", "test"))
    for name, frame in zip(("train", "validation", "test"), splits):
        if frame.empty:
            raise ValueError(f"curate produced no {name} tasks; check the domain's splits or sources")
    return splits


def curate_preferences(tasks: pd.DataFrame, base_model_ref: dict, domain: DomainConfig, preferences: PreferencesConfig
                       ) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """The `preference_pairs` table, its quarantine table (every removed pair with its step and
    reason) and the counts as MLflow metrics (`preferences.*`).

    Pairs come from `preferences.sources`, else the embedded generator over the curated tasks;
    train pairs are decontaminated against the tasks' evaluation prompts; a pair longer than the
    base model's context (or `preferences.max_length`) is quarantined.
    """
    all_tasks = tasks_from_frame(tasks)
    rows = raw_pair_rows(preferences, get_domain(domain), all_tasks)
    count, context = token_budget(base_model_ref["name_or_path"])
    result = curate_pairs(
        rows, [t.prompt for t in all_tasks if t.split in EVAL_SPLITS],
        decontamination=preferences.decontamination, validation_from_train=preferences.validation_from_train,
        seed=preferences.seed, count_tokens=count, max_tokens=preferences.max_length or context,
    )
    quarantine = pair_quarantine_frame(result.quarantined)
    return pairs_to_frame(result.pairs), quarantine, _report("preferences", "pair(s)", quarantine, result.counts)
