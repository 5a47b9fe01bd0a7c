"""Report: the run's record in MLflow (round curves, evaluation, rollout sample), its summary
metrics and the registered policy."""

from __future__ import annotations

import logging

import mlflow
import pandas as pd
from matplotlib.figure import Figure
from mlflow import MlflowClient

from rlvr_factory import domain_report, plots, summary, tracking
from rlvr_factory.domains import DomainConfig, get_domain, tasks_from_frame
from rlvr_factory.domains.cad import part_view_figures
from rlvr_factory.evaluation import greedy_accuracy
from rlvr_factory.mlflow_model import log_policy_model
from rlvr_factory.models.policy import Policy
from rlvr_factory.parameters import EvaluateConfig, ReportConfig, RLConfig
from rlvr_factory.pipelines.evaluate.nodes import build_report
from rlvr_factory.round_files import each_round
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.verification import VerifyConfig

log = logging.getLogger(__name__)
SAMPLE_COLUMNS = ["round", "task_id", "prompt", "completion", "reward", "correct", "status"]


def sft_validation_accuracy(
    sft_policy: Policy, validation_tasks: pd.DataFrame, domain: DomainConfig, verify: VerifyConfig, evaluate: EvaluateConfig,
    rollout: RolloutConfig,
) -> dict:
    """The SFT policy's greedy accuracy on the validation tasks every round is scored on, in the run's episodes
    (`rollout`: turns, environment workers): the baseline of the round curves."""
    tasks = tasks_from_frame(validation_tasks)[: evaluate.validation_size]
    accuracy = greedy_accuracy(sft_policy, tasks, get_domain(domain), verify, evaluate.sampling, rollout)
    return {"greedy_accuracy": accuracy, "num_tasks": len(tasks)}


def round_curves(round_history: list[dict], sft_validation: dict) -> pd.DataFrame:
    """The per-round table (`dvc plots show` renders it) with the SFT baseline."""
    return plots.round_curves(round_history, sft_validation["greedy_accuracy"])


def plot_round_curves(curves: pd.DataFrame) -> Figure:
    """The round curves as a figure (logged to MLflow as a PNG)."""
    return plots.plot_round_curves(curves)


def domain_table(round_levels: dict, rl: RLConfig) -> pd.DataFrame:
    """Every round's per-domain table (level, pass rates, weight) stacked: domains x rounds, long form."""
    return domain_report.domain_rounds(*each_round(round_levels, rl.rounds, "domain levels"))


def plot_domain_heatmap(table: pd.DataFrame) -> Figure:
    """The pass rate of every domain in every round as one heatmap (logged to MLflow as a PNG)."""
    return domain_report.domain_heatmap(table)


def summarize(eval_report: dict, sft_validation: dict) -> dict:
    """The small metrics file `dvc exp show` tabulates (the full report is `metrics.json`)."""
    return summary.summary_metrics(eval_report, sft_validation["greedy_accuracy"])


def sample_rollouts(report: ReportConfig, scored_rounds: dict, rl: RLConfig) -> list[dict]:
    """`report.rollout_sample.per_round` seeded rollouts of every round, with their rewards."""
    sample = report.rollout_sample
    rows: list[dict] = []
    for scored in each_round(scored_rounds, rl.rounds, "scored rollouts"):  # one round's file at a time
        drawn = scored.sample(n=min(sample.per_round, len(scored)), random_state=sample.seed)
        drawn = drawn.sort_values(["task_id", "sample_index"])[SAMPLE_COLUMNS]
        rows += drawn.astype({"round": int, "reward": float, "correct": bool}).to_dict(orient="records")
    return rows


def record_run(eval_report: dict, round_history: list[dict]) -> None:
    """Complete the active MLflow run: the evaluation report as an artifact, and the round curves
    (`rl.*`, step = round) and evaluation metrics (`eval.*`) it does not have yet.

    A whole `kedro run --pipeline=rlvr` already logged them as they were made; the run of a
    DVC `report` stage (a process of its own) gets them from the persisted report and history.
    """
    run = mlflow.active_run()
    if run is None:
        log.warning("no active MLflow run: the run record is not logged")
        return
    _, eval_metrics = build_report(eval_report["sft"], eval_report["rl"], round_history)
    history = tracking.round_metric_history(round_history)
    history |= {f"eval.{name}": [(m["step"], m["value"])] for name, m in eval_metrics.items()}
    logged = tracking.log_missing_metrics(run.info.run_id, history, MlflowClient())
    mlflow.log_dict(eval_report, "report/metrics.json")
    if logged:  # a DVC `report` stage, a process of its own, completes its run from the files
        log.info("report: %d metrics from the persisted history added to run %s", len(logged), run.info.run_id)


def register_policy(rl_policy: Policy, eval_report: dict, report: ReportConfig, evaluate: EvaluateConfig) -> None:
    """Log the final policy as an MLflow model that answers prompts as the greedy evaluation does
    (evaluation's `max_new_tokens`), with the RL policy's test metrics, and register it under
    `report.registered_model_name` when `report.register_model`."""
    if mlflow.active_run() is None:
        log.warning("no active MLflow run: the policy is not logged")
        return
    metrics = {f"eval.rl.{k.replace('@', '_at_')}": float(v) for k, v in eval_report["rl"].items()}
    name = report.registered_model_name if report.register_model else None
    log_policy_model(rl_policy, name, metrics, evaluate.sampling)


def render_part_views(
    rollout_sample: list[dict], train_tasks: pd.DataFrame, domain: DomainConfig, report: ReportConfig,
) -> dict[str, Figure]:
    """What the model built, for CAD runs: target and built part of the first and last round's sampled
    rollouts in three orthographic views (`report.part_views.per_round` PNGs per round; none for other domains)."""
    tasks = {t.task_id: t for t in tasks_from_frame(train_tasks)}
    return part_view_figures(get_domain(domain), rollout_sample, tasks, report.part_views.per_round)
