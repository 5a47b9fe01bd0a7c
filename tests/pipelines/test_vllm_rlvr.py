"""The whole tiny `rlvr` run with `rollout.engine=vllm`: one engine per run, weights pushed every round, reproducible.

Runs in the vLLM venv (scripts/test_vllm.sh); skips without vLLM unless RLVR_REQUIRE_VLLM is set.
"""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from tests.conftest import skip_without_vllm
from tests.pipelines.conftest import TINY_PARAMS, make_project, round_table, run_pipeline, tracking_uri
from tests.pipelines.test_rl_options import merged

skip_without_vllm()

from rlvr_factory.rollout import vllm_engine  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.filterwarnings("ignore::FutureWarning")]

ON_VLLM = merged(TINY_PARAMS, {
    # 2 heads of 32: the CPU build's attention kernels serve head sizes from 32 up
    "model": {"embedded": {"architecture": {"hidden_size": 64, "intermediate_size": 128}}},
    "rollout": {"engine": "vllm"},
})


@pytest.fixture(scope="module")
def vllm_runs(tmp_path_factory):
    """Two runs of the same configuration, each with a freshly started engine."""
    projects = []
    for name in ("first", "second"):
        vllm_engine.close_shared_engines()
        project = make_project(tmp_path_factory.mktemp(name))
        run_pipeline(project, ON_VLLM)
        projects.append((project, list(vllm_engine._RUNNING.values())))
    vllm_engine.close_shared_engines()
    return projects


def test_one_engine_serves_the_run_and_gets_the_weights_after_every_update(vllm_runs):
    project, engines = vllm_runs[0]
    assert len(engines) == 1
    rounds = TINY_PARAMS["rl"]["rounds"]
    assert len(engines[0].sync_seconds) >= rounds
    client = MlflowClient(tracking_uri(project))
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id)
    syncs = client.get_metric_history(run.info.run_id, "rl.engine_weight_sync_seconds")
    assert [m.step for m in syncs] == list(range(rounds))
    assert all(m.value > 0 for m in syncs)


def test_the_rollouts_carry_vllms_logprobs_and_the_trainer_agrees_with_them(vllm_runs):
    project, _ = vllm_runs[0]
    rollouts = round_table(project / "data/07_model_output/rollouts/round_000.parquet")
    assert all(len(lp) == len(ids) for lp, ids in zip(rollouts["logprobs"], rollouts["completion_ids"]))
    client = MlflowClient(tracking_uri(project))
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id)
    bounds = {"abs_mean": 1e-4, "abs_max": 1e-3, "kl": 1e-6}
    for name, bound in bounds.items():
        history = client.get_metric_history(run.info.run_id, f"rl.engine_logprob_mismatch_{name}")
        assert [m.step for m in history] == list(range(TINY_PARAMS["rl"]["rounds"]))
        assert all(abs(m.value) < bound for m in history), name


def test_two_runs_write_byte_identical_metrics(vllm_runs):
    (first, _), (second, _) = vllm_runs
    for path in ("data/08_reporting/metrics.json", "data/08_reporting/round_history.json"):
        assert (first / path).read_bytes() == (second / path).read_bytes(), path
