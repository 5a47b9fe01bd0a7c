"""`kedro run --pipeline=reward_model`, `--pipeline=preference` and RL on the learned reward, at a tiny size."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
from mlflow import MlflowClient
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from rlvr_factory.preferences import PAIR_COLUMNS, PAIR_QUARANTINE_COLUMNS
from tests.pipelines.conftest import TINY_PARAMS, make_project, round_table, run_pipeline, tracking_uri

pytestmark = pytest.mark.slow


def _runs(project):
    client = MlflowClient(tracking_uri=tracking_uri(project))
    experiment = client.get_experiment_by_name("rlvr_factory")
    return client, sorted(client.search_runs([experiment.experiment_id]), key=lambda r: r.info.start_time)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """One scratch project: the reward model, then DPO, then two RL rounds on the learned reward."""
    root = make_project(tmp_path_factory.mktemp("preferences"))
    run_pipeline(root, TINY_PARAMS, pipeline="reward_model")
    run_pipeline(root, TINY_PARAMS, pipeline="preference")
    run_pipeline(root, TINY_PARAMS, env="learned_reward")
    return root


def test_curation_writes_embedded_pairs_under_the_contract(project):
    pairs = pd.read_parquet(project / "data/03_primary/preference_pairs.parquet")
    assert list(pairs.columns) == PAIR_COLUMNS
    splits = TINY_PARAMS["domain"]["splits"]
    assert pairs["split"].value_counts().to_dict() == {"train": splits["train"], "validation": splits["validation"]}
    tasks = pd.read_parquet(project / "data/03_primary/tasks.parquet")
    assert not set(pairs[pairs["split"] == "train"]["prompt"]) & set(tasks[tasks["split"] != "train"]["prompt"])
    quarantine = pd.read_parquet(project / "data/02_intermediate/preference_quarantine.parquet")
    assert list(quarantine.columns) == PAIR_QUARANTINE_COLUMNS


def test_the_reward_model_is_an_implicit_reward_with_its_held_out_accuracy_in_mlflow(project):
    """The default head: pi and pi_ref saved as causal-LM directories, the reward read as beta log(pi / pi_ref)."""
    from rlvr_factory.models.reward_model import ImplicitRewardModel, load_reward_model

    path = project / "data/06_models/reward_model"
    AutoModelForCausalLM.from_pretrained(path / "reference")
    loaded = load_reward_model(str(path), device="cpu")
    assert isinstance(loaded.model, ImplicitRewardModel) and loaded.model.beta == 0.1
    assert set(loaded.model.config.reward_stats) == {"mean", "std"}
    report = json.loads((project / "data/08_reporting/reward_model.json").read_text())
    assert 0.0 <= report["val_accuracy"] <= 1.0 and report["validation_pairs"] == TINY_PARAMS["domain"]["splits"]["validation"]
    assert {"val_accuracy/direct", "val_accuracy/slip"} <= set(report) and report["head"] == "implicit"
    client, runs = _runs(project)
    rm_run = runs[0]
    steps = TINY_PARAMS["reward_model"]["train"]
    assert [m.step for m in client.get_metric_history(rm_run.info.run_id, "reward_model.val_accuracy")] == [9, 19, 29]
    assert len(client.get_metric_history(rm_run.info.run_id, "reward_model.loss")) == steps["steps"]
    assert rm_run.data.metrics["preferences.pairs"] == len(pd.read_parquet(project / "data/03_primary/preference_pairs.parquet"))
    logged = [m.name for m in client.search_logged_models([rm_run.info.experiment_id]) if m.source_run_id == rm_run.info.run_id]
    assert sorted(logged) == ["reward_model", "reward_model_reference"]


def test_dpo_writes_the_policy_and_compares_it_with_sft_on_the_test_split(project):
    AutoModelForCausalLM.from_pretrained(project / "data/06_models/dpo_policy")
    report = json.loads((project / "data/08_reporting/preference.json").read_text())
    assert report["dpo_minus_sft_greedy_accuracy"] == pytest.approx(
        report["dpo"]["greedy_accuracy"] - report["sft"]["greedy_accuracy"])
    assert report["pairs"]["loss"] == "dpo" and "val_margin" in report["pairs"] and "val_accuracy" in report["pairs"]
    client, runs = _runs(project)
    dpo_run = runs[1]
    assert [m.step for m in client.get_metric_history(dpo_run.info.run_id, "dpo.val_margin")] == [4, 9]
    assert "preference.dpo.greedy_accuracy" in dpo_run.data.metrics
    assert (project / "data/06_models/checkpoints/dpo/pair_training.json").exists()


def test_rl_on_the_learned_reward_logs_proxy_and_gold_every_round_and_plots_them(project):
    scored = round_table(project / "data/envs/learned_reward/07_model_output/scored/round_000.parquet")
    breakdown = pd.DataFrame(list(scored["reward_breakdown"]))
    assert {"rm", "verifier", "weight.rm", "weight.verifier", "gold_correct"} <= set(breakdown.columns)
    assert (breakdown["weight.verifier"] == 0.0).all()
    assert scored["reward"].tolist() == pytest.approx(breakdown["rm"].tolist())
    assert scored["correct"].tolist() == breakdown["gold_correct"].astype(bool).tolist()
    history = json.loads((project / "data/envs/learned_reward/08_reporting/round_history.json").read_text())
    assert all({"proxy_reward_mean", "gold_accuracy", "gold_reward_mean"} <= set(r) for r in history)
    curve = pd.read_csv(project / "data/envs/learned_reward/08_reporting/plots/overoptimisation.csv")
    assert curve["round"].tolist() == [0, 1]
    assert curve["proxy_reward_mean"].tolist() == pytest.approx([r["proxy_reward_mean"] for r in history], rel=1e-5)
    summary = json.loads((project / "data/envs/learned_reward/08_reporting/overoptimisation.json").read_text())
    assert summary["learned_reward"] == 1 and summary["rounds"] == 2 and summary["verdict"]
    assert (project / "data/envs/learned_reward/08_reporting/plots/overoptimisation.png").stat().st_size > 10_000
    client, runs = _runs(project)
    assert [m.step for m in client.get_metric_history(runs[2].info.run_id, "rl.proxy_reward_mean")] == [0, 1]


def test_a_scalar_head_reward_model_is_an_hf_classifier(project):
    params = copy.deepcopy(TINY_PARAMS)
    params["reward_model"] = {**params["reward_model"], "head": "scalar"}
    run_pipeline(project, params, pipeline="reward_model")
    model = AutoModelForSequenceClassification.from_pretrained(project / "data/06_models/reward_model")
    assert model.config.num_labels == 1 and set(model.config.reward_stats) == {"mean", "std"}
    assert not (project / "data/06_models/reward_model/reference").exists()
    assert json.loads((project / "data/08_reporting/reward_model.json").read_text())["head"] == "scalar"
    client, runs = _runs(project)
    logged = [m.name for m in client.search_logged_models([runs[-1].info.experiment_id])
              if m.source_run_id == runs[-1].info.run_id]
    assert logged == ["reward_model"]


def test_bad_pairs_from_a_file_go_to_quarantine_with_the_reason(project, tmp_path):
    good = {"prompt": "Compute 1+1", "chosen": "1+1=2\n\\boxed{2}", "rejected": "\\boxed{3}"}
    rows = [good, {**good, "rejected": good["chosen"]}, {**good, "chosen": ""}, {**good, "chosen": "7" * 600},
            {"prompt": "Compute 2+2", "chosen": [{"role": "assistant", "content": "4"}],
             "rejected": [{"role": "assistant", "content": "5"}]}]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    params = copy.deepcopy(TINY_PARAMS)
    params["preferences"] = {"sources": {"train": str(path)}, "validation_from_train": 1}
    run_pipeline(project, params, pipeline="preference_data")
    pairs = pd.read_parquet(project / "data/03_primary/preference_pairs.parquet")
    assert sorted(pairs["prompt"]) == ["Compute 1+1", "Compute 2+2"]
    quarantine = pd.read_parquet(project / "data/02_intermediate/preference_quarantine.parquet")
    reasons = dict(zip(quarantine["pair_id"], quarantine["reason"]))
    assert reasons["pairs-train-00001"].startswith("chosen and rejected are identical")
    assert reasons["pairs-train-00002"] == "chosen: empty"
    assert "longer than the model's context of 256" in reasons["pairs-train-00003"]
    assert "is not JSON" in reasons["pairs-train-00005"]
