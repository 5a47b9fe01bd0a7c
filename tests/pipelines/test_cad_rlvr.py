"""`kedro run --pipeline=rlvr --env cad` at a tiny size: parts through curation, RL, evaluation and pictures."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.pipelines.conftest import TINY_PARAMS, make_project, round_tables, run_pipeline, tracking_uri

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cad_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("cad_run"))
    runtime = copy.deepcopy(TINY_PARAMS)
    runtime["domain"] = {"splits": {"train": 60, "validation": 6, "test": 6}}
    runtime["rl"]["sampling"] = {"max_new_tokens": 24}
    runtime["evaluate"]["sampling"] = {"max_new_tokens": 24}
    runtime["report"] = {"part_views": {"per_round": 2}}
    run_pipeline(project, runtime, env="cad")
    return project


def test_every_completion_is_built_and_gets_a_cad_status(cad_run):
    tasks = pd.read_parquet(cad_run / "data/envs/cad/03_primary/tasks.parquet")
    assert set(tasks["domain"]) == {"cad"} and tasks.groupby("split").size().to_dict() == {
        "test": 6, "train": 60, "validation": 6}
    scored = round_tables(cad_run / "data/envs/cad/07_model_output/scored")
    statuses = {b["cad_status"] for b in scored["reward_breakdown"]}
    assert statuses and statuses <= {"built", "no_program", "parse_error", "empty", "degenerate", "too_large",
                                     "extra_pieces", "build_error"}
    assert set(scored["status"]) == {"ok"}


def test_the_report_has_the_build_rate_and_iou_of_both_policies(cad_run):
    report = json.loads((cad_run / "data/envs/cad/08_reporting/metrics.json").read_text())
    for stage in ("sft", "rl"):
        assert 0.0 <= report[stage]["greedy_builds"] <= 1.0 and 0.0 <= report[stage]["greedy_iou"] <= 1.0
        assert {f"greedy_iou/difficulty_{d}" for d in (1, 2, 3)} <= set(report[stage])
    client = MlflowClient(tracking_uri=tracking_uri(cad_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    assert {"eval.rl.greedy_iou", "eval.sft.greedy_builds"} <= set(run.data.metrics)
    assert run.data.params["domain.name"] == "cad"


def test_pictures_of_target_and_built_part_land_in_reporting_and_mlflow(cad_run):
    pictures = sorted(p.name for p in (cad_run / "data/envs/cad/08_reporting/part_views").glob("*.png"))
    assert [p[:9] for p in pictures] == ["round_000"] * 2 + ["round_001"] * 2
    client = MlflowClient(tracking_uri=tracking_uri(cad_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    logged = sorted(a.path.rsplit("/", 1)[1] for a in client.list_artifacts(run.info.run_id, "report/part_views"))
    assert logged == pictures
