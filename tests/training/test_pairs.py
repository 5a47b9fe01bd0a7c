"""The shared preference-training loop: a seeded pair stream, non-finite values named, checkpoints that resume exactly."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr_factory.training.dpo import DPOConfig, train_dpo
from rlvr_factory.training.pairs import (
    Checkpoint, PairTrainConfig, encode_pairs, pair_batch, ranking_metrics, step_indices, token_budget, train_on_pairs,
)
from tests.conftest import make_tiny_policy
from tests.training.pairs_fixtures import count_optimizer_steps, encoded, toy_pairs


def test_each_epoch_of_the_stream_visits_every_pair_once_in_a_seeded_order():
    seen = [i for step in range(5) for i in step_indices(10, 4, seed=3, step=step)]
    assert sorted(seen[:10]) == list(range(10)) and sorted(seen[10:20]) == list(range(10))
    assert seen[:10] != seen[10:20]  # a fresh shuffle per epoch
    assert step_indices(10, 4, 3, 2) == seen[8:12]  # any step's batch, without replaying the others
    assert step_indices(10, 4, 4, 0) != seen[:4]


def test_pairs_are_encoded_as_chat_turns_ending_in_eos_with_specials_kept_as_text(byte_tokenizer):
    (pair,) = encode_pairs(byte_tokenizer, [toy_pairs(1)[0].__class__("p", "Hi", "ok<|im_end|>", "no")])
    assert pair.chosen_ids[-1] == byte_tokenizer.eos_token_id
    assert byte_tokenizer.eos_token_id not in pair.chosen_ids[:-1]  # the spelled-out token did not end the turn
    ids, attention, mask = pair_batch([pair], byte_tokenizer.pad_token_id)
    assert ids.shape[0] == 2 and mask[0].sum() == len(pair.chosen_ids) and mask[1].sum() == len(pair.rejected_ids)


def test_token_budget_counts_what_the_trainers_feed_the_model(tmp_path, tiny_policy):
    tiny_policy.model.save_pretrained(tmp_path)
    tiny_policy.tokenizer.save_pretrained(tmp_path)
    count, context = token_budget(str(tmp_path))
    pair = encode_pairs(tiny_policy.tokenizer, toy_pairs(1))[0]
    p = toy_pairs(1)[0]
    assert count(p.prompt, p.chosen) == len(pair.prompt_ids) + len(pair.chosen_ids)
    assert context == tiny_policy.model.config.max_position_embeddings


def test_ranking_metrics_per_kind():
    pairs = encoded(make_tiny_policy().tokenizer, 4)
    report = ranking_metrics(pairs, torch.tensor([1.0, 0.0, 2.0, 0.0]), torch.tensor([0.0, 1.0, 1.0, 1.0]))
    assert report["val_accuracy"] == 0.5 and report["val_margin"] == pytest.approx(0.0)
    assert report["val_accuracy/direct_wrong"] == 0.0 and report["val_accuracy/x"] == 1.0


def _dpo(policy, checkpoint=None, steps=6, **train):
    config = DPOConfig(PairTrainConfig(steps=steps, batch_size=4, lr=1e-2, warmup_steps=0, eval_every=0,
                                       checkpoint_every=2, **train), beta=0.5)
    pairs = encoded(policy.tokenizer, 12)
    return train_dpo(policy, pairs, pairs[:4], config, checkpoint)


def test_a_killed_run_resumes_from_its_checkpoint_to_the_same_weights(tmp_path, monkeypatch):
    whole = make_tiny_policy()
    _dpo(whole)
    resumed_policy = make_tiny_policy()
    checkpoint = Checkpoint(tmp_path / "ckpt", AutoModelForCausalLM)
    count_optimizer_steps(monkeypatch, die_at=5)
    with pytest.raises(KeyboardInterrupt):
        _dpo(resumed_policy, checkpoint)
    steps = count_optimizer_steps(monkeypatch)
    fresh = make_tiny_policy()  # a new process: the initial model again, then the checkpoint
    history = _dpo(fresh, checkpoint)
    assert steps["n"] == 2  # steps 4 and 5: the first four came from the checkpoint
    assert [r["step"] for r in history] == list(range(6))
    for (name, a), b in zip(whole.model.state_dict().items(), fresh.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_finished_run_is_not_trained_again_and_another_configuration_starts_afresh(tmp_path, caplog):
    checkpoint = Checkpoint(tmp_path / "ckpt", AutoModelForCausalLM)
    first = make_tiny_policy()
    _dpo(first, checkpoint, steps=2)
    again = make_tiny_policy()
    _dpo(again, checkpoint, steps=2)  # the same run: restored from its last checkpoint, nothing left to train
    assert all(torch.equal(a, b) for a, b in zip(first.model.state_dict().values(), again.model.state_dict().values()))
    other, reference = make_tiny_policy(), make_tiny_policy()
    _dpo(other, checkpoint, steps=2, seed=1)
    _dpo(reference, None, steps=2, seed=1)
    assert "written for another configuration" in caplog.text
    assert all(torch.equal(a, b) for a, b in zip(other.model.state_dict().values(), reference.model.state_dict().values()))


def test_a_non_finite_value_stops_the_run_naming_the_step_and_the_batch():
    policy = make_tiny_policy()
    pairs = encoded(policy.tokenizer, 8)

    steps = iter(range(100))

    def loss_fn(model, batch, indices):
        reward = float("nan") if next(steps) == 2 else 0.0
        return {"reward": torch.tensor([reward]), "loss": model(input_ids=torch.tensor([[5, 6]])).logits.sum() * 0}

    config = PairTrainConfig(steps=5, batch_size=4, warmup_steps=0, eval_every=0)
    with pytest.raises(FloatingPointError, match=r"reward is not finite at step 2 on the batch of pairs \['train-"):
        train_on_pairs(policy, pairs, config, loss_fn, desc="test")


def test_bad_loop_settings_are_refused():
    for kwargs in ({"steps": 0}, {"eval_every": -1}, {"schedule": "exp"}):
        with pytest.raises(ValueError):
            PairTrainConfig(**kwargs)
    with pytest.raises(ValueError, match="no training pairs"):
        train_on_pairs(make_tiny_policy(), [], PairTrainConfig(), lambda *a: {}, desc="x")


@pytest.mark.parametrize("settings,match", [
    ({"lr": float("nan")}, "lr: expected a finite number"),
    ({"lr": float("inf")}, "lr: expected a finite number"),
    ({"lr": 0.0}, "lr must be > 0"),
    ({"max_grad_norm": float("nan")}, "max_grad_norm: expected a finite number"),
    ({"weight_decay": float("-inf")}, "weight_decay: expected a finite number"),
    ({"steps": True}, "steps must be a whole number >= 1"),
    ({"batch_size": 8.0}, "batch_size must be a whole number >= 1"),
    ({"eval_every": float("nan")}, "eval_every must be a whole number >= 0"),
])
def test_non_finite_or_mistyped_loop_settings_are_refused_by_name(settings, match):
    with pytest.raises(ValueError, match=match):
        PairTrainConfig(**settings)


@pytest.mark.parametrize("margin", [float("inf"), float("-inf"), -1.0, True])
def test_a_margin_that_is_not_finite_never_reaches_the_loss(margin):
    from rlvr_factory.training.pairs import EncodedPair

    with pytest.raises(ValueError, match="pair 'p': margin"):
        EncodedPair("p", [1], [2], [3], margin)
    assert EncodedPair("p", [1], [2], [3], float("nan")).kind == ""  # NaN: no margin, read as 0 by the loss
