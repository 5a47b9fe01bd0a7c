"""`torchrun --nproc_per_node=2 -m kedro run --pipeline=rlvr` (and the same through Ray Train,
`python -m rlvr_factory.ray_launch --workers 2`) at a tiny size: two gloo ranks pre-train, fine-tune
and run four RL rounds together; rank 0 alone writes the outputs and the MLflow run. The same launch with
restarts on, whose rank 1 is killed after the second round's checkpoint, restarts itself and ends with the
uninterrupted run's metrics."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlvr_factory import restartable
from tests.pipelines.conftest import TINY_PARAMS, as_cli_params, make_project, tracking_uri

pytestmark = pytest.mark.slow
PARAMS = {**TINY_PARAMS, "rl": {**TINY_PARAMS["rl"], "rounds": 4, "checkpoint_every": 2}}
STRATEGY = {"torchrun": "fsdp", "ray": "ddp"}  # each launcher with one of the strategies (tests/test_distributed.py: both)


def _launcher(name: str, restarts: int = 0) -> list[str]:
    if name == "torchrun":
        return [shutil.which("torchrun", path=str(Path(sys.executable).parent)), "--standalone", "--nproc_per_node=2",
                *([f"--max-restarts={restarts}", "-m", "rlvr_factory.restartable"] if restarts else ["-m", "kedro", "run"])]
    pytest.importorskip("ray.train.torch", reason="the Ray launcher needs the `ray` extra (ray[train])")
    return [sys.executable, "-m", "rlvr_factory.ray_launch", "--workers", "2",
            *([f"--max-failures={restarts}"] if restarts else []), "--"]


def _launch(project: Path, launcher: str, restarts: int = 0) -> subprocess.Popen:
    """The launcher running the tiny `rlvr` pipeline in `project`, its console in `project/run.log`; its processes
    (the launcher's, the ranks', Ray's) carry `RLVR_TEST_LAUNCH` = the project's path."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri(project), "TQDM_DISABLE": "1",
           "OMP_NUM_THREADS": "1", "RAY_AUTH_MODE": "disabled", "RLVR_TEST_LAUNCH": str(project)}
    with open(project / "run.log", "a") as log:
        return subprocess.Popen([*_launcher(launcher, restarts), *_kedro_args(launcher)], cwd=project, env=env,
                                stdout=log, stderr=subprocess.STDOUT)


def _kedro_args(launcher: str) -> list[str]:
    return ["--pipeline=rlvr", f"--params={','.join(as_cli_params({**PARAMS, 'distributed': {'strategy': STRATEGY[launcher]}}))}"]


@pytest.fixture(scope="module", params=["torchrun", "ray"])
def launched_project(request, tmp_path_factory) -> tuple[Path, str]:
    project = make_project(tmp_path_factory.mktemp(request.param))
    code = _launch(project, request.param).wait(timeout=1200)
    output = (project / "run.log").read_text()
    assert code == 0, output[-6000:]
    return project, output, request.param


def _rank_pid(project: Path, launcher: str) -> int | None:
    """A rank's process in the launch running in `project` (found by its environment): torchrun's rank 1, or one of
    Ray Train's workers (they set their rank after they start)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            command = (proc / "cmdline").read_bytes()
        except (OSError, ValueError):
            continue
        if f"RLVR_TEST_LAUNCH={project}".encode() not in environ:
            continue
        if (b"RANK=1" in environ and b"LOCAL_RANK=1" in environ) if launcher == "torchrun" else b"RayTrainWorker" in command:
            found.append(int(proc.name))
    parents = {pid: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]) for pid in found}
    return next((pid for pid in found if parents[pid] not in found), None)  # not a rank's child (a verifier, say)


def test_a_rank_killed_mid_run_restarts_from_the_last_checkpoint_to_the_uninterrupted_result(launched_project,
                                                                                            tmp_path, monkeypatch):
    reference, _, launcher = launched_project
    project = make_project(tmp_path / "restarted")
    launch = _launch(project, launcher, restarts=1)
    checkpoint, deadline = project / "data/06_models/checkpoints/round_001/optimizer.pt", time.monotonic() + 600
    while not checkpoint.exists() and launch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert checkpoint.exists(), (project / "run.log").read_text()[-6000:]
    pid = _rank_pid(project, launcher)
    assert pid is not None, "no rank is running"
    os.kill(pid, signal.SIGKILL)  # mid-run: rounds 2 and 3 are still to come
    assert launch.wait(timeout=1200) == 0, (project / "run.log").read_text()[-6000:]
    output = (project / "run.log").read_text()
    assert "resuming the RL rounds at round 2, after the last checkpoint this launch wrote" in output
    assert (project / "data/08_reporting/metrics.json").read_bytes() == (
        reference / "data/08_reporting/metrics.json").read_bytes()
    # a later launch in the same data/ starts from the beginning: this launch's checkpoints are older than it
    monkeypatch.chdir(project)
    assert restartable.resume_round(project, _kedro_args(launcher), since=0.0) == 2
    assert restartable.resume_round(project, _kedro_args(launcher), since=time.time()) == 0
    assert restartable.resume_round(project, [*_kedro_args(launcher), "--from-nodes=sft"], since=0.0) == 0
    assert restartable.resume_round(project, [*_kedro_args(launcher)[1:], "--pipeline=sft"], since=0.0) == 0


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
    history = json.loads((project / "data/08_reporting/round_history.json").read_text())
    assert [r["round"] for r in history] == [0, 1, 2, 3] and all(r["optimizer_steps"] >= 1 for r in history)
    assert all(0.0 <= r["pass_rate"] <= 1.0 for r in history)
    for policy in ("sft_policy", "rl_policy"):
        assert (project / "data/06_models" / policy / "config.json").exists()


def test_restarted_arguments_resume_at_the_round_asked_and_keep_every_other_option():
    args = ["--pipeline=rlvr", "--params", "rl.rounds=9,rl.checkpoint_every=3", "--env=local"]
    assert restartable.resumed_args(args, 0) == args
    assert restartable.resumed_args(args, 6) == ["--pipeline=rlvr", "--params", "rl.rounds=9,rl.checkpoint_every=3,"
                                                 "rl.resume_from=6", "--env=local", "--from-nodes=round.rollout"]
    assert restartable.resumed_args(["--pipeline=rlvr"], 3) == ["--pipeline=rlvr", "--params=rl.resume_from=3",
                                                                "--from-nodes=round.rollout"]
