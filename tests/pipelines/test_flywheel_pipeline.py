"""`kedro run --pipelines=flywheel` after a run: its pool reaches the next curate, its regression set the next evaluate."""

import json
import shutil

import pandas as pd
import pytest
from mlflow import MlflowClient

from tests.pipelines.conftest import TINY_PARAMS, run_pipeline, tracking_uri

NEW_PROMPT = "Compute 123+456"  # three digits: no generated task has it


@pytest.mark.slow
def test_the_flywheel_feeds_the_next_curate_and_evaluate(tiny_run, tmp_path):
    project = tmp_path / "project"
    shutil.copytree(tiny_run, project, ignore=shutil.ignore_patterns("mlruns"))
    (project / "mlruns").mkdir()
    log = project / "data/01_raw/flywheel/interactions.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"prompt": NEW_PROMPT, "completion": "\\boxed{579}", "domain": "arithmetic", "timestamp": 1,
             "reference": {"answer": "579", "steps": ["123+456=579"]}, "outcome": True},
            {"prompt": "Compute 1+1", "completion": "2", "domain": "arithmetic", "timestamp": 2}]
    log.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{not json\n")

    run_pipeline(project, TINY_PARAMS, "flywheel")
    pool = [json.loads(line) for line in (project / "data/01_raw/flywheel/pool.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["source"], r["split"]) for r in pool] == [(NEW_PROMPT, "flywheel", "train")]
    held = pd.read_parquet(project / "data/02_intermediate/flywheel_held_back.parquet")
    assert sorted(held["stage"]) == ["malformed", "unverifiable"]
    regression = (project / "data/01_raw/flywheel/regression.jsonl").read_text().splitlines()
    report = json.loads((project / "data/08_reporting/metrics.json").read_text())
    assert len(regression) == round(report["rl"]["num_tasks"] * (1 - report["rl"]["greedy_accuracy"]))

    run_pipeline(project, TINY_PARAMS, "curate")
    train = pd.read_parquet(project / "data/05_model_input/train_tasks.parquet")
    assert train.loc[train["source"] == "flywheel", "prompt"].tolist() == [NEW_PROMPT]
    run_pipeline(project, TINY_PARAMS, "evaluate")
    client = MlflowClient(tracking_uri=tracking_uri(project))
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], order_by=["attributes.start_time DESC"])
    assert runs[1].data.metrics["curate.tasks_from_flywheel"] == 1
    metrics = runs[0].data.metrics
    assert metrics["eval.regression.num_tasks"] == len(regression)
    assert metrics["eval.regression.greedy_accuracy"] == 0.0  # the same policy's greedy answers: all still wrong
