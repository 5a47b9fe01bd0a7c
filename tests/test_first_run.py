"""A new user's first `kedro run --pipelines=rlvr` in a fresh clone (at a tiny size): the console tells
the story without Kedro's per-dataset lines or known noise, nothing rewrites a tracked file (telemetry
is off for the project), the MLflow run is not tagged dirty, and DVC agrees the outputs are the
committed lock's."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.pipelines.conftest import TINY_PARAMS
from tests.project_clone import user_environment
from tests.test_dvc import git

pytestmark = pytest.mark.slow

NOISE = [
    "Loading data from", "Saving data to", "Running node:", "Completed 1 out of",  # Kedro's per-dataset and per-node lines
    "Kedro is sending anonymous usage data",  # telemetry's consent banner
    "Add type hints to the `predict` method",  # kedro-mlflow's pipeline model, never logged here
    "Timeout is disabled",  # Math-Verify: our pool enforces the timeout
    "metrics added to run",  # the report adds nothing to a whole run
    "Loading weights", "Writing model shards", "Downloading artifacts",  # a bar per model load and artifact
    "is deprecated",  # e.g. Kedro's `--pipeline`
]


@dataclass
class FirstRun:
    clone: Path
    output: str
    pyproject: bytes


@pytest.fixture(scope="module")
def first_run(refreshed_project, tmp_path_factory) -> FirstRun:
    """`git clone`, then the README's first command, as a user with no telemetry opt-out set."""
    clone = tmp_path_factory.mktemp("first_run") / "clone"
    git(refreshed_project.repo.parent, "clone", "-q", str(refreshed_project.repo), str(clone))
    pyproject = (clone / "pyproject.toml").read_bytes()
    done = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=rlvr"], cwd=clone,
                          env=user_environment(), capture_output=True, text=True, timeout=1800)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return FirstRun(clone, output, pyproject)


def test_the_console_has_a_line_per_round_and_a_results_table(first_run):
    lines = first_run.output.splitlines()
    rounds = TINY_PARAMS["rl"]["rounds"]
    for k in range(1, rounds + 1):
        assert any(f" round {k}/{rounds}: reward " in line and ", ETA " in line for line in lines), k
    table = lines.index(next(line for line in lines if line.endswith(" results")))
    assert lines[table + 1].split()[:4] == ["test", "split", "tasks", "greedy"]
    assert lines[table + 2].startswith("SFT ") and lines[table + 3].startswith(f"RL ({rounds} rounds) ")
    assert any("data/08_reporting/metrics.json" in line for line in lines[table:])
    assert any("base model: one-off pre-training of the embedded tiny Llama" in line
               and "every later run with this configuration reuses it" in line for line in lines)


def test_known_noise_is_gone_from_the_console(first_run):
    for noise in NOISE:
        assert noise not in first_run.output, noise


def test_the_clone_stays_clean(first_run):
    assert git(first_run.clone, "status", "--porcelain", "--untracked-files=all") == ""
    assert (first_run.clone / "pyproject.toml").read_bytes() == first_run.pyproject  # no telemetry project id


def test_the_mlflow_run_is_tagged_with_the_commit_and_not_dirty(first_run):
    client = MlflowClient(tracking_uri=f"sqlite:///{first_run.clone}/mlruns/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    assert run.data.tags["git.commit"] == git(first_run.clone, "rev-parse", "HEAD")
    assert run.data.tags["git.dirty"] == "false"
    assert run.info.status == "FINISHED"


def test_dvc_finds_the_outputs_the_committed_lock_records(first_run):
    status = json.loads(subprocess.run(["dvc", "status", "--json"], cwd=first_run.clone, capture_output=True,
                                       text=True, check=True).stdout)
    changed = {path: state for stage in status.values() for change in stage if isinstance(change, dict)
               for paths in change.values() for path, state in paths.items() if state != "not in cache"}
    # "not in cache": the file is the one dvc.lock names, only this clone's cache lacks it. The
    # only outputs that differ are the rl stage's tables holding timings (verify_ms, seconds).
    assert set(changed) <= {"data/07_model_output/scored", "data/08_reporting/rounds"}, changed
