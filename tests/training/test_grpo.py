"""One RL round: group-relative advantages and PPO-clipped updates on a tiny model."""

import copy
import dataclasses
import math

import pytest
import torch

from rlvr_factory.training.grpo import Sample, UpdateConfig, _Padded, kl_carriers, rl_update
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
        rl_update(tiny_policy, samples, UpdateConfig(lr=1e-3, warmup_steps=0))  # full-size steps from the first
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
    rl_update(tiny_policy, samples, UpdateConfig(minibatch_size=2, warmup_steps=0))
    state = tiny_policy.optimizer_state
    assert state is not None and state["state"]
    assert all(float(s["step"]) == 1 for s in state["state"].values())
    rl_update(tiny_policy, samples, UpdateConfig(minibatch_size=2, lr=5e-4, warmup_steps=0))
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


# Gradient accumulation, length handling, KL in the reward


def _round_samples(tokenizer) -> list[Sample]:
    """Three prompts of four samples each, with uneven completion lengths and rewards."""
    out = []
    for g, (text, answers) in enumerate([("Compute 2+2", ["4", "5", "44", "4"]), ("Compute 3*3", ["9", "9", "8", "99"]),
                                         ("Compute 1-1", ["0", "1", "0", "10"])]):
        prompt = chat_prompt(tokenizer, text)
        for k, a in enumerate(answers):
            out.append(Sample(f"t{g}", prompt, answer(tokenizer, a), float(k % 2 == 0) + 0.1 * g))
    return out


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_gradient_accumulation_gives_the_same_update_as_one_big_batch(aggregation):
    results = []
    # one micro-batch per minibatch; rows per micro-batch; padded tokens per micro-batch (~2 rows, and 1)
    for micro, tokens in ((None, None), (2, None), (3, None), (None, 100), (None, 1)):
        policy = make_tiny_policy()
        samples = _round_samples(policy.tokenizer)
        config = UpdateConfig(lr=1e-2, minibatch_size=6, micro_batch_size=micro, micro_batch_tokens=tokens, epochs=2,
                              loss_aggregation=aggregation, entropy_coef=0.01)
        stats = rl_update(policy, samples, config)
        results.append((policy.model.state_dict(), stats))
    (base, base_stats), *others = results
    for state, stats in others:
        for name, value in base.items():
            # Adam divides by sqrt(v), so float error on near-zero gradients shows at ~1e-5 (steps of ~1e-2)
            torch.testing.assert_close(state[name], value, atol=5e-5, rtol=1e-4, msg=name)
        assert stats["loss"] == pytest.approx(base_stats["loss"], abs=1e-5)
        assert stats["entropy"] == pytest.approx(base_stats["entropy"], rel=1e-5)
        assert stats["optimizer_steps"] == base_stats["optimizer_steps"] == 4


def test_micro_batches_respect_the_row_and_token_limits_in_order():
    samples = [Sample("t", [1] * 4, [2] * n, 1.0) for n in (6, 2, 2, 16, 1, 1, 1)]  # lengths 10 6 6 20 5 5 5
    padded = _Padded.of(samples, 0, "cpu")
    assert padded.micro_batches(range(7), None, None) == [list(range(7))]
    assert padded.micro_batches(range(7), 3, None) == [[0, 1, 2], [3, 4, 5], [6]]
    # rows x the widest of them <= 20; the 20-token row fits alone, a wider row would go alone too
    assert padded.micro_batches(range(7), None, 20) == [[0, 1], [2], [3], [4, 5, 6]]
    assert padded.micro_batches(range(7), None, 8) == [[0], [1], [2], [3], [4], [5], [6]]
    assert padded.micro_batches([4, 5, 6], 2, 20) == [[4, 5], [6]]
    for rows in padded.micro_batches(range(7), None, 20):
        assert len(rows) * max(padded.lengths[i] for i in rows) <= 20


def test_the_token_budget_bounds_what_autograd_holds_per_forward(tiny_policy):
    """The activations autograd saves (its saved tensors, parameters aside) are one micro-batch's:
    with a budget of about a row they are a fraction of the whole minibatch's."""
    samples = _round_samples(tiny_policy.tokenizer) * 4
    peaks = {}
    for tokens in (None, 32):
        policy = copy.deepcopy(tiny_policy)
        weights = {p.untyped_storage().data_ptr() for p in policy.model.parameters()}
        held, peak = [0], [0]

        def pack(t):
            if t.untyped_storage().data_ptr() not in weights:
                held[0] += t.numel() * t.element_size()
                peak[0] = max(peak[0], held[0])
            return t

        # each forward with gradient starts a micro-batch (the previous one's graph is freed by its backward)
        policy.model.register_forward_pre_hook(lambda *_: held.__setitem__(0, 0) if torch.is_grad_enabled() else None)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            stats = rl_update(policy, samples, UpdateConfig(lr=1e-2, minibatch_size=len(samples),
                                                            micro_batch_tokens=tokens, skip_zero_advantage=False))
        assert stats["trained_sample_fraction"] == 1.0
        peaks[tokens] = peak[0]
    assert 0 < peaks[32] < peaks[None] / 4


def test_a_single_on_policy_step_skips_the_old_log_prob_pass_without_changing_the_update(tiny_policy):
    samples = _round_samples(tiny_policy.tokenizer)
    on_policy = copy.deepcopy(tiny_policy)
    rl_update(on_policy, samples, UpdateConfig(lr=1e-2, minibatch_size=len(samples)))
    # micro-batches of one force the old log-probs to be computed and padded separately
    two_pass = copy.deepcopy(tiny_policy)
    rl_update(two_pass, samples, UpdateConfig(lr=1e-2, minibatch_size=len(samples), epochs=1, kl_coef=1e-9,
                                              kl_placement="reward"), reference=copy.deepcopy(tiny_policy.model))
    for name, value in on_policy.model.state_dict().items():
        torch.testing.assert_close(two_pass.model.state_dict()[name], value, atol=1e-6, rtol=1e-5, msg=name)


def test_masked_truncated_completions_weigh_as_if_they_were_not_there(contrast):
    prompt, good, bad, samples = contrast
    other = chat_prompt(make_tiny_policy().tokenizer, "Compute 9+9")
    cut_off = [Sample("b", other, good, 1.0, truncated=True), Sample("b", other, bad, 0.0, truncated=True)]
    masked, without = make_tiny_policy(), make_tiny_policy()
    stats = rl_update(masked, samples + cut_off, UpdateConfig(lr=1e-2, mask_truncated=True))
    rl_update(without, samples, UpdateConfig(lr=1e-2))
    assert stats["masked_truncated"] == 2.0
    for name, value in without.model.state_dict().items():
        torch.testing.assert_close(masked.model.state_dict()[name], value, atol=1e-6, rtol=1e-5, msg=name)


def test_a_batch_of_only_truncated_completions_leaves_the_model_unchanged(tiny_policy, contrast):
    prompt, good, bad, _ = contrast
    samples = [Sample("a", prompt, good, 1.0, truncated=True), Sample("a", prompt, bad, 0.0, truncated=True)]
    before = copy.deepcopy(tiny_policy.model.state_dict())
    rl_update(tiny_policy, samples, UpdateConfig(lr=1e-2, mask_truncated=True))
    for name, value in tiny_policy.model.state_dict().items():
        assert torch.equal(value, before[name]), name


def test_the_overlong_penalty_turns_equal_rewards_into_a_preference_for_the_shorter_answer(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    prompt = chat_prompt(tokenizer, "Compute 2+2")
    short, long = answer(tokenizer, "4"), answer(tokenizer, "4" * 9)  # 2 and 10 tokens
    samples = [Sample("a", prompt, short, 1.0), Sample("a", prompt, long, 1.0)]
    config = UpdateConfig(lr=1e-2, overlong_max_length=10, overlong_cache_length=4)
    long_before = completion_logprob(tiny_policy, prompt, long)
    stats = rl_update(tiny_policy, samples, config)
    # the 10-token answer is at L_max: penalty (6 - 10) / 4 = -1; the short one is free
    assert stats["overlong_penalty_mean"] == pytest.approx(-0.5)
    assert stats["advantage_abs_mean"] > 0
    assert completion_logprob(tiny_policy, prompt, long) < long_before


def test_the_overlong_penalty_needs_its_max_length():
    with pytest.raises(ValueError, match="overlong_max_length"):
        UpdateConfig(overlong_cache_length=4)


def test_kl_in_the_reward_penalises_samples_that_drifted_from_the_reference(tiny_policy, contrast):
    prompt, good, _, _ = contrast
    reference = copy.deepcopy(tiny_policy.model)
    with torch.no_grad():  # move the policy so the two samples drift by different amounts
        tiny_policy.model.lm_head.weight[good[0]] += 2.0
    samples = [Sample("a", prompt, good, 1.0), Sample("a", prompt, answer(tiny_policy.tokenizer, "7"), 1.0)]
    stats = rl_update(tiny_policy, samples, UpdateConfig(kl_coef=0.5, kl_kind="k1", kl_placement="reward"),
                      reference=reference)
    assert stats["kl_reward_penalty_mean"] != 0.0
    assert stats["advantage_abs_mean"] > 0  # equal verifier rewards, different shaped rewards
    in_loss = rl_update(make_tiny_policy(), samples, UpdateConfig(kl_coef=0.5), reference=reference)
    assert in_loss["kl_reward_penalty_mean"] == 0.0 and in_loss["advantage_abs_mean"] == 0.0


def test_an_unknown_kl_placement_is_refused():
    with pytest.raises(ValueError, match="kl_placement"):
        UpdateConfig(kl_placement="advantage")


def test_advantages_are_normalised_per_domain(tiny_policy, contrast):
    prompt, good, bad, _ = contrast
    samples = [Sample("a", prompt, good, 1.0, domain="math"), Sample("a", prompt, bad, 0.0, domain="math"),
               Sample("b", prompt, good, 10.0, domain="code"), Sample("b", prompt, bad, 0.0, domain="code")]
    stats = rl_update(tiny_policy, samples, UpdateConfig(advantage_estimator="reinforce_pp"))
    # each domain alone: centred [0.5, -0.5] / std -> |A| = 0.7071 for every sample
    assert stats["advantage_abs_mean"] == pytest.approx(0.7071, abs=1e-3)


def test_an_entropy_bonus_raises_the_entropy_of_the_policy(contrast):
    prompt, good, bad, _ = contrast
    samples = [Sample("a", prompt, good, 1.0), Sample("a", prompt, bad, 1.0)]  # no reward signal
    entropies = {}
    for coef in (0.0, 1.0):
        policy = make_tiny_policy()
        for _ in range(3):
            rl_update(policy, samples, UpdateConfig(lr=1e-2, entropy_coef=coef))
        entropies[coef] = rl_update(policy, samples, UpdateConfig(lr=0.0))["entropy"]
    assert entropies[1.0] > entropies[0.0] + 1e-3


@pytest.mark.parametrize("mask", [False, True])
def test_skipping_samples_without_gradient_gives_the_same_update_and_stats(mask):
    results = []
    for skip in (False, True):
        policy = make_tiny_policy()
        samples = _round_samples(policy.tokenizer)
        samples[4:8] = [Sample("t1", s.prompt_ids, s.completion_ids, 1.0) for s in samples[4:8]]  # no spread
        samples[0].truncated = True
        config = UpdateConfig(lr=1e-2, minibatch_size=6, micro_batch_size=4, epochs=2, skip_zero_advantage=skip,
                              mask_truncated=mask)
        results.append((policy.model.state_dict(), rl_update(policy, samples, config)))
    (full, full_stats), (skipped, skipped_stats) = results
    assert full_stats["trained_sample_fraction"] == 1.0
    assert skipped_stats["trained_sample_fraction"] == pytest.approx((8 - mask) / 12)
    for name, value in full.items():
        torch.testing.assert_close(skipped[name], value, atol=5e-5, rtol=1e-4, msg=name)
    for key in ("loss", "entropy", "clip_fraction", "policy_drift_kl"):
        assert skipped_stats[key] == pytest.approx(full_stats[key], rel=1e-4, abs=1e-6), key


# kl_sample_fraction: a seeded share of the zero-advantage samples carries the KL term, weighted up


def test_each_samples_expected_kl_weight_is_one():
    nonzero = [True, False, False, True, False]
    fraction = 0.3
    weights = torch.zeros(len(nonzero))
    for seed in range(4000):
        carried, scale = kl_carriers(nonzero, fraction, seed)
        assert carried[0] and carried[3]  # backpropagated anyway
        weights += torch.tensor(carried, dtype=torch.float32) * scale
    mean = weights / 4000
    assert mean[0] == mean[3] == 1.0
    assert torch.allclose(mean, torch.ones(len(nonzero)), atol=0.1)  # 1/0.3 per carried draw, ~30% of draws
    carried, scale = kl_carriers(nonzero, 1.0, 7)
    assert all(carried) and torch.equal(scale, torch.ones(len(nonzero)))


def _flat_group(tokenizer) -> list[Sample]:
    """One prompt, four completions, one reward: every advantage is 0."""
    prompt = chat_prompt(tokenizer, "Compute 2+2")
    return [Sample("t0", prompt, answer(tokenizer, a), 1.0) for a in ("4", "5", "44", "45")]


def _drifted(policy):
    """A copy of `policy`'s model moved off it, as the reference: the KL to it has a gradient."""
    reference = copy.deepcopy(policy.model)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
    return reference


def _seed_where(carries, n: int, fraction: float) -> int:
    return next(seed for seed in range(1000) if kl_carriers([False] * n, fraction, seed)[0] == carries)


def test_carried_kl_terms_are_weighted_by_one_over_the_fraction():
    fraction, n = 0.5, 4
    seed = _seed_where([True] * n, n, fraction)  # every sample drawn: the loss is 1/fraction times the full KL
    grads = []
    for share in (fraction, 1.0):
        policy = make_tiny_policy()
        # one minibatch, no clipping and no step: the gradient left on the parameters is the loss's own
        stats = rl_update(policy, _flat_group(policy.tokenizer),
                          UpdateConfig(lr=0.0, kl_coef=0.1, kl_sample_fraction=share, max_grad_norm=1e9, seed=seed),
                          reference=_drifted(policy))
        assert stats["trained_sample_fraction"] == 1.0
        grads.append({name: p.grad.clone() for name, p in policy.model.named_parameters()})
    sampled, full = grads
    assert any(g.abs().sum() > 0 for g in full.values())  # the KL has a gradient
    for name, g in full.items():
        torch.testing.assert_close(sampled[name], g / fraction, atol=1e-7, rtol=1e-5, msg=name)


def test_zero_advantage_samples_left_out_of_the_draw_get_no_backward_pass():
    fraction, n = 0.5, 4
    policy = make_tiny_policy()
    before = copy.deepcopy(policy.model.state_dict())
    seed = _seed_where([False] * n, n, fraction)
    stats = rl_update(policy, _flat_group(policy.tokenizer),
                      UpdateConfig(lr=1e-2, warmup_steps=0, kl_coef=0.1, kl_sample_fraction=fraction, seed=seed),
                      reference=_drifted(policy))
    assert stats["trained_sample_fraction"] == 0.0
    assert stats["kl"] > 0  # still measured, in the forward pass
    for name, value in policy.model.state_dict().items():
        assert torch.equal(value, before[name]), name
    partial = _seed_where([True, False, True, False], n, fraction)
    stats = rl_update(make_tiny_policy(), _flat_group(policy.tokenizer),
                      UpdateConfig(kl_coef=0.1, kl_sample_fraction=fraction, seed=partial), reference=_drifted(policy))
    assert stats["trained_sample_fraction"] == 0.5


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5])
def test_a_kl_sample_fraction_outside_the_unit_interval_is_refused(fraction):
    with pytest.raises(ValueError, match="kl_sample_fraction"):
        UpdateConfig(kl_sample_fraction=fraction)


# The engine's sampling log-probs: mismatch metrics and the TIS correction


def with_sampling_logprobs(policy, samples, shift: float = 0.0):
    """The samples, carrying the trainer's own log-probs of their completion tokens plus `shift`."""
    out = []
    for s in samples:
        ids, attention, mask = join_prompt_completion([s.prompt_ids], [s.completion_ids], policy.tokenizer.pad_token_id)
        with torch.no_grad():
            logp, _ = token_logprobs(policy.model, ids, attention)
        out.append(dataclasses.replace(s, sampling_logprobs=(logp[0][mask[0].bool()] + shift).tolist()))
    return out


def test_the_update_reports_how_far_the_sampling_log_probs_are_from_the_trainers(tiny_policy, contrast):
    samples = with_sampling_logprobs(tiny_policy, contrast[3], shift=-0.5)
    stats = rl_update(tiny_policy, samples, UpdateConfig())
    assert stats["engine_logprob_mismatch_abs_mean"] == pytest.approx(0.5, abs=1e-4)
    assert stats["engine_logprob_mismatch_abs_max"] == pytest.approx(0.5, abs=1e-4)
    assert stats["engine_logprob_mismatch_kl"] == pytest.approx(math.exp(0.5) - 1.5, abs=1e-4)


def test_samples_without_sampling_log_probs_report_no_mismatch(tiny_policy, contrast):
    stats = rl_update(tiny_policy, contrast[3], UpdateConfig())
    assert not any(k.startswith("engine_logprob_mismatch") for k in stats)


@pytest.mark.parametrize("shift, factor", [(0.0, 1.0), (-5.0, 2.0), (math.log(4), 0.25)])
def test_tis_scales_each_tokens_loss_by_the_capped_ratio(contrast, shift, factor):
    """pi_trainer / pi_engine = exp(-shift): equal log-probs change nothing, an engine that found the
    tokens far less likely is capped at C = 2, one that found them 4x likelier weighs them by 1/4."""
    plain = rl_update(make_tiny_policy(seed=0), contrast[3], UpdateConfig())
    policy = make_tiny_policy(seed=0)
    samples = with_sampling_logprobs(policy, contrast[3], shift)
    corrected = rl_update(policy, samples, UpdateConfig(engine_is_correction=True, engine_is_cap=2.0))
    assert corrected["loss"] == pytest.approx(plain["loss"] * factor, rel=1e-4, abs=1e-7)


def test_tis_without_sampling_log_probs_is_refused(tiny_policy, contrast):
    with pytest.raises(ValueError, match="needs the engine's sampling log-probs"):
        rl_update(tiny_policy, contrast[3], UpdateConfig(engine_is_correction=True))
