"""`kedro run --pipeline=rlvr --env=mixed`: arithmetic, extraction and code at a tiny size, end to end."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.pipelines.conftest import TINY_PARAMS, make_project, round_tables, run_pipeline, tracking_uri

pytestmark = pytest.mark.slow


SPLITS = {"arithmetic": (100, 10, 10), "extraction": (100, 10, 10), "code": (16, 4, 4)}  # train, validation, test
# conf/mixed weighs arithmetic:extraction:code as 1:1:0.5, so code's 16 train tasks bound the train mix
MIXED_TRAIN = {"arithmetic": 32, "extraction": 32, "code": 16}


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """`kedro run --pipeline=rlvr --env=mixed`, shrunk through `--params`."""
    project = make_project(tmp_path_factory.mktemp("mixed_run"))
    runtime = {k: copy.deepcopy(v) for k, v in TINY_PARAMS.items() if k != "domain"}
    runtime["rl"]["sampling"] = {"max_new_tokens": 24}
    runtime["domain"] = {"domains": {
        d: {"splits": dict(zip(("train", "validation", "test"), n))} for d, n in SPLITS.items()}}
    run_pipeline(project, runtime, env="mixed")
    return project


def test_tasks_of_both_domains_flow_through_curation_rollouts_and_evaluation(mixed_run):
    tasks = pd.read_parquet(mixed_run / "data/envs/mixed/03_primary/tasks.parquet")
    assert tasks.groupby(["domain", "split"]).size().to_dict() == {
        (d, s): n for d, (_, validation, test) in SPLITS.items()
        for s, n in (("train", MIXED_TRAIN[d]), ("validation", validation), ("test", test))}
    assert all(json.loads(r)["domain"] == d for r, d in zip(tasks["reference"], tasks["domain"]))
    scored = round_tables(mixed_run / "data/envs/mixed/07_model_output/scored")
    assert set(scored["status"]) <= {"ok", "timeout", "error"}


def test_the_report_and_mlflow_have_metrics_per_domain(mixed_run):
    report = json.loads((mixed_run / "data/envs/mixed/08_reporting/metrics.json").read_text())
    for stage in ("sft", "rl"):
        for domain, (_, _, test) in SPLITS.items():
            assert report[stage][f"num_tasks/domain_{domain}"] == test
            assert 0.0 <= report[stage][f"greedy_accuracy/domain_{domain}"] <= 1.0
        for domain in ("arithmetic", "extraction"):  # answers a majority vote can compare
            assert f"maj@2/domain_{domain}/difficulty_1" in report[stage]
    client = MlflowClient(tracking_uri=tracking_uri(mixed_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    metrics = run.data.metrics
    assert {"eval.rl.greedy_accuracy/domain_extraction", "eval.sft.pass_at_2/domain_arithmetic",
            "curate.tasks.extraction.train", "curate.tasks.code.train"} <= set(metrics)
    steps = {d: {m.step for m in client.get_metric_history(run.info.run_id, f"rl.{d}.reward_mean")} for d in SPLITS}
    assert all(steps.values())  # each domain has its own round metrics (in the rounds that drew its prompts)
    assert set().union(*steps.values()) == set(range(TINY_PARAMS["rl"]["rounds"]))
    assert run.data.params["domain.name"] == "mix"
