"""One RL round: group-relative advantages and PPO-clipped updates on a tiny model."""

import copy

import pytest
import torch

from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.training.lm import join_prompt_completion, token_logprobs
from tests.conftest import make_tiny_policy

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True:UserWarning")


def chat_prompt(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)["input_ids"]


def answer(tokenizer, text: str) -> list[int]:
    return tokenizer(text)["input_ids"] + [tokenizer.eos_token_id]


def completion_logprob(policy, prompt: list[int], completion: list[int]) -> float:
    ids, attention, mask = join_prompt_completion([prompt], [completion], policy.tokenizer.pad_token_id)
    with torch.no_grad():
        logp, _ = token_logprobs(policy.model, ids, attention)
    return float((logp * mask).sum())


@pytest.fixture
def contrast(tiny_policy):
    """One prompt, a rewarded completion and an unrewarded one."""
    tokenizer = tiny_policy.tokenizer
    prompt = chat_prompt(tokenizer, "Compute 2+2")
    good, bad = answer(tokenizer, "4"), answer(tokenizer, "5")
    samples = [Sample("task-0", prompt, good, 1.0), Sample("task-0", prompt, bad, 0.0)]
    return prompt, good, bad, samples


def test_updates_raise_the_rewarded_completion_and_lower_the_other(tiny_policy, contrast):
    prompt, good, bad, samples = contrast
    good_before = completion_logprob(tiny_policy, prompt, good)
    bad_before = completion_logprob(tiny_policy, prompt, bad)
    for _ in range(3):
        rl_update(tiny_policy, samples, UpdateConfig(lr=1e-3))
    assert completion_logprob(tiny_policy, prompt, good) > good_before + 0.1
    assert completion_logprob(tiny_policy, prompt, bad) < bad_before - 0.1


def test_each_round_increments_the_version(tiny_policy, contrast):
    samples = contrast[3]
    rl_update(tiny_policy, samples, UpdateConfig())
    assert tiny_policy.version == 1
    rl_update(tiny_policy, samples, UpdateConfig())
    assert tiny_policy.version == 2


def test_optimizer_moments_are_kept_and_resumed_across_rounds(tiny_policy, contrast):
    samples = contrast[3]
    assert tiny_policy.optimizer_state is None
    rl_update(tiny_policy, samples, UpdateConfig(minibatch_size=2))
    state = tiny_policy.optimizer_state
    assert state is not None and state["state"]
    assert all(float(s["step"]) == 1 for s in state["state"].values())
    rl_update(tiny_policy, samples, UpdateConfig(minibatch_size=2, lr=5e-4))
    state = tiny_policy.optimizer_state
    assert all(float(s["step"]) == 2 for s in state["state"].values())
    assert all(group["lr"] == 5e-4 for group in state["param_groups"])


def test_stats_report_the_steps_and_the_advantage_scale(tiny_policy, contrast):
    prompt, good, bad, _ = contrast
    samples = [Sample("a", prompt, good, 1.0), Sample("a", prompt, bad, 0.0)] * 2 + [Sample("b", prompt, good, 1.0)]
    stats = rl_update(tiny_policy, samples, UpdateConfig(minibatch_size=2, epochs=2))
    assert stats["optimizer_steps"] == 6.0  # ceil(5 / 2) minibatches, twice
    # group "a": rewards 1,0,1,0 -> |A| = 0.5 / sqrt(1/3); group "b" has one sample -> 0
    assert stats["advantage_abs_mean"] == pytest.approx(4 * 0.5 / (1 / 3) ** 0.5 / 5, rel=1e-4)
    for key in ("loss", "clip_fraction", "entropy", "kl", "policy_drift_kl", "grad_norm"):
        assert key in stats
    assert stats["kl"] == 0.0
    assert stats["entropy"] > 0


def test_dr_grpo_advantages_are_not_scaled(tiny_policy, contrast):
    stats = rl_update(tiny_policy, contrast[3], UpdateConfig(advantage_estimator="dr_grpo"))
    assert stats["advantage_abs_mean"] == pytest.approx(0.5)


def test_groups_whose_rewards_are_all_equal_leave_the_model_unchanged(tiny_policy, contrast):
    prompt, good, bad, _ = contrast
    # rewards differ across groups but not within them, so every advantage is 0
    samples = [Sample("a", prompt, good, 1.0), Sample("a", prompt, bad, 1.0),
               Sample("b", prompt, good, 0.0), Sample("b", prompt, bad, 0.0)]
    before = copy.deepcopy(tiny_policy.model.state_dict())
    stats = rl_update(tiny_policy, samples, UpdateConfig(lr=1e-2))
    assert stats["advantage_abs_mean"] == 0.0
    for name, value in tiny_policy.model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_a_reference_model_gives_a_kl_term_once_the_policy_moves(tiny_policy, contrast):
    reference = copy.deepcopy(tiny_policy.model)
    stats = rl_update(
        tiny_policy, contrast[3], UpdateConfig(lr=1e-2, epochs=3, minibatch_size=2, kl_coef=0.1), reference=reference
    )
    # the first step is taken at the reference itself (KL 0); later ones after the policy moved
    assert stats["kl"] > 0
    assert stats["policy_drift_kl"] > 0


def test_the_model_is_left_in_eval_mode(tiny_policy, contrast):
    rl_update(tiny_policy, contrast[3], UpdateConfig())
    assert not tiny_policy.model.training


def test_no_samples_raises(tiny_policy):
    with pytest.raises(ValueError, match="no samples"):
        rl_update(tiny_policy, [], UpdateConfig())


def test_a_kl_coefficient_without_a_reference_raises(tiny_policy, contrast):
    with pytest.raises(ValueError, match="reference"):
        rl_update(tiny_policy, contrast[3], UpdateConfig(kl_coef=0.1))
    assert tiny_policy.version == 0


def test_a_kl_penalty_holds_the_policy_near_the_reference(contrast):
    prompt, good, _, samples = contrast
    gains = {}
    for kl_coef in (0.0, 5.0):
        policy = make_tiny_policy()
        reference = copy.deepcopy(policy.model) if kl_coef else None
        before = completion_logprob(policy, prompt, good)
        for _ in range(3):
            rl_update(policy, samples, UpdateConfig(lr=1e-2, epochs=4, kl_coef=kl_coef), reference=reference)
        gains[kl_coef] = completion_logprob(policy, prompt, good) - before
    assert gains[0.0] > 1.0
    assert gains[5.0] < 0.5 * gains[0.0]


def test_lr_warm_up_counts_optimizer_steps_across_rounds(tiny_policy, contrast):
    samples = contrast[3] * 2  # 4 samples, 2 minibatches of 2: two steps per round
    config = UpdateConfig(lr=1e-3, warmup_steps=4, minibatch_size=2)
    rl_update(tiny_policy, samples, config)
    # steps 1 and 2 of 4 use 1/4 and 2/4 of the peak; the last one is what is kept
    assert [g["lr"] for g in tiny_policy.optimizer_state["param_groups"]] == pytest.approx([5e-4, 5e-4])
    rl_update(tiny_policy, samples, config)
    assert [g["lr"] for g in tiny_policy.optimizer_state["param_groups"]] == pytest.approx([1e-3, 1e-3])


def test_the_optimizer_uses_the_configured_second_moment_decay(tiny_policy, contrast):
    rl_update(tiny_policy, contrast[3], UpdateConfig(adam_beta2=0.98, weight_decay=0.1))
    groups = tiny_policy.optimizer_state["param_groups"]
    assert [tuple(g["betas"]) for g in groups] == [(0.9, 0.98), (0.9, 0.98)]
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
