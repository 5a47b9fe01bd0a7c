"""Kedro project settings: hooks, config loader and the resolvers the configuration uses."""

import os
from pathlib import Path

from omegaconf.resolvers import oc

from rlvr_factory import tracking
from rlvr_factory.config_loader import ConfigLoader
from rlvr_factory.hooks import MlflowLineageHook, RLShapeHook


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


HOOKS = (RLShapeHook(), MlflowLineageHook())

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
