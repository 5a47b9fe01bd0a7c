"""`kedro run --pipeline=rlvr --env agentic` (the calculator tool, multi-turn episodes) at a tiny size."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.pipelines.conftest import TINY_PARAMS, make_project, round_table, run_pipeline

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def agentic_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("agentic"))
    run_pipeline(project, TINY_PARAMS, env="agentic")
    return project


def test_sft_shows_the_tool_in_some_demonstrations(agentic_run):
    examples = pd.read_parquet(agentic_run / "data/envs/agentic/04_feature/sft_examples.parquet")
    tool = examples[examples["tool"]]
    assert 0 < len(tool) < len(examples) / 4
    turns = json.loads(tool.iloc[0]["turns"])
    assert turns[0].startswith("<calc>") and turns[1].startswith("<result>") and turns[2].startswith("\\boxed{")


def test_rollouts_are_trajectories_with_masks_turns_and_outcomes(agentic_run):
    scored = round_table(agentic_run / "data/envs/agentic/07_model_output/scored/round_000.parquet")
    for row in scored.itertuples():
        assert len(row.loss_mask) == len(row.completion_ids) == len(row.logprobs)
        turns = row.turns
        assert len(turns) == row.num_turns >= 1
        assert sum(t["action_tokens"] for t in turns) == sum(row.loss_mask) == row.completion_tokens
        assert row.finish_reason in ("done", "length", "max_turns", "max_tool_calls", "context_budget")
    assert set(scored["status"]) <= {"ok", "timeout", "error", "infra_error"}


def test_rounds_and_the_report_carry_the_episode_metrics(agentic_run):
    report = json.loads((agentic_run / "data/envs/agentic/08_reporting/metrics.json").read_text())
    for round_stats in report["round_history"]:
        for key in ("turns_per_episode", "tool_calls_per_episode", "tool_errors_per_episode", "ended_by_budget_fraction",
                    "episodes_fraction/turns_1", "reward_mean", "pass_rate", "val_greedy_accuracy", "kl", "entropy"):
            assert key in round_stats, key
        assert 1.0 <= round_stats["turns_per_episode"] <= 3.0
    for stage in ("sft", "rl"):
        assert {"greedy_accuracy", "pass@2", "turns_per_episode", "tool_calls_per_episode"} <= set(report[stage])
        assert any(k.startswith("greedy_accuracy/turns_") for k in report[stage])


def test_the_agentic_run_is_deterministic(agentic_run, tmp_path):
    again = make_project(tmp_path)
    run_pipeline(again, TINY_PARAMS, env="agentic")
    assert (again / "data/envs/agentic/08_reporting/metrics.json").read_bytes() == (
        agentic_run / "data/envs/agentic/08_reporting/metrics.json").read_bytes()


def test_the_run_writes_its_own_data_folder_and_nothing_of_the_default_runs(agentic_run):
    # `--env agentic` must not rewrite the default run's files (data/08_reporting/metrics.json is
    # committed): every file it writes lies in data/envs/agentic, but the base-model cache, which is
    # keyed by the model's fingerprint and shared by every configuration.
    written = [p.relative_to(agentic_run / "data") for p in (agentic_run / "data").rglob("*") if p.is_file()]
    assert any(p.parts[:2] == ("envs", "agentic") for p in written)
    elsewhere = [str(p) for p in written if p.parts[:2] != ("envs", "agentic") and p.parts[:2] != ("06_models", "base")]
    assert not elsewhere, elsewhere
