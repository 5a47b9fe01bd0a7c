"""`kedro run --pipeline=rlvr --env code_repair` at a tiny size: mutants through curation, repair episodes
on the scheduler's sandboxes, RL, evaluation; the round metrics say where the time went."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.pipelines.conftest import TINY_PARAMS, make_project, round_tables, run_pipeline, tracking_uri

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repair_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("code_repair_run"))
    runtime = copy.deepcopy(TINY_PARAMS)
    # builtin programs only: CI has no $RLVR_SHARED_DATA, and the env's MBPP source needs it
    runtime["domain"] = {"sources": ["builtin"], "max_programs": 14, "mutants_per_program": 2,
                         "splits": {"train": 0.6, "validation": 0.2, "test": 0.2}}
    runtime["curate"] = {"validation_from_train": 2}
    runtime["rl"]["sampling"] = {"max_new_tokens": 16}
    runtime["evaluate"] = {"k": 2, "validation_size": 4, "sampling": {"max_new_tokens": 16}}
    run_pipeline(project, runtime, env="code_repair")
    return project


def test_tasks_are_mutants_split_by_program_and_episodes_are_judged_by_the_held_out_tests(repair_run):
    tasks = pd.read_parquet(repair_run / "data/envs/code_repair/03_primary/tasks.parquet")
    assert set(tasks["domain"]) == {"code_repair"} and set(tasks["split"]) == {"train", "validation", "test"}
    programs = tasks.assign(program=[json.loads(r)["program"] for r in tasks["reference"]])
    assert programs.groupby("program")["split"].nunique().max() == 1
    scored = round_tables(repair_run / "data/envs/code_repair/07_model_output/scored")
    assert set(scored["status"]) <= {"ok", "timeout"} and set(scored["num_turns"]) <= {1, 2}
    breakdowns = list(scored["reward_breakdown"])
    assert all(b["edits"] >= 1 for b in breakdowns)  # every episode's actions reached its environment
    judged = [b for b in breakdowns if "unfinished" not in b]  # the loop cuts truncated actions short
    assert all(b["test_runs"] >= 1 and "process" in b for b in judged)  # the held-out tests judged the rest


def test_round_metrics_show_time_generating_and_in_environments_and_sandbox_restarts(repair_run):
    client = MlflowClient(tracking_uri=tracking_uri(repair_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    metrics = set(run.data.metrics)
    assert {"env_seconds", "engine_seconds", "env_steps_per_second", "sandbox_restarts_per_episode",
            "test_runs_per_episode"} <= {m.rsplit(".", 1)[-1] for m in metrics}
    assert run.data.params["domain.name"] == "code_repair"
    for stage in ("sft", "rl"):
        assert {f"eval.{stage}.repair_at_1turn", f"eval.{stage}.repair_at_2turns"} <= metrics


def test_the_report_has_both_policies_repair_rates_by_turns_and_mutation_kind(repair_run):
    report = json.loads((repair_run / "data/envs/code_repair/08_reporting/metrics.json").read_text())
    for stage in ("sft", "rl"):
        rates = report[stage]
        assert 0.0 <= rates["repair@1turn"] <= 1.0 and rates["repair@2turns"] == rates["greedy_accuracy"]
        assert any(key.startswith("repair@1turn/kind_") for key in rates)
    summary = json.loads((repair_run / "data/envs/code_repair/08_reporting/summary.json").read_text())
    assert set(summary["repair"]) == {"1turn", "2turns"}
