"""Kedro project settings: hooks, config loader and the resolvers the configuration uses."""

from pathlib import Path

from kedro.config import OmegaConfigLoader
from omegaconf.resolvers import oc

from rlvr_factory.hooks import RLShapeHook


def _project_root() -> str:
    """The project directory (where pyproject.toml lies), for paths that must not follow the cwd."""
    here = Path(__file__).resolve().parents[2]
    return str(here if (here / "pyproject.toml").exists() else Path.cwd())


HOOKS = (RLShapeHook(),)

CONFIG_LOADER_CLASS = OmegaConfigLoader
CONFIG_LOADER_ARGS = {
    "base_env": "base",
    "default_run_env": "local",
    # `oc.env` (Kedro allows it only in credentials by default) lets MLFLOW_TRACKING_URI win.
    "custom_resolvers": {"project_root": _project_root, "oc.env": oc.env},
}
