"""`torchrun --nproc_per_node=2 -m kedro run --pipeline=rlvr` (and the same through Ray Train,
`python -m rlvr_factory.ray_launch --workers 2`) at a tiny size: two gloo ranks pre-train, fine-tune
and run an RL round together; rank 0 alone writes the outputs and the MLflow run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from tests.pipelines.conftest import TINY_PARAMS, as_cli_params, make_project, tracking_uri

pytestmark = pytest.mark.slow
PARAMS = {**TINY_PARAMS, "rl": {**TINY_PARAMS["rl"], "rounds": 1}}
STRATEGY = {"torchrun": "fsdp", "ray": "ddp"}  # each launcher with one of the strategies (tests/test_distributed.py: both)


def _launcher(name: str) -> list[str]:
    if name == "torchrun":
        return [shutil.which("torchrun", path=str(Path(sys.executable).parent)), "--standalone", "--nproc_per_node=2",
                "-m", "kedro", "run"]
    pytest.importorskip("ray.train.torch", reason="the Ray launcher needs the `ray` extra (ray[train])")
    return [sys.executable, "-m", "rlvr_factory.ray_launch", "--workers", "2", "--"]


@pytest.fixture(scope="module", params=["torchrun", "ray"])
def launched_project(request, tmp_path_factory) -> tuple[Path, str]:
    project = make_project(tmp_path_factory.mktemp(request.param))
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri(project), "TQDM_DISABLE": "1",
           "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run(
        [*_launcher(request.param), "--pipeline=rlvr",
         f"--params={','.join(as_cli_params({**PARAMS, 'distributed': {'strategy': STRATEGY[request.param]}}))}"],
        cwd=project, env=env, capture_output=True, text=True, timeout=1200,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return project, output, request.param


def test_both_ranks_joined_one_gloo_group(launched_project):
    _, output, launcher = launched_project
    assert f"data-parallel: rank 0 of 2 (gloo, {STRATEGY[launcher]})" in output


def test_rank_zero_alone_logs_one_mlflow_run_and_registers_one_policy(launched_project):
    project, *_ = launched_project
    client = MlflowClient(tracking_uri=tracking_uri(project))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    assert run.info.status == "FINISHED"
    assert "rl.reward_mean" in run.data.metrics
    assert len(client.search_model_versions("name='rlvr-policy'")) == 1


def test_the_outputs_hold_the_round_and_the_policies(launched_project):
    project, *_ = launched_project
    (round_stats,) = json.loads((project / "data/08_reporting/round_history.json").read_text())
    assert round_stats["round"] == 0 and round_stats["optimizer_steps"] >= 1
    assert 0.0 <= round_stats["pass_rate"] <= 1.0
    for policy in ("sft_policy", "rl_policy"):
        assert (project / "data/06_models" / policy / "config.json").exists()
