"""BatchedMetricsHistoryDataset writes what kedro-mlflow's MlflowMetricsHistoryDataset writes (keys, steps,
values), in one `log_batch` per thousand metrics instead of one call each."""

from __future__ import annotations

import mlflow
import pytest
from kedro_mlflow.io.metrics import MlflowMetricsHistoryDataset
from mlflow import MlflowClient

from rlvr_factory.datasets import BatchedMetricsHistoryDataset

ROUND = {"reward_mean": {"value": 0.25, "step": 3}, "pass_rate": {"value": 1.0, "step": 3},
         "curve": [{"value": float(i) / 7, "step": i} for i in range(1500)]}  # past one batch of 1000


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    yield MlflowClient(tracking_uri=uri)
    while mlflow.active_run() is not None:
        mlflow.end_run()


def _history(client: MlflowClient, run_id: str) -> dict:
    run = client.get_run(run_id)
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in run.data.metrics}


def test_a_batched_save_logs_the_same_history_as_kedro_mlflows(store):
    experiment = store.create_experiment("metrics")
    histories = []
    for dataset_class in (MlflowMetricsHistoryDataset, BatchedMetricsHistoryDataset):
        run = store.create_run(experiment)
        dataset = dataset_class(run_id=run.info.run_id, prefix="rl")
        dataset.save(ROUND)
        histories.append(_history(store, run.info.run_id))
        assert dataset.load() == {"rl.reward_mean": {"step": 3, "value": 0.25}, "rl.pass_rate": {"step": 3, "value": 1.0},
                                  "rl.curve": [{"step": i, "value": float(i) / 7} for i in range(1500)]}  # loads back
    assert histories[0] == histories[1]
    assert set(histories[1]) == {"rl.reward_mean", "rl.pass_rate", "rl.curve"} and len(histories[1]["rl.curve"]) == 1500


def test_without_a_run_id_it_logs_into_the_active_run(store):
    with mlflow.start_run() as run:
        BatchedMetricsHistoryDataset(prefix="eval").save({"greedy_accuracy": {"value": 0.5, "step": 0}})
    assert _history(store, run.info.run_id) == {"eval.greedy_accuracy": [(0, 0.5)]}


def test_a_malformed_metric_is_refused_before_anything_is_logged(store):
    run = store.create_run(store.create_experiment("bad"))
    with pytest.raises(Exception, match="Unexpected metric value"):
        BatchedMetricsHistoryDataset(run_id=run.info.run_id).save({"ok": {"value": 1.0, "step": 0}, "bad": []})
    assert _history(store, run.info.run_id) == {}
