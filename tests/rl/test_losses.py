"""PPO clipped surrogate with separate lower / upper clip bounds, and the masked token mean."""

import math

import pytest
import torch

from rlvr_factory.rl.losses import aggregate_loss, clipped_policy_loss, loss_units, masked_mean


def one_token(ratio: float, advantage: float, **clip):
    """Loss and clip fraction for a single token whose probability ratio is `ratio`."""
    logp = torch.tensor([[math.log(ratio)]])
    old_logp = torch.zeros(1, 1)
    return clipped_policy_loss(logp, old_logp, torch.tensor([advantage]), torch.ones(1, 1), **clip)


# ratio, advantage, expected loss, expected clip fraction (clip_low = clip_high = 0.2)
CASES = [
    (1.1, 1.0, -1.1, 0.0),  # inside the range: plain ratio * A
    (1.5, 1.0, -1.2, 1.0),  # above 1 + eps with A > 0: clipped at 1.2
    (0.5, 1.0, -0.5, 0.0),  # below 1 - eps with A > 0: the pessimistic unclipped term
    (1.1, -1.0, 1.1, 0.0),  # inside the range, negative advantage
    (1.5, -1.0, 1.5, 0.0),  # above 1 + eps with A < 0: the pessimistic unclipped term
    (0.5, -1.0, 0.8, 1.0),  # below 1 - eps with A < 0: clipped at 0.8
    (1.5, 2.0, -2.4, 1.0),  # the advantage scales the clipped term
]


@pytest.mark.parametrize("ratio,advantage,loss,clip_fraction", CASES)
def test_single_token_loss_and_clip_fraction(ratio, advantage, loss, clip_fraction):
    got_loss, got_fraction = one_token(ratio, advantage)
    assert got_loss.item() == pytest.approx(loss, abs=1e-5)
    assert got_fraction.item() == clip_fraction


def test_loss_is_the_mean_over_all_unmasked_tokens_of_the_batch():
    ratios = torch.tensor([[1.1, 1.5, 0.5], [1.1, 1.5, 0.5]])
    advantages = torch.tensor([1.0, -1.0])
    loss, clip_fraction = clipped_policy_loss(ratios.log(), torch.zeros(2, 3), advantages, torch.ones(2, 3))
    assert loss.item() == pytest.approx((-1.1 - 1.2 - 0.5 + 1.1 + 1.5 + 0.8) / 6, abs=1e-5)
    assert clip_fraction.item() == pytest.approx(2 / 6)


def test_clip_higher_widens_only_the_upper_bound():
    # ratio 1.25 with A > 0: clipped at 1.2 symmetrically, not with clip_high = 0.28
    loss, fraction = one_token(1.25, 1.0, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.25, abs=1e-5) and fraction.item() == 0.0
    loss, fraction = one_token(1.25, 1.0, clip_low=0.2, clip_high=0.2)
    assert loss.item() == pytest.approx(-1.2, abs=1e-5) and fraction.item() == 1.0
    # above the wider bound it clips at 1 + clip_high
    loss, fraction = one_token(1.5, 1.0, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(-1.28, abs=1e-5) and fraction.item() == 1.0
    # the lower bound stays 1 - clip_low
    loss, fraction = one_token(0.5, -1.0, clip_low=0.2, clip_high=0.28)
    assert loss.item() == pytest.approx(0.8, abs=1e-5) and fraction.item() == 1.0


def test_asymmetric_lower_bound_applies_to_negative_advantages():
    loss, fraction = one_token(0.75, -1.0, clip_low=0.1, clip_high=0.2)
    assert loss.item() == pytest.approx(0.9, abs=1e-5) and fraction.item() == 1.0
    loss, fraction = one_token(0.75, -1.0, clip_low=0.3, clip_high=0.2)
    assert loss.item() == pytest.approx(0.75, abs=1e-5) and fraction.item() == 0.0


def test_masked_positions_do_not_affect_loss_or_clip_fraction():
    logp = torch.tensor([[math.log(1.1), 5.0, -7.0]])
    mask = torch.tensor([[1, 0, 0]])
    loss, fraction = clipped_policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), mask)
    assert loss.item() == pytest.approx(-1.1, abs=1e-5)
    assert fraction.item() == 0.0


def test_a_fully_masked_row_contributes_nothing():
    logp = torch.tensor([[math.log(1.5), math.log(1.1)], [3.0, -3.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    loss, fraction = clipped_policy_loss(logp, torch.zeros(2, 2), torch.tensor([1.0, -4.0]), mask)
    assert loss.item() == pytest.approx((-1.2 - 1.1) / 2, abs=1e-5)
    assert fraction.item() == pytest.approx(0.5)


def test_an_entirely_masked_batch_gives_zero_loss_and_zero_clip_fraction():
    loss, fraction = clipped_policy_loss(torch.ones(2, 3), torch.zeros(2, 3), torch.ones(2), torch.zeros(2, 3))
    assert loss.item() == 0.0 and fraction.item() == 0.0


def test_per_token_advantages_are_used_as_given():
    logp = torch.tensor([[math.log(1.1), math.log(1.1)]])
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([[1.0, -3.0]]), torch.ones(1, 2))
    assert loss.item() == pytest.approx((-1.1 + 3.3) / 2, abs=1e-5)


def test_a_clipped_token_gets_no_gradient_and_an_unclipped_one_does():
    logp = torch.tensor([[math.log(1.5), math.log(1.1), math.log(0.5)]], requires_grad=True)
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 3), torch.tensor([1.0]), torch.ones(1, 3))
    loss.backward()
    # d(-rho * A / N)/d logp = -rho * A / N for the unclipped tokens; 0 for the clipped one
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -1.1 / 3, -0.5 / 3]]))


def test_a_masked_token_gets_no_gradient():
    logp = torch.tensor([[math.log(1.1), math.log(1.1)]], requires_grad=True)
    loss, _ = clipped_policy_loss(logp, torch.zeros(1, 2), torch.tensor([2.0]), torch.tensor([[1, 0]]))
    loss.backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.2, 0.0]]))


def test_masked_mean_averages_only_where_the_mask_is_one():
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, -50.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])
    assert masked_mean(values, mask).item() == pytest.approx((1 + 2 + 3 + 6) / 4)


def test_masked_mean_of_an_empty_mask_is_zero():
    assert masked_mean(torch.tensor([1.0, 2.0]), torch.tensor([0, 0])).item() == 0.0


def test_masked_mean_accepts_a_boolean_mask():
    assert masked_mean(torch.tensor([1.0, 3.0, 8.0]), torch.tensor([True, True, False])).item() == 2.0


# Loss aggregation modes and dual-clip

TOKEN_LOSS = torch.tensor([[1.0, 3.0, 0.0, 0.0], [2.0, 2.0, 2.0, 6.0]])
TOKEN_MASK = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])


def test_token_mean_weighs_every_unmasked_token_equally():
    assert aggregate_loss(TOKEN_LOSS, TOKEN_MASK, "token-mean").item() == pytest.approx(16 / 6)


def test_seq_mean_token_mean_averages_each_sequence_first():
    assert aggregate_loss(TOKEN_LOSS, TOKEN_MASK, "seq-mean-token-mean").item() == pytest.approx((2 + 3) / 2)


def test_seq_mean_token_sum_norm_divides_each_sum_by_a_constant_length():
    assert aggregate_loss(TOKEN_LOSS, TOKEN_MASK, "seq-mean-token-sum-norm").item() == pytest.approx((4 / 4 + 12 / 4) / 2)
    assert aggregate_loss(TOKEN_LOSS, TOKEN_MASK, "seq-mean-token-sum-norm", norm_length=8).item() == pytest.approx(
        (4 / 8 + 12 / 8) / 2
    )


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_fully_masked_rows_are_left_out_of_sequence_means(mode):
    loss = torch.tensor([[5.0, 5.0], [9.0, 9.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    assert aggregate_loss(loss, mask, mode).item() == pytest.approx(5.0)  # (5 + 5) / 2 both ways


def test_an_unknown_aggregation_is_refused():
    with pytest.raises(ValueError, match="token-mean"):
        aggregate_loss(TOKEN_LOSS, TOKEN_MASK, "sum")


def test_dual_clip_caps_the_loss_of_a_bad_action_with_a_huge_ratio():
    logp, old = torch.tensor([[math.log(10.0)]]), torch.zeros(1, 1)  # ratio 10
    mask = torch.ones(1, 1)
    plain, _ = clipped_policy_loss(logp, old, torch.tensor([-1.0]), mask)
    capped, _ = clipped_policy_loss(logp, old, torch.tensor([-1.0]), mask, dual_clip=3.0)
    assert plain.item() == pytest.approx(10.0)  # -min(10 * -1, 1.2 * -1)
    assert capped.item() == pytest.approx(3.0)  # min(10, 3 * 1)


def test_dual_clip_leaves_positive_advantages_alone():
    logp, old = torch.tensor([[math.log(10.0)]]), torch.zeros(1, 1)
    loss, _ = clipped_policy_loss(logp, old, torch.tensor([2.0]), torch.ones(1, 1), dual_clip=3.0)
    assert loss.item() == pytest.approx(-1.2 * 2.0)


def test_dual_clip_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip"):
        clipped_policy_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.tensor([1.0]), torch.ones(1, 1), dual_clip=1.0)


# The divisor, shared by micro-batches for gradient accumulation


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_micro_batch_aggregates_with_shared_units_sum_to_the_whole(mode):
    loss = torch.tensor([[1.0, 3.0, 0.0, 0.0], [2.0, 2.0, 2.0, 6.0], [4.0, 0.0, 0.0, 0.0], [7.0, 7.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]])
    units = loss_units(mask, mode)
    whole = aggregate_loss(loss, mask, mode, norm_length=4)
    parts = sum(aggregate_loss(loss[i : i + 2], mask[i : i + 2], mode, norm_length=4, units=units) for i in (0, 2))
    assert parts.item() == pytest.approx(whole.item())


def test_loss_units_count_tokens_or_non_empty_rows():
    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert loss_units(mask, "token-mean") == 3.0
    assert loss_units(mask, "seq-mean-token-mean") == 2.0
    assert loss_units(torch.zeros(2, 2), "token-mean") == 1.0


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_every_mode_gives_zero_for_an_entirely_masked_batch(mode):
    assert aggregate_loss(torch.full((2, 3), 7.0), torch.zeros(2, 3), mode).item() == 0.0
