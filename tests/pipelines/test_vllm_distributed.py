"""A data-parallel `rlvr` run on vLLM: `torchrun --nproc_per_node=2 -m kedro run` with `rollout.engine=vllm`,
one engine per rank (a core each), FSDP training. Each rank's share of every round's rollouts equals what the
same seeds sample rank by rank in one process from the weights that round started with: the SFT policy, then each
round's checkpoint, so the weights reached both engines after every update.

Runs in the vLLM venv (scripts/test_vllm.sh); skips without vLLM unless RLVR_REQUIRE_VLLM is set.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from tests.conftest import skip_without_vllm
from tests.pipelines.conftest import PROJECT_ROOT, TINY_PARAMS, as_cli_params, make_project, round_table, tracking_uri
from tests.pipelines.test_rl_options import merged

skip_without_vllm()

from rlvr_factory import distributed  # noqa: E402
from rlvr_factory.datasets import PolicyDataset  # noqa: E402
from rlvr_factory.domains.base import tasks_from_frame  # noqa: E402
from rlvr_factory.domains.registry import get_domain  # noqa: E402
from rlvr_factory.parameters import Parameters, resolve  # noqa: E402
from rlvr_factory.pipelines.rl.nodes import round_seed  # noqa: E402
from rlvr_factory.rollout import vllm_engine  # noqa: E402
from rlvr_factory.rollout.agent_loop import sample_episodes  # noqa: E402
from rlvr_factory.schema import parse  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.filterwarnings("ignore::FutureWarning")]

RANKS = 2
PARAMS = merged(TINY_PARAMS, {
    # 2 heads of 32: the CPU build's attention kernels serve head sizes from 32 up
    "model": {"embedded": {"architecture": {"hidden_size": 64, "intermediate_size": 128}}},
    # every round's updated weights on disk, to replay the next round from; an entropy bonus moves them even in a
    # round whose rewards are all equal (the tiny model's usually are)
    "rl": {"checkpoint_every": 1, "update": {"entropy_coef": 0.1, "skip_zero_advantage": False, "warmup_steps": 0,
                                             "lr": 1e-3}},
    "rollout": {"engine": "vllm", "vllm": {"cpu_threads_bind": "0|1"}},
    "distributed": {"strategy": "fsdp"},
})


@pytest.fixture(scope="module")
def launched(tmp_path_factory) -> Path:
    project = make_project(tmp_path_factory.mktemp("vllm_dp"))
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri(project), "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([torchrun, "--standalone", f"--nproc_per_node={RANKS}", "-m", "kedro", "run",
                           "--pipeline=rlvr", f"--params={','.join(as_cli_params(PARAMS))}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    (project / "run.log").write_text(done.stdout + done.stderr)
    return project


def _parameters() -> Parameters:
    raw: dict = {}
    for path in sorted((PROJECT_ROOT / "conf/base").glob("parameters*.yml")):
        raw.update(yaml.safe_load(path.read_text()) or {})
    return parse(Parameters, resolve(merged(raw, PARAMS)))


def _rank_by_rank(project: Path, weights: Path, round_index: int, params: Parameters, rollouts: pd.DataFrame):
    """The round's episodes as one process samples each rank's share with that rank's seed, from `weights`."""
    policy = PolicyDataset(path=str(weights)).load()
    tasks = {t.task_id: t for t in tasks_from_frame(pd.read_parquet(project / "data/05_model_input/train_tasks.parquet"))}
    prompts = [tasks[task_id] for task_id in dict.fromkeys(rollouts["task_id"])]  # the round's, in rank order
    rl, episodes = params.rl, []  # each rank's
    for rank in range(RANKS):
        size, extra = divmod(len(prompts), RANKS)  # `distributed.shard`: contiguous, rank 0's first
        start = rank * size + min(rank, extra)
        share = slice(start, start + size + (rank < extra))
        seed = distributed.rank_seed(round_seed(rl, round_index), of_rank=rank)
        settings = replace(params.rollout, vllm=replace(params.rollout.vllm, cpu_threads_bind=None))
        mine, _ = sample_episodes(policy, get_domain(params.domain), prompts[share], rl.samples_per_prompt, settings,
                                  replace(rl.sampling, seed=seed))
        episodes.append(mine)
    return episodes


def test_each_ranks_engine_samples_its_share_as_one_process_does_rank_by_rank_every_round(launched):
    params, project = _parameters(), launched
    for round_index in range(params.rl.rounds):
        rollouts = round_table(project / f"data/07_model_output/rollouts/round_{round_index:03d}.parquet")
        before = project / ("data/06_models/sft_policy" if round_index == 0
                            else f"data/06_models/checkpoints/round_{round_index - 1:03d}")
        replayed = [e for mine in _rank_by_rank(project, before, round_index, params, rollouts) for e in mine]
        assert len(replayed) == len(rollouts) == 16
        assert [e.completion_ids for e in replayed] == list(map(list, rollouts["completion_ids"])), round_index
        for episode, logprobs in zip(replayed, rollouts["logprobs"]):
            assert episode.logprobs == pytest.approx(list(logprobs), abs=1e-5)
        if round_index:  # each rank sampled from the updated weights: the SFT policy's log-probs differ on each share
            stale = _rank_by_rank(project, project / "data/06_models/sft_policy", round_index, params, rollouts)
            at = 0
            for share in stale:
                logprobs = rollouts["logprobs"][at : at + len(share)]
                assert any(e.logprobs != pytest.approx(list(lp), abs=1e-5) for e, lp in zip(share, logprobs))
                at += len(share)
    vllm_engine.close_shared_engines()


def test_the_weights_reached_the_engines_after_every_update(launched):
    client = MlflowClient(tracking_uri(launched))
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id)
    syncs = client.get_metric_history(run.info.run_id, "rl.engine_weight_sync_seconds")
    assert [m.step for m in syncs] == list(range(TINY_PARAMS["rl"]["rounds"]))
    assert all(m.value > 0 for m in syncs)
    output = (launched / "run.log").read_text()
    assert "data-parallel: rank 0 of 2 (gloo, fsdp)" in output
    assert output.count("Using external launcher for distributed inference") >= RANKS
