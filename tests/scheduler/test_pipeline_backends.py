"""Acceptance: the `rlvr` pipeline's verify stage runs through the scheduler, on the local backend
and, with `verify.scheduler.backend: ray`, on Ray, end to end on the embedded default."""

from __future__ import annotations

import copy
import json

import pytest
from mlflow import MlflowClient

from rlvr_factory import verification
from tests.pipelines.conftest import TINY_PARAMS, make_project, round_table, run_pipeline, tracking_uri

pytestmark = pytest.mark.slow

SCHEDULER_METRICS = ("completed_per_second", "retries", "timeouts", "infra_failures", "peak_queue_depth",
                     "peak_in_flight", "utilisation", "worker_0_utilisation")


def test_the_embedded_default_runs_end_to_end_with_the_ray_backend(ray_cluster, tmp_path):
    project = make_project(tmp_path)
    params = copy.deepcopy(TINY_PARAMS)
    params["verify"] = {"scheduler": {"backend": "ray"}}
    verification.close_pools()  # earlier runs' pools in this process
    try:
        run_pipeline(project, params)
        pools = list(verification._pools.values())
        assert [p.scheduler.backend.name for p in pools] == ["ray"]
        assert pools[0].stats["dispatched"] > 0  # symbolic checks ran on Ray actors
    finally:
        verification.close_pools()  # the pools of this run hold Ray actors

    rounds = TINY_PARAMS["rl"]["rounds"]
    for k in range(rounds):
        scored = round_table(project / f"data/07_model_output/scored/round_{k:03d}.parquet")
        assert len(scored) == TINY_PARAMS["rl"]["prompts_per_round"] * TINY_PARAMS["rl"]["samples_per_prompt"]
        assert set(scored["status"]) <= {"ok", "timeout", "error", "infra_error"}
    assert json.loads((project / "data/08_reporting/metrics.json").read_text())["rl"]["num_tasks"] > 0

    # per-round scheduler metrics reach MLflow with step = round, not the stats files on disk
    client = MlflowClient(tracking_uri=tracking_uri(project))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    for name in SCHEDULER_METRICS:
        history = client.get_metric_history(run.info.run_id, f"rl.verify_scheduler_{name}")
        assert sorted(m.step for m in history) == list(range(rounds)), name

    def per_round(name: str) -> list[float]:
        return [m.value for m in sorted(client.get_metric_history(run.info.run_id, f"rl.{name}"), key=lambda m: m.step)]

    assert sum(per_round("verify_scheduler_submitted")) == sum(per_round("verify_dispatched"))
    assert per_round("verify_scheduler_completed") == per_round("verify_scheduler_submitted")
    history_file = json.loads((project / "data/08_reporting/round_history.json").read_text())
    stats_files = [json.loads((project / f"data/08_reporting/rounds/round_{k:03d}.json").read_text()) for k in range(rounds)]
    assert not any(k.startswith("verify_") for r in history_file + stats_files for k in r)
