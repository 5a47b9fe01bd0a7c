"""MLflow: two tracked runs of the project (different learning rates) in one store, their run record
and registered models, the comparison notebook on them, and the MLflow UI in a real browser."""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import mlflow
import nbformat
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient
from nbclient import NotebookClient

from rlvr_factory.domains import get_domain, tasks_from_frame
from rlvr_factory.evaluation import sample_verdicts
from rlvr_factory.models.policy import load_policy
from rlvr_factory.parameters import Parameters, resolve
from rlvr_factory.schema import parse
from rlvr_factory.verification import verify_batch
from tests.pipelines.conftest import PROJECT_ROOT, TINY_PARAMS, make_project, run_pipeline, tracking_uri
from tests.test_dvc import _merge

pytestmark = pytest.mark.slow

LEARNING_RATES = {"lr-low": 1e-4, "lr-high": 1e-2}  # run name -> rl.update.lr
MODEL_NAME = "rlvr-policy"
CHROMIUM = Path(os.environ.get("RLVR_CHROMIUM", "/usr/bin/chromium"))
# Screenshots of the UI test land here (CI keeps the folder as a test artifact).
ARTIFACTS = Path(os.environ.get("RLVR_TEST_ARTIFACTS", PROJECT_ROOT / "test-artifacts"))


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """A project whose MLflow store holds two whole tiny runs, named by their learning rate."""
    project = make_project(tmp_path_factory.mktemp("mlflow_runs"))
    client = MlflowClient(tracking_uri=tracking_uri(project))
    for name, lr in LEARNING_RATES.items():
        params = copy.deepcopy(TINY_PARAMS)
        params["rl"]["update"]["lr"] = lr
        run_pipeline(project, params)
        (latest,) = client.search_runs([_experiment(client).experiment_id], order_by=["start_time DESC"], max_results=1)
        client.set_tag(latest.info.run_id, "mlflow.runName", name)
    return project


def _experiment(client: MlflowClient):
    return client.get_experiment_by_name("rlvr_factory")


def _runs(project: Path) -> dict:
    client = MlflowClient(tracking_uri=tracking_uri(project))
    return {r.info.run_name: r for r in client.search_runs([_experiment(client).experiment_id])}


def test_each_run_records_its_curves_evaluation_and_report_artifacts(store):
    client = MlflowClient(tracking_uri=tracking_uri(store))
    for name, run in _runs(store).items():
        assert float(run.data.params["rl.update.lr"]) == LEARNING_RATES[name]
        assert run.data.params["report.registered_model_name"] == MODEL_NAME
        steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "rl.reward_mean"))
        assert steps == list(range(TINY_PARAMS["rl"]["rounds"]))  # logged once per round, not again by the report
        assert {"eval.rl.greedy_accuracy", "eval.rl.greedy_accuracy/difficulty_1", "eval.sft.pass_at_2"} <= set(run.data.metrics)
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "report")}
        assert artifacts == {"report/metrics.json", "report/round_curves.png", "report/rollout_sample.json",
                             "report/domain_rounds.csv", "report/domain_heatmap.png", "report/overoptimisation.png",
                             "report/part_views", "report/reward_audit.json", "report/reward_audit.png"}
        png = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, artifact_path="report/round_curves.png",
                                                  tracking_uri=tracking_uri(store))
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        sample = json.loads(Path(mlflow.artifacts.download_artifacts(
            run_id=run.info.run_id, artifact_path="report/rollout_sample.json", tracking_uri=tracking_uri(store))).read_text())
        assert len(sample) == TINY_PARAMS["rl"]["rounds"] * 8
        assert {"round", "prompt", "completion", "reward", "correct", "status"} <= sample[0].keys()


def test_every_run_registers_a_model_version_with_its_evaluation_metrics(store):
    client = MlflowClient(tracking_uri=tracking_uri(store), registry_uri=tracking_uri(store))
    versions = {v.run_id: v for v in client.search_model_versions(f"name='{MODEL_NAME}'")}
    runs = _runs(store)
    assert set(versions) == {r.info.run_id for r in runs.values()}
    for run in runs.values():
        version = versions[run.info.run_id]
        assert float(version.tags["eval.rl.greedy_accuracy"]) == pytest.approx(run.data.metrics["eval.rl.greedy_accuracy"])
        assert version.tags["run_id"] == run.info.run_id


def test_the_registered_policy_answers_as_the_pipelines_greedy_evaluation(store, monkeypatch):
    # The README's example: the latest registered version through mlflow.pyfunc, plain prompts in.
    # MLflow's setters also export MLFLOW_TRACKING_URI / MLFLOW_REGISTRY_URI, and resetting them to
    # None leaves the registry's in the environment: monkeypatch restores both for later tests.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri(store))
    monkeypatch.setenv("MLFLOW_REGISTRY_URI", tracking_uri(store))
    mlflow.set_tracking_uri(tracking_uri(store))
    mlflow.set_registry_uri(tracking_uri(store))
    try:
        model = mlflow.pyfunc.load_model(f"models:/{MODEL_NAME}/latest")
    finally:
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
    tasks = tasks_from_frame(pd.read_parquet(store / "data/05_model_input/test_tasks.parquet"))
    raw: dict = {}
    for name in ("curate", "verify", "evaluate"):
        raw = _merge(raw, yaml.safe_load((store / f"conf/base/parameters_{name}.yml").read_text()))
    params = parse(Parameters, resolve(_merge(raw, TINY_PARAMS)))  # the blocks as the nodes receive them
    verify, domain = params.verify, get_domain(params.domain)
    greedy = replace(params.evaluate.sampling, temperature=0.0)
    # The evaluation's own greedy pass over the test split, on the last run's RL policy...
    evaluated = sample_verdicts(load_policy(store / "data/06_models/rl_policy"), tasks, domain, verify, 1, greedy, "eval")
    answers = model.predict([t.prompt for t in tasks])
    assert answers == [verdicts[0].answer for verdicts in evaluated]  # ...answer for answer
    scores, _ = verify_batch(domain, answers, [t.reference for t in tasks], verify)
    report = json.loads((store / "data/08_reporting/metrics.json").read_text())
    assert sum(s.correct for s in scores) / len(tasks) == report["rl"]["greedy_accuracy"]


def test_the_comparison_notebook_runs_on_the_tracked_runs(store, monkeypatch):
    notebook = nbformat.read(PROJECT_ROOT / "notebooks/compare_runs.ipynb", as_version=4)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_uri(store))
    NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(store)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    for name in LEARNING_RATES:
        assert name in html  # both runs in the table
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the curves side by side
    assert "completion" in html and "reward" in html  # the best run's sample rollouts
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "best run:" in printed
    assert "domains x rounds heatmap" in printed and "sft_pass_rate" in html  # the heatmap and the gain table


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_ui(store, tmp_path):
    """`mlflow server` on a loopback port over the test store; its address."""
    port = _free_port()
    with open(tmp_path / "mlflow-server.log", "w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri(store),
             "--default-artifact-root", str(store / "mlruns/artifacts"), "--host", "127.0.0.1",
             "--port", str(port), "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{address}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "mlflow-server.log").read_text()[-3000:]
            time.sleep(0.5)
        yield address
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_the_mlflow_ui_shows_both_runs_their_parameters_and_a_metric_chart(store, mlflow_ui):
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.exists(), f"no Chromium at {CHROMIUM}: install Debian's `chromium` package (scripts/install.sh does)"
    client = MlflowClient(tracking_uri=tracking_uri(store))
    experiment_id = _experiment(client).experiment_id
    runs = _runs(store)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 1000})
            page.goto(f"{mlflow_ui}/#/experiments/{experiment_id}/runs")
            for name in LEARNING_RATES:
                page.get_by_text(name, exact=True).first.wait_for(timeout=90_000)
            page.screenshot(path=ARTIFACTS / "mlflow-ui-experiment.png", full_page=True)

            ids = json.dumps([runs[name].info.run_id for name in LEARNING_RATES])
            page.goto(f"{mlflow_ui}/#/compare-runs?runs={ids}&experiments={json.dumps([experiment_id])}")
            page.get_by_text("Run details").first.wait_for(timeout=90_000)
            body = page.inner_text("body")
            for name in LEARNING_RATES:
                assert name in body
                assert runs[name].info.run_id in body
            row = page.locator("tr", has_text="rl.update.lr").first
            row.wait_for(timeout=30_000)
            assert {"0.0001", "0.01"} <= set(row.inner_text().split())
            chart = page.locator(".js-plotly-plot").first
            chart.wait_for(timeout=60_000)
            plotted = chart.inner_text()
            assert chart.locator("svg").count() > 0 and "rl.update.lr" in plotted
            assert any(metric in plotted for metric in runs["lr-low"].data.metrics)  # against a metric
            page.screenshot(path=ARTIFACTS / "mlflow-ui-compare.png", full_page=True)
        finally:
            browser.close()
    print(f"MLflow UI screenshots: {ARTIFACTS}/mlflow-ui-{{experiment,compare}}.png")
