"""Bradley-Terry reward models: learn the preference, rank held-out pairs, refuse NaN, load as HF classifiers."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from rlvr_factory.models.reward_model import load_reward_model, reward_model_from_policy, sequence_rewards
from rlvr_factory.models.policy import save_policy
from rlvr_factory.training.pairs import PairTrainConfig, pair_batch
from rlvr_factory.training.reward_model import RewardModelConfig, pair_accuracy, train_reward_model
from tests.conftest import make_tiny_policy
from tests.training.pairs_fixtures import count_optimizer_steps, encoded

CONFIG = RewardModelConfig(PairTrainConfig(steps=40, batch_size=8, lr=3e-3, warmup_steps=2, eval_every=20))


def test_the_reward_model_keeps_the_policy_backbone_and_adds_a_scalar_head():
    policy = make_tiny_policy()
    rm = reward_model_from_policy(policy, seed=0)
    assert isinstance(rm.model, AutoModelForSequenceClassification._model_mapping[type(rm.model.config)])
    assert rm.model.config.num_labels == 1
    assert torch.equal(rm.model.model.embed_tokens.weight, policy.model.model.embed_tokens.weight)
    assert rm.model.model.embed_tokens.weight.data_ptr() != policy.model.model.embed_tokens.weight.data_ptr()


def test_the_reward_is_read_at_each_rows_last_token_whatever_the_padding():
    rm = reward_model_from_policy(make_tiny_policy())
    pairs = encoded(rm.tokenizer, 3)
    ids, attention, _ = pair_batch(pairs, rm.tokenizer.pad_token_id)
    together = sequence_rewards(rm.model, ids, attention)
    alone = [sequence_rewards(rm.model, ids[i : i + 1, : int(attention[i].sum())], attention[i : i + 1, : int(attention[i].sum())])
             for i in range(len(ids))]
    assert together.tolist() == pytest.approx([float(a.detach()) for a in alone], abs=1e-5)


def test_training_learns_the_preference_and_ranks_held_out_pairs():
    rm = reward_model_from_policy(make_tiny_policy())
    train, held_out = encoded(rm.tokenizer, 64), encoded(rm.tokenizer, 32, seed=1, split="validation")
    history = train_reward_model(rm, train, held_out, CONFIG)
    assert history[-1]["val_accuracy"] >= 0.9
    assert "val_accuracy" in history[19] and "val_accuracy" not in history[18]  # every eval_every steps
    assert history[-1]["loss"] < history[0]["loss"]
    assert {"val_accuracy/direct_wrong", "val_accuracy/x", "val_margin"} <= set(history[-1])


def test_dropping_the_highest_losses_keeps_flipped_labels_from_pulling_against_the_rest():
    """A third of the train pairs flipped. Plain Bradley-Terry settles where the flipped pairs' pull
    balances the others' (a small held-out margin); with each batch's highest losses dropped the
    flipped pairs stop pulling, so the clean held-out pairs are ranked as well and far apart."""
    import dataclasses

    tokenizer = make_tiny_policy().tokenizer
    train = [dataclasses.replace(p, chosen_ids=p.rejected_ids, rejected_ids=p.chosen_ids) if i % 3 == 0 else p
             for i, p in enumerate(encoded(tokenizer, 48))]
    held_out = encoded(tokenizer, 32, seed=1, split="validation")
    results = {}
    for drop in (0.0, 0.34):
        rm = reward_model_from_policy(make_tiny_policy())
        results[drop] = train_reward_model(rm, train, held_out, dataclasses.replace(CONFIG, drop_highest_loss=drop))[-1]
    assert results[0.34]["val_accuracy"] >= results[0.0]["val_accuracy"]
    assert results[0.34]["val_margin"] > 2 * results[0.0]["val_margin"], results


@pytest.mark.parametrize("head", ["scalar", "implicit"])
def test_a_reward_model_that_produces_nan_stops_the_run_with_the_step_and_batch(head):
    rm = reward_model_from_policy(make_tiny_policy(), head=head)
    with torch.no_grad():
        (rm.model.score if head == "scalar" else rm.model.policy.lm_head).weight.fill_(float("nan"))
    train = encoded(rm.tokenizer, 16)
    with pytest.raises(FloatingPointError, match=r"chosen_reward is not finite at step 0 on the batch of pairs \['train-"):
        train_reward_model(rm, train, train[:4], CONFIG)
    with pytest.raises(FloatingPointError, match="held-out batch of pairs"):
        pair_accuracy(rm, train[:4])


def test_a_saved_reward_model_loads_as_an_hf_classifier_with_the_same_rewards(tmp_path):
    rm = reward_model_from_policy(make_tiny_policy(), seed=3)
    save_policy(rm, tmp_path / "rm")
    loaded = load_reward_model(str(tmp_path / "rm"), device="cpu")
    pairs = encoded(rm.tokenizer, 4)
    assert pair_accuracy(loaded, pairs) == pair_accuracy(rm, pairs)
    direct = AutoModelForSequenceClassification.from_pretrained(tmp_path / "rm")
    ids, attention, _ = pair_batch(pairs, rm.tokenizer.pad_token_id)
    assert torch.allclose(sequence_rewards(direct, ids, attention), sequence_rewards(rm.model, ids, attention))


def test_a_classifier_with_several_labels_is_not_a_reward_model(tmp_path):
    policy = make_tiny_policy()
    policy.model.config.num_labels = 3
    model = AutoModelForSequenceClassification.from_config(policy.model.config)
    model.save_pretrained(tmp_path)
    policy.tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="3 labels"):
        load_reward_model(str(tmp_path), device="cpu")


# --- implicit reward models: r = beta log(pi / pi_ref) ----------------------------------------------


def _logps(model, ids, attention, mask):
    from rlvr_factory.rl.preference import sequence_logps
    from rlvr_factory.training.lm import token_logprobs

    return sequence_logps(token_logprobs(model, ids, attention, positions=mask)[0], mask)


def test_an_implicit_reward_model_starts_at_zero_and_reads_beta_times_the_log_ratio():
    policy = make_tiny_policy()
    rm = reward_model_from_policy(policy, head="implicit", beta=0.5)
    pairs = encoded(rm.tokenizer, 3)
    ids, attention, mask = pair_batch(pairs, rm.tokenizer.pad_token_id)
    assert sequence_rewards(rm.model, ids, attention, mask).abs().max() < 1e-5  # pi == pi_ref as training starts
    with torch.no_grad():
        rm.model.policy.lm_head.weight.mul_(1.5)
    expected = 0.5 * (_logps(rm.model.policy, ids, attention, mask) - _logps(policy.model, ids, attention, mask))
    got = sequence_rewards(rm.model, ids, attention, mask)
    assert got.abs().max() > 0.01
    assert torch.allclose(got, expected, atol=1e-5)
    assert not any(p.requires_grad for p in rm.model.reference.parameters())
    assert rm.model.policy.lm_head.weight.data_ptr() != policy.model.lm_head.weight.data_ptr()  # the policy is untouched
    rm.model.train()
    assert not rm.model.reference.training and rm.model.policy.training
    with pytest.raises(ValueError, match="completion mask"):
        sequence_rewards(rm.model, ids, attention)


def test_an_implicit_reward_model_learns_the_preference_and_only_its_policy_moves():
    rm = reward_model_from_policy(make_tiny_policy(), head="implicit", beta=0.1)
    reference = {k: v.clone() for k, v in rm.model.reference.state_dict().items()}
    train, held_out = encoded(rm.tokenizer, 64), encoded(rm.tokenizer, 32, seed=1, split="validation")
    history = train_reward_model(rm, train, held_out, CONFIG)
    assert history[-1]["val_accuracy"] >= 0.9
    assert history[-1]["loss"] < history[0]["loss"]
    assert all(torch.equal(v, rm.model.reference.state_dict()[k]) for k, v in reference.items())


def test_a_saved_implicit_reward_model_loads_with_its_reference_and_the_same_rewards(tmp_path):
    from rlvr_factory.models.reward_model import ImplicitRewardModel, implicit_record

    rm = reward_model_from_policy(make_tiny_policy(), head="implicit", beta=0.2)
    with torch.no_grad():
        rm.model.policy.lm_head.weight.mul_(1.3)
    rm.model.config.reward_stats = {"mean": 0.1, "std": 0.5}
    save_policy(rm, tmp_path / "rm")
    assert (tmp_path / "rm" / "reference" / "config.json").exists()
    assert implicit_record(tmp_path / "rm") == {"beta": 0.2, "reference": "reference"}
    loaded = load_reward_model(str(tmp_path / "rm"), device="cpu")
    assert isinstance(loaded.model, ImplicitRewardModel) and loaded.model.beta == 0.2
    assert loaded.model.config.reward_stats == {"mean": 0.1, "std": 0.5}
    pairs = encoded(rm.tokenizer, 4)
    assert pair_accuracy(loaded, pairs) == pytest.approx(pair_accuracy(rm, pairs))
    import shutil

    shutil.rmtree(tmp_path / "rm" / "reference")
    with pytest.raises(FileNotFoundError, match="lacks its reference model"):
        load_reward_model(str(tmp_path / "rm"), device="cpu")


def test_a_killed_implicit_reward_model_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    """Killed after its first checkpoint, a fresh process resumes on the checkpoint's policy, reference
    and optimizer moments and ends on the uninterrupted run's weights."""
    import dataclasses

    from rlvr_factory.models.reward_model import ImplicitRewardModel
    from rlvr_factory.training.pairs import Checkpoint

    config = dataclasses.replace(CONFIG, train=dataclasses.replace(CONFIG.train, steps=6, eval_every=0,
                                                                     checkpoint_every=2))
    train = encoded(make_tiny_policy().tokenizer, 24)
    whole = reward_model_from_policy(make_tiny_policy(), head="implicit")
    train_reward_model(whole, train, train[:4], config)
    checkpoint = Checkpoint(tmp_path / "ckpt", ImplicitRewardModel)
    count_optimizer_steps(monkeypatch, die_at=5)
    with pytest.raises(KeyboardInterrupt):
        train_reward_model(reward_model_from_policy(make_tiny_policy(), head="implicit"), train, train[:4], config,
                           checkpoint)
    assert (tmp_path / "ckpt" / "reference" / "config.json").exists()
    steps_after = count_optimizer_steps(monkeypatch)
    fresh = reward_model_from_policy(make_tiny_policy(), head="implicit")
    history = train_reward_model(fresh, train, train[:4], config, checkpoint)
    assert steps_after["n"] == 2  # steps 4 and 5: the first four came from the checkpoint
    assert [r["step"] for r in history] == list(range(6))
    for (name, a), b in zip(whole.model.state_dict().items(), fresh.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_an_unknown_head_is_refused_by_name():
    with pytest.raises(ValueError, match=r"reward_model.head must be one of \('scalar', 'implicit'\)"):
        reward_model_from_policy(make_tiny_policy(), head="value")
    from rlvr_factory.models.reward_model import ImplicitRewardModel

    policy = make_tiny_policy()
    with pytest.raises(ValueError, match="beta > 0"):
        ImplicitRewardModel(policy.model, policy.model, beta=0.0)


@pytest.mark.parametrize("params,match", [
    ({"use_margin": "false"}, "reward_model.use_margin: expected true/false"),
    ({"drop_highest_loss": float("nan")}, "drop_highest_loss: must be a finite number"),
    ({"drop_highest_loss": 1.0}, "drop_highest_loss must be >= 0 and < 1"),
    ({"eval_batch_size": 0}, "eval_batch_size must be a whole number >= 1"),
    ({"train": {"lr": float("nan")}}, "reward_model.train.lr: must be a finite number"),
])
def test_non_finite_or_mistyped_reward_model_settings_are_refused_by_name(params, match):
    with pytest.raises(ValueError, match=match):
        RewardModelConfig.from_params(params)


def test_an_implicit_reward_needs_a_finite_beta():
    from rlvr_factory.models.reward_model import ImplicitRewardModel

    policy = make_tiny_policy()
    for beta in (float("inf"), float("nan"), True):
        with pytest.raises(ValueError, match="finite beta > 0"):
            ImplicitRewardModel(policy.model, policy.model, beta=beta)
