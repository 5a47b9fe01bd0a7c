"""Run the real Kedro project, at a tiny size, in a scratch copy of its configuration."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import mlflow
import pytest
import yaml
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from rlvr_factory.datasets import RoundTableDataset
from rlvr_factory.pipelines.rl.loop import RoundLoopRunner

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def base_parameters() -> dict:
    """conf/base's parameters as a run receives them: merged, checked, every default filled in."""
    from rlvr_factory.parameters import resolve

    merged: dict = {}
    for path in sorted((PROJECT_ROOT / "conf/base").glob("parameters*.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return resolve(merged)


def typed_parameters():
    """conf/base's parameters as nodes receive them: each block its dataclass (`parameters.Parameters`)."""
    from rlvr_factory.parameters import Parameters
    from rlvr_factory.schema import parse

    return parse(Parameters, base_parameters())


# Overrides that shrink every stage so a whole `rlvr` run takes seconds.
TINY_PARAMS = {
    "domain": {"splits": {"train": 200, "validation": 20, "test": 20}},
    "model": {
        "embedded": {
            "corpus_size": 300,
            "architecture": {"hidden_size": 32, "intermediate_size": 64, "num_layers": 2, "num_heads": 2},
            "pretrain": {"steps": 10, "batch_size": 16, "warmup_steps": 2},
        }
    },
    "sft": {"num_examples": 50, "train": {"steps": 5, "batch_size": 8, "warmup_steps": 2}},
    "rl": {"rounds": 2, "prompts_per_round": 4, "samples_per_prompt": 4, "update": {"minibatch_size": 8}},
    "evaluate": {"k": 2, "validation_size": 10},
    "reward_model": {"train": {"steps": 30, "batch_size": 8, "warmup_steps": 2, "eval_every": 10, "checkpoint_every": 10}},
    "dpo": {"train": {"steps": 10, "batch_size": 8, "warmup_steps": 2, "eval_every": 5, "checkpoint_every": 5}},
}


def as_cli_params(params: dict, prefix: str = "") -> list[str]:
    """Nested parameters as `kedro run --params` items (`a.b=1`)."""
    items = []
    for key, value in params.items():
        if isinstance(value, dict):
            items += as_cli_params(value, f"{prefix}{key}.")
        else:
            items.append(f"{prefix}{key}={value}")
    return items


def make_project(root: Path) -> Path:
    """A scratch project: the real conf/ and pyproject.toml, its own data/ and MLflow store."""
    shutil.copytree(PROJECT_ROOT / "conf", root / "conf")
    shutil.copy(PROJECT_ROOT / "pyproject.toml", root / "pyproject.toml")
    (root / "src").mkdir()  # Kedro checks the source dir exists; the package itself is installed
    (root / "mlruns").mkdir()
    return root


def round_table(path: Path):
    """A round's `rollouts` or `scored` table as the pipeline reads it (nested columns as lists and dicts)."""
    return RoundTableDataset(str(path)).load()


def round_tables(folder: Path):
    """Every round's table in `folder`, in round order, as one frame."""
    import pandas as pd

    return pd.concat([round_table(p) for p in sorted(folder.glob("*.parquet"))], ignore_index=True)


def tracking_uri(project: Path) -> str:
    return f"sqlite:///{project}/mlruns/mlflow.db"


def run_pipeline(project: Path, params: dict, pipeline: str = "rlvr", env: str | None = None, hooks: tuple = (),
                 from_nodes: list[str] | None = None) -> None:
    """`kedro run --pipeline=<pipeline> [--env=<env>] [--from-nodes=...]` through a KedroSession, inside `project`;
    `hooks` are registered with the session's hook manager beside the project's."""
    cwd = os.getcwd()
    old_uri = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = tracking_uri(project)
    os.chdir(project)
    try:
        bootstrap_project(project)
        with KedroSession.create(project_path=project, env=env, runtime_params=params) as session:
            for hook in hooks:
                session._hook_manager.register(hook)
            session.run(pipeline_names=[pipeline], runner=RoundLoopRunner(), from_nodes=from_nodes)
    finally:
        # kedro-mlflow ends its run in the store, but MLflow's fluent API can still hold it
        # as active in this process; clear it so the next in-process run starts its own.
        while mlflow.active_run() is not None:
            mlflow.end_run()
        os.chdir(cwd)
        if old_uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = old_uri


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """One whole tiny `rlvr` run, shared by the tests that only read its outputs."""
    project = make_project(tmp_path_factory.mktemp("tiny_run"))
    run_pipeline(project, TINY_PARAMS)
    return project
