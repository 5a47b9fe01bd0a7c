"""`rlvr_factory.mlflow_model`: the registered policy answers plain prompts through `mlflow.pyfunc` as
the pipeline's greedy evaluation would: chat template applied, evaluation's budget, completion only."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import mlflow
import pytest
from mlflow import MlflowClient

from rlvr_factory.mlflow_model import log_policy_model
from rlvr_factory.rollout.hf import SamplingConfig, generate
from tests.conftest import make_scripted_policy

GENERATION = SamplingConfig(max_new_tokens=8, temperature=1.0, top_p=1.0, batch_size=4)  # evaluate.sampling


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    mlflow.set_experiment("policy-model")  # not the experiment an earlier run in this process left active
    try:
        yield uri
    finally:
        while mlflow.active_run():
            mlflow.end_run()
        mlflow.set_tracking_uri(None)
        mlflow.set_registry_uri(None)
        os.environ.pop("MLFLOW_REGISTRY_URI", None)  # the setter exported it; None does not unset it


@pytest.fixture(scope="module")
def registered(store):
    """A policy that answers "19" to any chat-formatted prompt, logged and registered as `policy-test`."""
    policy = make_scripted_policy("19")
    with mlflow.start_run() as run:
        info = log_policy_model(policy, "policy-test", {"eval.rl.greedy_accuracy": 0.25}, GENERATION)
    return policy, run, info


def test_the_registered_model_applies_the_chat_template_and_returns_only_the_completion(registered):
    model = mlflow.pyfunc.load_model("models:/policy-test/latest")
    # The scripted policy writes "19" only after the chat template's "...assistant\n"; a raw
    # prompt would end in "7" and get something else, and an echo would start with the prompt.
    assert model.predict(["Compute 12+7", "Compute 2+2"]) == ["19", "19"]


def test_it_answers_exactly_as_the_pipelines_greedy_generation(registered):
    policy, _, _ = registered
    prompts = ["Compute 12+7", "What is 3*4?", ""]
    greedy = replace(GENERATION, temperature=0.0)
    expected, _ = generate(policy, prompts, 1, greedy)
    assert mlflow.pyfunc.load_model("models:/policy-test/1").predict(prompts) == [c.text for c in expected]


def test_evaluations_token_budget_is_the_default_and_a_call_may_change_it(registered):
    model = mlflow.pyfunc.load_model("models:/policy-test/latest")
    assert model.metadata.get_params_schema().to_dict() == [
        {"name": "max_new_tokens", "type": "long", "default": 8, "shape": None},
        {"name": "batch_size", "type": "long", "default": 4, "shape": None},
    ]
    assert model.predict(["Compute 12+7"], params={"max_new_tokens": 1}) == ["1"]


def test_the_model_carries_its_code_pinned_requirements_and_the_metrics(registered):
    _, run, info = registered
    local = Path(mlflow.artifacts.download_artifacts(info.model_uri))
    assert (local / "code/rlvr_factory/mlflow_model.py").exists()  # loads without this checkout
    requirements = (local / "requirements.txt").read_text().split()
    assert {r.split("==")[0] for r in requirements} >= {"torch", "transformers", "peft"}
    assert all("==" in r for r in requirements if not r.startswith("mlflow"))
    client = MlflowClient()
    version = client.get_model_version("policy-test", "1")
    assert version.run_id == run.info.run_id
    assert version.tags == {"eval.rl.greedy_accuracy": "0.25", "run_id": run.info.run_id}
    assert {m.key: m.value for m in client.get_logged_model(info.model_id).metrics} == {"eval.rl.greedy_accuracy": 0.25}


def test_logging_without_a_name_logs_the_model_but_registers_nothing(registered):
    with mlflow.start_run():
        info = log_policy_model(make_scripted_policy("19"), None, {}, GENERATION)
    assert info.registered_model_version is None
    assert [m.name for m in MlflowClient().search_registered_models()] == ["policy-test"]


def test_logging_outside_a_run_is_refused_with_a_hint(registered):
    with pytest.raises(RuntimeError, match="no active MLflow run"):
        log_policy_model(make_scripted_policy("19"), "policy-test", {}, GENERATION)
