"""Reward-model statistics (the held-out mean and std a reward is standardised by) are refused at load when they are
not finite numbers or give a non-positive std: the error names the file and the key."""

from __future__ import annotations

import json
import shutil

import pytest

from rlvr_factory.models.policy import save_policy
from rlvr_factory.models.reward_model import load_reward_model, reward_model_from_policy, reward_stats
from rlvr_factory.verifiers.reward_model import RewardModelVerifier, reward_model_gold
from tests.conftest import make_tiny_policy

PLACEHOLDER = "__STATS__"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    path = tmp_path_factory.mktemp("rm") / "reward_model"
    rm = reward_model_from_policy(make_tiny_policy(seed=1), seed=1)
    rm.model.config.reward_stats = {"mean": 0.25, "std": 2.0}
    save_policy(rm, path)
    return path


def with_stats(saved, tmp_path, stats_json: str) -> str:
    """A copy of the saved reward model whose config.json holds `stats_json` (raw JSON: NaN and Infinity allowed)."""
    path = tmp_path / "copy"
    shutil.copytree(saved, path)
    config = json.loads((path / "config.json").read_text())
    config["reward_stats"] = PLACEHOLDER
    (path / "config.json").write_text(json.dumps(config).replace(f'"{PLACEHOLDER}"', stats_json))
    return str(path)


@pytest.mark.parametrize("stats,key", [
    ('{"mean": NaN, "std": 1.0}', "reward_stats.mean: expected a finite number"),
    ('{"mean": -Infinity, "std": 1.0}', "reward_stats.mean: expected a finite number"),
    ('{"mean": 0.0, "std": Infinity}', "reward_stats.std: expected a finite number"),
    ('{"mean": 0.0, "std": NaN}', "reward_stats.std: expected a finite number"),
    ('{"mean": 0.0, "std": 0.0}', "reward_stats.std is 0.0"),
    ('{"mean": 0.0, "std": -2.0}', "reward_stats.std is -2.0"),  # would flip every reward
    ('{"mean": "0.1", "std": 1.0}', "reward_stats.mean: expected a finite number"),
    ('{"mean": 0.0, "std": true}', "reward_stats.std: expected a finite number"),
    ('{"mean": 0.0}', "reward_stats must be"),
    ('[0.0, 1.0]', "reward_stats must be"),
])
def test_statistics_that_are_not_finite_or_give_no_positive_spread_are_refused_at_load(saved, tmp_path, stats, key):
    path = with_stats(saved, tmp_path, stats)
    with pytest.raises(ValueError, match=key) as refused:
        load_reward_model(path, device="cpu")
    assert str(refused.value).startswith(f"{path}/config.json: ")


@pytest.mark.parametrize("stats", ['{"mean": 0.0, "std": 0.0}', '{"mean": NaN, "std": 1.0}', '{"mean": 0, "std": -1}'])
def test_the_reward_model_verifier_refuses_them_before_scoring_anything(saved, tmp_path, stats):
    verifier = RewardModelVerifier(with_stats(saved, tmp_path, stats))
    with pytest.raises(ValueError, match="config.json: reward_stats"):
        verifier.score("\\boxed{3}", reward_model_gold("Compute 1+2"))


def test_sound_statistics_load_and_none_at_all_is_no_standardisation(saved, tmp_path):
    assert load_reward_model(str(saved), device="cpu").model.config.reward_stats == {"mean": 0.25, "std": 2.0}
    raw = RewardModelVerifier(with_stats(saved, tmp_path, "null"))
    (score,) = raw.score_batch([("\\boxed{3}", reward_model_gold("Compute 1+2"))])
    assert score.status == "ok" and score.reward == score.breakdown["rm_raw"]


@pytest.mark.parametrize("mean,std,match", [
    (0.1, 0.0, "std is 0.0"), (float("nan"), 1.0, "mean: expected a finite number"),
    (0.1, float("nan"), "std: expected a finite number"),
])
def test_a_trained_model_whose_held_out_rewards_have_no_spread_is_refused_before_saving(mean, std, match):
    with pytest.raises(ValueError, match=match):
        reward_stats(mean, std, "the trained reward model's held-out rewards")
