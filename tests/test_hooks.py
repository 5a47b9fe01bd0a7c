"""The project's Kedro hooks: a model path that cannot load fails before any work, a failed run says
which MLflow run it left FAILED, and a run tells its story (a line per node and per round, the
results table, where the artefacts are)."""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlvr_factory.hooks import ModelPathHook
from rlvr_factory.pipelines import base_model, evaluate
from tests.conftest import make_tiny_policy
from tests.pipelines.conftest import TINY_PARAMS, make_project, run_pipeline, tracking_uri


def _runs(project: Path) -> list:
    client = MlflowClient(tracking_uri=tracking_uri(project))
    experiment = client.get_experiment_by_name("rlvr_factory")
    return client.search_runs([experiment.experiment_id]) if experiment else []


@pytest.fixture
def project(tmp_path) -> Path:
    return make_project(tmp_path / "project")


def _with_model(path: Path | str) -> dict:
    params = copy.deepcopy(TINY_PARAMS)
    params["model"]["name_or_path"] = str(path)
    return params


def test_a_model_path_that_does_not_exist_fails_before_curation_naming_it(project, tmp_path):
    missing = tmp_path / "models/my-model"
    with pytest.raises(FileNotFoundError) as error:
        run_pipeline(project, _with_model(missing))
    message = str(error.value)
    assert f"model.name_or_path is {missing}, and no such directory" in message
    assert "config.json" in message and "model.safetensors" in message and "tokenizer.json" in message
    assert "run the pipeline" not in message  # the user named this path; nothing of ours builds it
    assert not (project / "data/03_primary/tasks.parquet").exists()  # curation never ran
    assert _runs(project) == []  # and no MLflow run was left behind


def test_a_directory_without_weights_is_refused_with_what_it_lacks(project, tmp_path):
    incomplete = tmp_path / "half-saved"
    make_tiny_policy().tokenizer.save_pretrained(incomplete)
    (incomplete / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="and it lacks the weights;"):
        run_pipeline(project, _with_model(incomplete))


@pytest.mark.parametrize("name", ["embedded", "Qwen/Qwen2.5-0.5B-Instruct", "gpt2"])
def test_hub_ids_and_the_embedded_model_are_not_checked_as_paths(name):
    hook = ModelPathHook()
    hook._model = {"name_or_path": name}
    hook.before_pipeline_run({}, base_model.create_pipeline(), None)  # no error: nothing local to check


def test_a_run_that_does_not_build_the_base_model_does_not_check_its_path(tmp_path):
    hook = ModelPathHook()
    hook._model = {"name_or_path": str(tmp_path / "missing")}
    hook.before_pipeline_run({}, evaluate.create_pipeline(), None)  # evaluation reads the stages' policies


def test_a_failed_run_says_which_mlflow_run_it_left_failed(project, caplog):
    caplog.set_level(logging.ERROR, logger="rlvr_factory.hooks")
    with pytest.raises(Exception):
        run_pipeline(project, TINY_PARAMS, pipeline="sft")  # its input, the base model, was never built
    (run,) = _runs(project)
    assert run.info.status == "FAILED"
    assert f"MLflow run {run.info.run_id} in {tracking_uri(project)} is marked FAILED" in caplog.text


@pytest.mark.slow
def test_a_run_tells_its_story_one_line_per_round_and_a_results_table(project, caplog):
    caplog.set_level(logging.INFO, logger="rlvr_factory.hooks")
    run_pipeline(project, TINY_PARAMS)
    lines = [r.getMessage() for r in caplog.records if r.name == "rlvr_factory.hooks"]
    rounds = TINY_PARAMS["rl"]["rounds"]
    (run,) = _runs(project)
    assert lines[0].endswith(f" nodes, {rounds} RL rounds; MLflow run {run.info.run_id}")
    round_lines = [line for line in lines if line.startswith("round ")]
    assert [line.split(":")[0] for line in round_lines] == [f"round {k + 1}/{rounds}" for k in range(rounds)]
    assert all(", ETA " in line and "val acc" in line for line in round_lines)
    node_lines = [line for line in lines if line.startswith("[")]
    assert any("] curate_tasks: " in line for line in node_lines)
    assert not [line for line in node_lines if re.search(r"round_\d{3}\.", line)]  # a round is its one line
    table = next(line for line in lines if line.startswith("results\n")).splitlines()
    assert table[1].split()[:3] == ["test", "split", "tasks"] and table[2].startswith("SFT")
    assert table[3].startswith(f"RL ({rounds} rounds)")
    artefacts = next(line for line in lines if line.startswith("artefacts\n"))
    for where in ("data/08_reporting/metrics.json", "data/08_reporting/summary.json",
                  "data/08_reporting/plots/round_curves.png", "data/06_models/rl_policy", run.info.run_id):
        assert where in artefacts
    assert "model rlvr-policy version 1" in artefacts
    assert lines[-1].startswith("done in ")
