"""Kedro project settings: hooks, config loader and the resolvers the configuration uses."""

import os
import warnings
from pathlib import Path

# kedro-mlflow's own `KedroPipelineModel` (which this project never logs) defines `predict`
# without type hints, and MLflow warns about it when kedro-mlflow is imported, on every run.
# MLflow raises it under its own `simplefilter("once")`, past any filter set here, so the
# import's warnings are recorded and all but that one issued again.
with warnings.catch_warnings(record=True) as _caught:
    import kedro_mlflow.framework.hooks  # noqa: F401
for _warning in _caught:
    if "Add type hints to the `predict` method" not in str(_warning.message):
        warnings.warn_explicit(_warning.message, _warning.category, _warning.filename, _warning.lineno)

# omegaconf 2.4 (the lock's: hydra-core 1.4 needs it next to antlr 4.13) deprecates the resolver API
# Kedro and kedro-mlflow still call, once per resolver, on every run.
warnings.filterwarnings("ignore", message=r"register_new_resolver\(\) is deprecated", category=UserWarning)

from omegaconf.resolvers import oc  # noqa: E402
from transformers.utils import logging as transformers_logging  # noqa: E402

# transformers draws a progress bar for every model load and save ("Loading weights", "Writing
# model shards"); a run loads and saves its policies a dozen times, in milliseconds each.
transformers_logging.disable_progress_bar()
# MLflow's bar for every artifact it uploads or downloads (the logged policy has a dozen files).
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from rlvr_factory import tracking  # noqa: E402
from rlvr_factory.config_loader import ConfigLoader  # noqa: E402
from rlvr_factory.distributed_hooks import DistributedHook  # noqa: E402
from rlvr_factory.hooks import (  # noqa: E402
    MlflowLineageHook, MlflowParamsOnceHook, ModelPathHook, PipelineShapeHook, RunConsoleHook,
)


def _project_root() -> str:
    """The project directory (where pyproject.toml lies), for paths that must not follow the cwd."""
    here = Path(__file__).resolve().parents[2]
    return str(here if (here / "pyproject.toml").exists() else Path.cwd())


def _mlflow_store_root() -> str:
    """Where `mlruns/` lies: the DVC repository root under DVC (the original one even when
    `dvc exp run --temp/--queue` runs in a temporary copy), else the project root."""
    return str(tracking.store_root(_project_root()))


def _mlflow_artifact_location() -> str | None:
    """Artifacts of a new experiment: beside the SQLite store in use (so `MLFLOW_TRACKING_URI`
    moves both), or the tracking server's default."""
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"{tracking.SQLITE_PREFIX}{_mlflow_store_root()}/mlruns/mlflow.db"
    return tracking.artifact_location(uri)


# kedro-mlflow's hook, as MlflowParamsOnceHook (each node parameter logged once per run, not once per node),
# registered last as Kedro registers a plugin's hooks after these: pluggy calls it first, as before
DISABLE_HOOKS_FOR_PLUGINS = ("kedro-mlflow", "kedro_mlflow")
HOOKS = (PipelineShapeHook(), ModelPathHook(), RunConsoleHook(), MlflowLineageHook(), DistributedHook(),
         MlflowParamsOnceHook())

CONFIG_LOADER_CLASS = ConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # `oc.env` (Kedro allows it only in credentials by default) lets MLFLOW_TRACKING_URI win.
    "custom_resolvers": {
        "project_root": _project_root,
        "mlflow_store_root": _mlflow_store_root,
        "mlflow_artifact_location": _mlflow_artifact_location,
        "oc.env": oc.env,
    },
}
