"""DPO / IPO training: the held-out margin grows against the frozen starting policy, with LoRA too."""

from __future__ import annotations

import copy

import pytest
import torch

from rlvr_factory.models.lora import LoraSettings, is_lora, with_lora
from rlvr_factory.models.policy import Policy
from rlvr_factory.training.dpo import DPOConfig, pair_logps, preference_metrics, reference_logps, train_dpo
from rlvr_factory.training.pairs import PairTrainConfig
from tests.conftest import make_tiny_policy
from tests.training.pairs_fixtures import encoded

LOOP = PairTrainConfig(steps=30, batch_size=8, lr=5e-3, warmup_steps=2, eval_every=10)


@pytest.mark.parametrize("loss,beta,smoothing", [("dpo", 0.5, 0.0), ("dpo", 0.5, 0.1), ("ipo", 0.5, 0.0)])
def test_training_widens_the_held_out_margin_from_zero(loss, beta, smoothing):
    policy = make_tiny_policy()
    train, held_out = encoded(policy.tokenizer, 48), encoded(policy.tokenizer, 16, seed=1, split="validation")
    config = DPOConfig(LOOP, loss=loss, beta=beta, label_smoothing=smoothing)
    reference = reference_logps(policy.model, held_out, policy.tokenizer.pad_token_id, config.average)
    start = preference_metrics(policy, held_out, reference, config)
    assert start["val_margin"] == pytest.approx(0.0, abs=1e-5)  # the policy is its own reference at step 0
    history = train_dpo(policy, train, held_out, config)
    assert history[-1]["val_margin"] > 0.3 and history[-1]["val_accuracy"] >= 0.9
    assert history[-1]["loss"] < history[0]["loss"]
    if loss == "ipo":  # IPO regresses h to 1 / (2 tau): the implicit-reward margin beta * h settles at 0.5
        assert history[-1]["val_margin"] == pytest.approx(0.5, abs=0.1)


def test_the_reference_is_the_starting_policy_computed_once():
    policy = make_tiny_policy()
    frozen = copy.deepcopy(policy.model)
    pairs = encoded(policy.tokenizer, 8)
    config = DPOConfig(PairTrainConfig(steps=5, batch_size=4, lr=1e-2, warmup_steps=0, eval_every=0))
    before = reference_logps(policy.model, pairs, policy.tokenizer.pad_token_id, False)
    with torch.inference_mode():
        chosen, rejected = pair_logps(frozen, pairs, policy.tokenizer.pad_token_id, False)
    assert torch.allclose(before, torch.stack([chosen, rejected], 1))
    train_dpo(policy, pairs, pairs, config)
    after = preference_metrics(policy, pairs, before, config)
    expected_chosen = config.beta * (reference_logps(policy.model, pairs, 0, False)[:, 0] - before[:, 0]).mean()
    assert after["val_chosen_reward"] == pytest.approx(float(expected_chosen), abs=1e-5)


def test_with_lora_only_the_adapters_train():
    base = make_tiny_policy()
    lora = with_lora(base.model, LoraSettings(enabled=True, r=4, alpha=8))
    policy = Policy(lora, base.tokenizer)
    frozen = {k: v.clone() for k, v in lora.state_dict().items() if "lora_" not in k}
    pairs = encoded(policy.tokenizer, 16)
    history = train_dpo(policy, pairs, pairs[:8], DPOConfig(LOOP, beta=0.5))
    assert is_lora(policy.model) and history[-1]["val_margin"] > 0
    assert all(torch.equal(frozen[k], v) for k, v in lora.state_dict().items() if k in frozen)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="must be one of"):
        DPOConfig(loss="kto")
    with pytest.raises(ValueError, match="dpo loss only"):
        DPOConfig(loss="ipo", label_smoothing=0.1)


@pytest.mark.parametrize("settings,match", [
    ({"beta": float("nan")}, "beta: expected a finite number"),
    ({"beta": float("inf")}, "beta: expected a finite number"),
    ({"beta": 0.0}, "beta must be > 0"),
    ({"label_smoothing": float("nan")}, "label_smoothing: expected a finite number"),
    ({"label_smoothing": 0.5}, "label_smoothing must be >= 0 and < 0.5"),
    ({"eval_batch_size": True}, "eval_batch_size must be a whole number"),
])
def test_non_finite_or_out_of_range_loss_settings_are_refused_by_name(settings, match):
    with pytest.raises(ValueError, match=match):
        DPOConfig(**settings)
