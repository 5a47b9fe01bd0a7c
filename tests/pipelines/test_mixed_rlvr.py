"""`kedro run --pipeline=rlvr` on a mix of arithmetic and extraction, at a tiny size, end to end."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from tests.pipelines.conftest import PROJECT_ROOT, TINY_PARAMS, make_project, run_pipeline, tracking_uri

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mixed_run(tmp_path_factory):
    """The `mixed` environment's domain block, shrunk, as the scratch project's one domain block."""
    project = make_project(tmp_path_factory.mktemp("mixed_run"))
    mixed = yaml.safe_load((PROJECT_ROOT / "conf/mixed/parameters_curate.yml").read_text())["domain"]
    for member in mixed["domains"].values():
        member["splits"] = {"train": 100, "validation": 10, "test": 10}
    conf = project / "conf/base/parameters_curate.yml"
    params = yaml.safe_load(conf.read_text())
    conf.write_text(yaml.safe_dump({**params, "domain": mixed}))
    runtime = {k: copy.deepcopy(v) for k, v in TINY_PARAMS.items() if k != "domain"}
    runtime["rl"]["sampling"] = {"max_new_tokens": 24}
    run_pipeline(project, runtime)
    return project


def test_tasks_of_both_domains_flow_through_curation_rollouts_and_evaluation(mixed_run):
    tasks = pd.read_parquet(mixed_run / "data/03_primary/tasks.parquet")
    assert tasks.groupby(["domain", "split"]).size().to_dict() == {
        (d, s): n for d in ("arithmetic", "extraction") for s, n in (("test", 10), ("train", 100), ("validation", 10))}
    assert all(json.loads(r)["domain"] == d for r, d in zip(tasks["reference"], tasks["domain"]))
    scored = pd.concat(pd.read_parquet(p) for p in (mixed_run / "data/07_model_output/scored").glob("*.parquet"))
    assert set(scored["status"]) <= {"ok", "timeout", "error"}


def test_the_report_and_mlflow_have_metrics_per_domain(mixed_run):
    report = json.loads((mixed_run / "data/08_reporting/metrics.json").read_text())
    for stage in ("sft", "rl"):
        for domain in ("arithmetic", "extraction"):
            assert report[stage][f"num_tasks/domain_{domain}"] == 10
            assert 0.0 <= report[stage][f"greedy_accuracy/domain_{domain}"] <= 1.0
            assert f"maj@2/domain_{domain}/difficulty_1" in report[stage]
    client = MlflowClient(tracking_uri=tracking_uri(mixed_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    metrics = run.data.metrics
    assert {"eval.rl.greedy_accuracy/domain_extraction", "eval.sft.pass_at_2/domain_arithmetic",
            "curate.tasks.extraction.train"} <= set(metrics)
    assert run.data.params["domain.name"] == "mix"
