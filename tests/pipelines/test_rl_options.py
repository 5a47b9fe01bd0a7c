"""The RL options of `parameters_rlvr.yml`, all switched on in one tiny `kedro run`."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import torch
from mlflow import MlflowClient
from transformers import AutoModelForCausalLM

from tests.pipelines.conftest import TINY_PARAMS, make_project, round_table, run_pipeline, tracking_uri

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]

ALL_ON = {
    "model": {"lora": {"enabled": True, "r": 4, "target_modules": ["q_proj", "v_proj"]}},
    "rl": {
        "dynamic_sampling": {"enabled": True, "max_extra_draws": 2, "min_draw": 2},
        "curriculum": {"enabled": True, "band": [0.1, 0.9], "band_fraction": 0.5,
                       "difficulty_weights": {1: 1, 2: 1, 3: 0, 4: 0}},
        "update": {"micro_batch_size": 3, "kl_coef": 0.05, "kl_placement": "reward", "kl_kind": "k1",
                   "entropy_coef": 0.05, "mask_truncated": True, "overlong_cache_length": 10, "lr": 5e-3},
    },
}


def merged(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) and value else value
    return out


@pytest.fixture(scope="module")
def options_run(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("options"))
    run_pipeline(project, merged(TINY_PARAMS, ALL_ON), pipeline="rlvr")
    return project


def test_every_round_tracks_pass_rates_and_reports_the_options(options_run):
    history = json.loads((options_run / "data/08_reporting/round_history.json").read_text())
    assert [r["round"] for r in history] == [0, 1]
    for r in history:
        assert r["dynamic_sampling_draws"] >= 1
        assert r["dynamic_sampling_prompts_drawn"] >= TINY_PARAMS["rl"]["prompts_per_round"]
        assert r["entropy"] > 0
        assert r["tracked_tasks"] > 0
        for key in ("overlong_penalty_mean", "kl_reward_penalty_mean", "masked_truncated", "zero_variance_groups",
                    "arithmetic.reward_mean", "arithmetic.pass_rate", "arithmetic.completion_tokens_mean"):
            assert key in r, key
    rates = pd.read_parquet(options_run / "data/07_model_output/pass_rates/round_001.parquet")
    assert rates["pass_rate"].between(0, 1).all()
    assert len(rates) >= len(pd.read_parquet(options_run / "data/07_model_output/pass_rates/round_000.parquet"))


def test_rollouts_carry_the_domain_and_follow_the_difficulty_mix(options_run):
    tasks = pd.read_parquet(options_run / "data/05_model_input/train_tasks.parquet").set_index("task_id")
    for k in (0, 1):
        rollouts = round_table(options_run / f"data/07_model_output/rollouts/round_{k:03d}.parquet")
        assert set(rollouts["domain"]) == {"arithmetic"}
        # levels 3 and 4 have weight 0: with 50 prompts of each other level, they are never reached
        assert set(tasks.loc[rollouts["task_id"].unique(), "difficulty"]) <= {1, 2}


def test_the_scores_dynamic_sampling_computed_are_kept_in_the_batch_not_judged_again(options_run):
    client = MlflowClient(tracking_uri=tracking_uri(options_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    for k in (0, 1):
        rollouts = round_table(options_run / f"data/07_model_output/rollouts/round_{k:03d}.parquet")
        scored = round_table(options_run / f"data/07_model_output/scored/round_{k:03d}.parquet")
        assert rollouts["verdict"].notna().all()  # every kept group was scored to decide whether to keep it
        assert scored["reward"].tolist() == [v["reward"] for v in rollouts["verdict"]]
    for counter in ("quick", "cached", "dispatched"):  # the verify node sent nothing to the pool
        assert [m.value for m in client.get_metric_history(run.info.run_id, f"rl.verify_{counter}")] == [0.0, 0.0]


def test_per_domain_metrics_reach_mlflow(options_run):
    client = MlflowClient(tracking_uri=tracking_uri(options_run))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    history = client.get_metric_history(run.info.run_id, "rl.arithmetic.pass_rate")
    assert sorted(m.step for m in history) == [0, 1]
    assert "rl.dynamic_sampling_groups_dropped" in run.data.metrics


def test_a_lora_run_changes_only_the_adapted_layers_and_saves_a_merged_model(options_run):
    sft = AutoModelForCausalLM.from_pretrained(options_run / "data/06_models/sft_policy").state_dict()
    rl = AutoModelForCausalLM.from_pretrained(options_run / "data/06_models/rl_policy").state_dict()
    assert set(rl) == set(sft)  # an ordinary model: adapters merged, no lora_ weights
    changed = {k for k in rl if not torch.equal(rl[k], sft[k])}
    assert changed and all(k.endswith(("q_proj.weight", "v_proj.weight")) for k in changed)
