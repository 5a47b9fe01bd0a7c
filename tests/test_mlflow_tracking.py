"""`rlvr_factory.tracking`: where the MLflow store lives (also under DVC), and the tags that link a run
to its commit and DVC state."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
from pathlib import Path

import pytest
from kedro.config import OmegaConfigLoader

from rlvr_factory import settings, tracking
from tests.pipelines.conftest import PROJECT_ROOT


def _mlflow_config(monkeypatch, **env: str) -> dict:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("DVC_ROOT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    loader = OmegaConfigLoader(str(PROJECT_ROOT / "conf"), **settings.CONFIG_LOADER_ARGS)
    loader.config_patterns["mlflow"] = ["mlflow*"]
    return loader["mlflow"]


def test_the_store_is_the_projects_own_by_default(monkeypatch):
    config = _mlflow_config(monkeypatch)
    root = Path(settings._project_root())
    assert config["server"]["mlflow_tracking_uri"] == f"sqlite:///{root}/mlruns/mlflow.db"
    assert config["tracking"]["experiment"]["create_experiment_kwargs"]["artifact_location"] == str(root / "mlruns/artifacts")


def test_under_dvc_the_store_is_the_dvc_repositorys_even_from_a_temporary_copy(monkeypatch, tmp_path):
    # `dvc exp run --temp/--queue` sets DVC_ROOT to the original repository while the command
    # runs in .dvc/tmp/exps/<copy>; neither the copy's location nor the cwd may decide the store.
    monkeypatch.chdir(tmp_path)
    config = _mlflow_config(monkeypatch, DVC_ROOT=str(tmp_path / "repo"))
    assert config["server"]["mlflow_tracking_uri"] == f"sqlite:///{tmp_path}/repo/mlruns/mlflow.db"
    assert config["tracking"]["experiment"]["create_experiment_kwargs"]["artifact_location"] == str(
        tmp_path / "repo/mlruns/artifacts")


def test_mlflow_tracking_uri_moves_the_store_and_its_artifacts(monkeypatch, tmp_path):
    config = _mlflow_config(monkeypatch, MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path}/elsewhere/runs.db",
                            DVC_ROOT=str(tmp_path / "repo"))
    assert config["server"]["mlflow_tracking_uri"] == f"sqlite:///{tmp_path}/elsewhere/runs.db"
    assert config["tracking"]["experiment"]["create_experiment_kwargs"]["artifact_location"] == str(
        tmp_path / "elsewhere/artifacts")
    assert tracking.artifact_location("http://mlflow.example:5000") is None  # the server decides


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


@pytest.fixture
def repo(tmp_path) -> Path:
    for name in ("conf/base/parameters_rlvr.yml", "dvc.lock", "data/.gitkeep"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x: 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "init")
    return tmp_path


def test_a_run_is_tagged_with_its_commit_clean_tree_and_lock_hash(repo):
    tags = tracking.lineage_tags(repo, environ={})
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert tags["git.commit"] == tags["mlflow.source.git.commit"] == head
    assert tags["git.dirty"] == "false"
    assert len(tags["dvc.lock_sha256"]) == 64
    assert not {"dvc.exp_name", "dvc.stage"} & tags.keys()


def test_dvcs_own_lock_and_outputs_do_not_make_the_tree_dirty(repo):
    before = tracking.lineage_tags(repo, environ={})["dvc.lock_sha256"]
    (repo / "dvc.lock").write_text("x: 2\n")
    (repo / "data/metrics.json").write_text("{}")
    tags = tracking.lineage_tags(repo, environ={})
    assert tags["git.dirty"] == "false"
    assert tags["dvc.lock_sha256"] != before


@pytest.mark.parametrize("change", ["edit a parameter", "add a source file"])
def test_changed_configuration_or_code_makes_the_tree_dirty(repo, change):
    if change == "edit a parameter":
        (repo / "conf/base/parameters_rlvr.yml").write_text("x: 2\n")
    else:
        (repo / "new_module.py").write_text("")
    assert tracking.lineage_tags(repo, environ={})["git.dirty"] == "true"


def test_an_edit_git_status_does_not_report_still_makes_the_tree_dirty(repo):
    # git's index can vouch for a file that changed (here: marked assume-unchanged); the content decides
    config = repo / "conf/base/parameters_rlvr.yml"
    _git(repo, "update-index", "--assume-unchanged", "conf/base/parameters_rlvr.yml")
    config.write_text("x: 3\n")
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    assert tracking.lineage_tags(repo, environ={})["git.dirty"] == "true"


def test_a_tree_git_cannot_read_is_of_unknown_cleanliness(repo):
    (repo / ".git/HEAD").write_text("garbage\n")
    assert tracking.lineage_tags(repo, environ={}).get("git.dirty", "unknown") == "unknown"


def test_dvc_experiment_variables_become_tags(repo):
    env = {"DVC_EXP_NAME": "lr-high", "DVC_STAGE": "rl", "DVC_EXP_BASELINE_REV": "abc123", "DVC_ROOT": "/x"}
    tags = tracking.lineage_tags(repo, environ=env)
    assert (tags["dvc.exp_name"], tags["dvc.stage"], tags["dvc.exp_baseline_rev"]) == ("lr-high", "rl", "abc123")


def test_a_run_is_tagged_with_the_locked_environment_and_whether_it_is_installed(repo):
    torch_version = importlib.metadata.version("torch")
    (repo / "requirements.lock").write_text(f"torch=={torch_version} \\\n    --hash=sha256:00\n")
    tags = tracking.lineage_tags(repo, environ={})
    assert tags["env.lock_sha256"] == hashlib.sha256((repo / "requirements.lock").read_bytes()).hexdigest()
    assert tags["env.locked"] == "true"
    (repo / "requirements.lock").write_text(f"torch=={torch_version}\nnumpy==0.0.1\n")
    assert tracking.lineage_tags(repo, environ={})["env.locked"] == "false"  # numpy is installed at another version


def test_outside_a_git_repository_there_are_no_git_tags(tmp_path):
    assert tracking.lineage_tags(tmp_path, environ={}) == {}
