"""A new user's first `kedro run --pipelines=rlvr` in a fresh clone (at a tiny size): the console tells
the story without Kedro's per-dataset lines or known noise, nothing rewrites a tracked file (telemetry
is off for the project), the MLflow run is not tagged dirty, and DVC agrees the outputs are the
committed lock's."""

from __future__ import annotations

import json
import re
import shutil
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


def _messages(output: str) -> list[str]:
    """The logged lines' messages (after `HH:MM:SS LEVEL`), with the lines a message continues on."""
    return [re.sub(r"^\d\d:\d\d:\d\d [A-Z]+ +", "", line) for line in output.splitlines()]


def test_the_console_has_a_line_per_node_and_round_then_the_results_and_artefacts(first_run):
    lines = _messages(first_run.output)
    rounds = TINY_PARAMS["rl"]["rounds"]
    run_id = _run(first_run).info.run_id
    assert any(line.endswith(f" nodes, {rounds} RL rounds; MLflow run {run_id}") for line in lines)
    round_lines = [line for line in lines if re.match(r"round +\d+/", line)]
    assert [line.split(":")[0] for line in round_lines] == [f"round {k}/{rounds}" for k in range(1, rounds + 1)]
    assert all("val acc" in line and ", ETA " in line for line in round_lines)
    node_lines = [line for line in lines if re.match(r"\[ *\d+/\d+\] ", line)]
    assert any("] curate_tasks: " in line for line in node_lines)
    assert not [line for line in node_lines if re.search(r"round_\d{3}\.", line)]  # a round is its one line
    assert any("base model: one-off pre-training of the embedded tiny Llama" in line
               and "every later run with this configuration reuses it" in line for line in lines)
    table = lines.index("results")
    assert lines[table + 1].split()[:4] == ["test", "split", "tasks", "greedy"]
    assert lines[table + 2].startswith("SFT ") and lines[table + 3].startswith(f"RL ({rounds} rounds) ")
    assert lines[table + 4].startswith("validation greedy accuracy: ")
    artefacts = "\n".join(lines[lines.index("artefacts"):])
    for where in ("data/08_reporting/metrics.json", "data/08_reporting/summary.json",
                  "data/08_reporting/plots/round_curves.png", "data/06_models/rl_policy", run_id,
                  "model rlvr-policy version 1"):
        assert where in artefacts
    assert any(line.startswith("done in ") for line in lines[lines.index("artefacts"):])


def test_known_noise_is_gone_from_the_console(first_run):
    for noise in NOISE:
        assert noise not in first_run.output, noise


def test_the_run_gets_huge_pages_for_its_tensors(first_run):
    # The user's shell has no THP_MEM_ALLOC_ENABLE (user_environment): importing the project set it
    # before torch allocated, or the run would have warned (hooks.py, tests/test_cpu_allocator.py).
    assert "get no huge pages" not in first_run.output


def test_the_clone_stays_clean(first_run):
    assert git(first_run.clone, "status", "--porcelain", "--untracked-files=all") == ""
    assert (first_run.clone / "pyproject.toml").read_bytes() == first_run.pyproject  # no telemetry project id


def test_a_run_with_other_parameters_leaves_the_committed_reference_results_alone(first_run, tmp_path):
    # README: `kedro run --pipelines=rl,evaluate,report --params=...` re-runs RL with other settings. It writes
    # data/ like any plain run; the committed results are DVC's (`--env=base`, data/envs/base), which it never
    # touches. (In a copy of the clone: the other tests read the first run's files and MLflow run.)
    clone = shutil.copytree(first_run.clone, tmp_path / "clone", symlinks=True)
    committed = (clone / "data/envs/base/08_reporting/metrics.json").read_bytes()
    done = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipelines=rl,evaluate", "--params=rl.rounds=1"],
                          cwd=clone, env=user_environment(), capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    report = json.loads((clone / "data/08_reporting/metrics.json").read_text())
    assert len(report["round_history"]) == 1  # this run's report, in data/
    assert (clone / "data/envs/base/08_reporting/metrics.json").read_bytes() == committed
    assert git(clone, "status", "--porcelain", "--untracked-files=all") == ""


def _run(first_run: FirstRun):
    client = MlflowClient(tracking_uri=f"sqlite:///{first_run.clone}/mlruns/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    return run


def test_the_mlflow_run_is_tagged_with_the_commit_and_not_dirty(first_run):
    run = _run(first_run)
    assert run.data.tags["git.commit"] == git(first_run.clone, "rev-parse", "HEAD")
    assert run.data.tags["git.dirty"] == "false"
    assert run.info.status == "FINISHED"


def test_the_first_run_writes_the_committed_reference_results_byte_for_byte(first_run):
    # The README's first command writes data/; DVC's stages (`--env=base`) wrote the committed results to
    # data/envs/base. The same configuration on the same kind of CPU: the same bytes (a run writes no timings
    # to disk, they go to MLflow).
    for name in ("metrics.json", "summary.json", "plots/round_curves.csv", "plots/overoptimisation.csv"):
        ran, committed = (first_run.clone / where / "08_reporting" / name for where in ("data", "data/envs/base"))
        assert ran.read_bytes() == committed.read_bytes(), name
