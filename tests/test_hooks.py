"""The project's Kedro hooks: a model path that cannot load fails before any work, and a failed run
says which MLflow run it left FAILED. (The story a whole run tells: tests/test_first_run.py.)"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlvr_factory.hooks import ModelPathHook
from rlvr_factory.parameters import ModelConfig
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
    hook._model = ModelConfig(name_or_path=name)
    hook.before_pipeline_run({}, base_model.create_pipeline(), None)  # no error: nothing local to check


def test_a_run_that_does_not_build_the_base_model_does_not_check_its_path(tmp_path):
    hook = ModelPathHook()
    hook._model = ModelConfig(name_or_path=str(tmp_path / "missing"))
    hook.before_pipeline_run({}, evaluate.create_pipeline(), None)  # evaluation reads the stages' policies


def test_a_failed_run_says_which_mlflow_run_it_left_failed(project, caplog):
    caplog.set_level(logging.ERROR, logger="rlvr_factory.hooks")
    with pytest.raises(Exception):
        run_pipeline(project, TINY_PARAMS, pipeline="sft")  # its input, the base model, was never built
    (run,) = _runs(project)
    assert run.info.status == "FAILED"
    assert f"MLflow run {run.info.run_id} in {tracking_uri(project)} is marked FAILED" in caplog.text


def test_each_node_parameter_is_logged_once_per_run_not_once_per_node(project, monkeypatch):
    """kedro-mlflow logs a node's `params:` inputs before every node that reads them (one SQLite write per key);
    MlflowParamsOnceHook, registered in its place, logs each once per run, under kedro-mlflow's names."""
    import mlflow

    logged: list[str] = []
    real = mlflow.log_param

    def log_param(key, value, *args, **kwargs):  # the real call, counted
        logged.append(key)
        return real(key, value, *args, **kwargs)

    run_pipeline(project, TINY_PARAMS, pipeline="curate")
    run_pipeline(project, TINY_PARAMS, pipeline="base_model")
    monkeypatch.setattr(mlflow, "log_param", log_param)
    run_pipeline(project, TINY_PARAMS, pipeline="sft")  # build_sft_examples and supervised_fine_tune both read params:sft
    assert logged, "no node parameter was logged at all"
    assert len(logged) == len(set(logged)), sorted(k for k in set(logged) if logged.count(k) > 1)
    assert "sft.train.steps" in logged  # read by both sft nodes: logged before the first
    (run,) = [r for r in _runs(project) if r.info.run_name == "sft"]
    assert int(run.data.params["sft.train.steps"]) == TINY_PARAMS["sft"]["train"]["steps"]
    assert "model.name_or_path" in run.data.params  # supervised_fine_tune's other parameter block
