"""The policy as an MLflow model: prompts in, completions out, generated exactly as the pipeline's
greedy evaluation generates them (the tokenizer's chat template, greedy decoding, evaluation's
token budget), so `mlflow.pyfunc.load_model(...).predict(["Compute 12+7"])` answers like the
evaluated policy. Knows nothing about Kedro."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.models.model import ModelInfo

import rlvr_factory
from rlvr_factory.models.policy import Policy, load_policy, save_policy
from rlvr_factory.rollout.hf import SamplingConfig, generate

log = logging.getLogger(__name__)
ARTIFACT = "policy"  # the HF model directory inside the logged model's artifacts
PARAMS = ("max_new_tokens", "batch_size")  # what `predict(..., params=...)` may change per call
REQUIREMENTS = ("torch", "transformers", "tokenizers", "peft", "tqdm")


class PolicyModel(mlflow.pyfunc.PythonModel):
    """An MLflow pyfunc model over a policy directory.

    `model_config` holds the generation settings (`max_new_tokens`, `batch_size`, `device`);
    decoding is greedy, as in the evaluation's greedy accuracy. `predict` takes user prompts
    (plain text; the chat template is applied here) and returns the completions alone.
    """

    def load_context(self, context) -> None:
        config = dict(context.model_config or {})
        self._policy = load_policy(context.artifacts[ARTIFACT], device=config.pop("device", "auto"))
        self._sampling = SamplingConfig(**{k: v for k, v in config.items() if k in PARAMS}, temperature=0.0)

    def predict(self, context, model_input: list[str], params: dict[str, Any] | None = None) -> list[str]:
        """The greedy completion of each prompt (`params` may set `max_new_tokens`, `batch_size`)."""
        sampling = replace(self._sampling, **{k: int(v) for k, v in (params or {}).items() if k in PARAMS})
        completions, _ = generate(self._policy, list(model_input), 1, sampling, desc="predict")
        return [c.text for c in completions]


def _requirements() -> list[str]:
    """The packages the model needs, pinned to this environment's versions (inferring them
    would load the model again in a subprocess)."""
    from importlib.metadata import version

    return [f"{name}=={version(name).split('+')[0]}" for name in REQUIREMENTS]


def log_policy_model(
    policy: Policy, registered_name: str | None, metrics: Mapping[str, float], generation: SamplingConfig
) -> ModelInfo:
    """Log `policy` as a `PolicyModel` (from code: `mlflow_model_code.py`) in the active run, with `generation` (`max_new_tokens`,
    `batch_size`) as its settings and `metrics` attached, and register it as `registered_name`
    (unless None) with the metrics as tags of the new version.

    The model carries this package's code, so it loads wherever its requirements are installed.
    """
    run = mlflow.active_run()
    if run is None:
        raise RuntimeError("no active MLflow run to log the policy in; start one (kedro-mlflow does) first")
    config = {k: int(getattr(generation, k)) for k in PARAMS}
    with tempfile.TemporaryDirectory() as tmp:
        save_policy(policy, Path(tmp) / ARTIFACT)
        info = mlflow.pyfunc.log_model(
            name="policy", python_model=str(Path(__file__).with_name("mlflow_model_code.py")),
            artifacts={ARTIFACT: str(Path(tmp) / ARTIFACT)}, model_config=config,
            input_example=(["Compute 12+7"], {k: config.get(k, 1) for k in PARAMS}),
            code_paths=[str(Path(rlvr_factory.__file__).parent)], pip_requirements=_requirements(),
            registered_model_name=registered_name,
        )
    mlflow.log_metrics(dict(metrics), model_id=info.model_id)
    if registered_name is None:
        return info
    client, version = MlflowClient(), str(info.registered_model_version)
    for key, value in {**metrics, "run_id": run.info.run_id}.items():
        client.set_model_version_tag(registered_name, version, key, value if isinstance(value, str) else f"{value:.6g}")
    log.info("registered %s version %s from run %s", registered_name, version, run.info.run_id)
    return info


def log_reward_model(reward_model: Policy, metrics: Mapping[str, float]) -> ModelInfo:
    """Log a reward model with MLflow's transformers flavour in the active run, as `reward_model/`,
    with `metrics` attached: a sequence classifier as one model; an implicit reward model as its
    trained causal LM (`reward_model/`, its `implicit_reward` record in the model's metadata) and
    its frozen reference (`reward_model_reference/`)."""
    from rlvr_factory.models.reward_model import IMPLICIT_KEY, ImplicitRewardModel

    if mlflow.active_run() is None:
        raise RuntimeError("no active MLflow run to log the reward model in; start one (kedro-mlflow does) first")
    model = reward_model.model
    if isinstance(model, ImplicitRewardModel):
        record = {IMPLICIT_KEY: getattr(model.config, IMPLICIT_KEY)}
        mlflow.transformers.log_model({"model": model.reference, "tokenizer": reward_model.tokenizer},
                                      name="reward_model_reference", task="text-generation",
                                      pip_requirements=_requirements(), metadata={"role": "implicit reward reference"})
        info = mlflow.transformers.log_model({"model": model.policy, "tokenizer": reward_model.tokenizer},
                                             name="reward_model", task="text-generation",
                                             pip_requirements=_requirements(), metadata=record)
        mlflow.log_metrics(dict(metrics), model_id=info.model_id)
        return info
    info = mlflow.transformers.log_model(
        {"model": reward_model.model, "tokenizer": reward_model.tokenizer}, name="reward_model",
        task="text-classification", pip_requirements=_requirements(),
    )
    mlflow.log_metrics(dict(metrics), model_id=info.model_id)
    return info
