"""The `report` pipeline's nodes: round curves, summary, rollout sample, and completing an MLflow run's record."""

from __future__ import annotations

import json
from dataclasses import replace

import mlflow
import pandas as pd
import pytest
from mlflow import MlflowClient

from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.parameters import EvaluateConfig, ReportConfig, RLConfig
from rlvr_factory.pipelines.report.nodes import (
    record_run,
    round_curves,
    sample_rollouts,
    sft_validation_accuracy,
    summarize,
)
from tests.conftest import make_scripted_policy
from tests.pipelines.conftest import typed_parameters

PARAMS = typed_parameters()
DOMAIN, VERIFY = PARAMS.domain, PARAMS.verify

HISTORY = [
    {"round": 1, "reward_mean": 0.5, "pass_rate": 0.4, "val_greedy_accuracy": 0.3, "kl": 0.01, "lr": 1e-4},
    {"round": 0, "reward_mean": 0.25, "pass_rate": 0.2, "val_greedy_accuracy": 0.1, "kl": 0.0, "lr": 2e-4},
]
EVAL = {"greedy_accuracy": 0.5, "pass@1": 0.4, "pass@2": 0.6, "greedy_accuracy/difficulty_1": 0.7, "num_tasks": 20}
REPORT = {"sft": EVAL, "rl": {**EVAL, "greedy_accuracy": 0.75}, "round_history": sorted(HISTORY, key=lambda r: r["round"])}
SAMPLE = ReportConfig(rollout_sample={"per_round": 3, "seed": 0})


def _scored(round_index: int, n: int = 10) -> pd.DataFrame:
    return pd.DataFrame({
        "round": round_index, "task_id": [f"t{i // 2}" for i in range(n)], "sample_index": [i % 2 for i in range(n)],
        "prompt": [f"Compute {i}+1" for i in range(n)], "completion": [str(i + 1) for i in range(n)],
        "reward": [float(i % 2) for i in range(n)], "correct": [bool(i % 2) for i in range(n)], "status": "ok",
    })


def test_round_curves_carry_the_sft_validation_baseline():
    curves = round_curves(HISTORY, {"greedy_accuracy": 0.05, "num_tasks": 10})
    assert curves["round"].tolist() == [0, 1]
    assert curves["sft_val_greedy_accuracy"].tolist() == [0.05, 0.05]


def test_the_sft_baseline_is_the_greedy_accuracy_on_the_validation_tasks_the_rounds_use():
    tasks = pd.DataFrame({
        "task_id": ["v0", "v1", "v2"], "domain": "arithmetic", "prompt": ["Compute 1+1", "Compute 9+9", "Compute 3+4"],
        "reference": ['{"answer": "2"}', '{"answer": "18"}', '{"answer": "7"}'], "difficulty": 1,
        "split": "validation", "source": "test",
    })
    evaluate = EvaluateConfig(validation_size=2, sampling={"max_new_tokens": 8, "temperature": 1.0, "top_p": 1.0,
                                                           "batch_size": 4})
    result = sft_validation_accuracy(make_scripted_policy("7"), tasks, DOMAIN, VERIFY, evaluate, RolloutConfig())
    assert result == {"greedy_accuracy": 0.0, "num_tasks": 2}  # "7" is right only for the third, left out
    evaluate = replace(evaluate, validation_size=3)
    assert sft_validation_accuracy(make_scripted_policy("7"), tasks, DOMAIN, VERIFY, evaluate, RolloutConfig())["greedy_accuracy"] == (
        pytest.approx(1 / 3))


def test_summarize_gives_the_headline_numbers_with_the_sft_baseline():
    summary = summarize({**REPORT, "rounds": 2}, {"greedy_accuracy": 0.05, "num_tasks": 10})
    assert summary["greedy"] == {"sft": 0.5, "rl": 0.75}
    assert summary["val"] == {"sft": 0.05, "best": 0.3, "last": 0.3}


def _rounds(*frames: pd.DataFrame) -> dict:
    """Rounds' scored rollouts as the per-round folder dataset loads them: {round_NNN: load}."""
    return {f"round_{k:03d}": (lambda frame=frame: frame) for k, frame in enumerate(frames)}


def test_the_rollout_sample_takes_the_same_rows_of_every_round_each_time():
    rl = RLConfig(rounds=2)
    first = sample_rollouts(SAMPLE, _rounds(_scored(0), _scored(1)), rl)
    assert first == sample_rollouts(SAMPLE, _rounds(_scored(0), _scored(1)), rl)
    assert [r["round"] for r in first] == [0, 0, 0, 1, 1, 1]
    assert set(first[0]) == {"round", "task_id", "prompt", "completion", "reward", "correct", "status"}
    json.dumps(first)  # plain JSON types
    assert len(sample_rollouts(ReportConfig(rollout_sample={"per_round": 50}), _rounds(_scored(0, n=4)),
                               RLConfig(rounds=1))) == 4


def test_the_report_reads_the_run_s_rounds_only_and_names_a_missing_one():
    folder = _rounds(_scored(0), _scored(1), _scored(2))  # round 2: a longer run's file, left in the folder
    assert {r["round"] for r in sample_rollouts(SAMPLE, folder, RLConfig(rounds=2))} == {0, 1}
    with pytest.raises(FileNotFoundError, match="scored rollouts: no round_003"):
        sample_rollouts(SAMPLE, folder, RLConfig(rounds=4))


def test_record_run_adds_only_what_the_run_lacks(tmp_path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        with mlflow.start_run(experiment_id=mlflow.create_experiment("report")) as run:
            for step in (0, 1):  # the rounds of a whole `kedro run` already logged their reward
                mlflow.log_metric("rl.reward_mean", 0.1 * step, step=step)
            record_run(REPORT, REPORT["round_history"])
        client = MlflowClient()
        assert [m.step for m in client.get_metric_history(run.info.run_id, "rl.reward_mean")] == [0, 1]
        assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "rl.kl")] == [(0, 0.0), (1, 0.01)]
        metrics = client.get_run(run.info.run_id).data.metrics
        assert metrics["eval.rl.greedy_accuracy"] == 0.75
        assert metrics["eval.sft.pass_at_2"] == 0.6 and metrics["eval.rl.greedy_accuracy/difficulty_1"] == 0.7
        local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="report/metrics.json")
        assert json.loads(open(local).read())["rl"]["greedy_accuracy"] == 0.75
    finally:
        mlflow.set_tracking_uri(None)


def test_record_run_without_an_active_run_logs_nothing(tmp_path, caplog):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path}/mlflow.db")
    try:
        record_run(REPORT, REPORT["round_history"])
    finally:
        mlflow.set_tracking_uri(None)
    assert "no active MLflow run" in caplog.text
