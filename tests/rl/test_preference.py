"""Preference losses: DPO, conservative DPO, IPO and the Bradley-Terry reward-model loss, against their formulas."""

import math

import pytest
import torch

from rlvr_factory.rl.preference import (
    bradley_terry_loss, dpo_loss, implicit_rewards, ipo_loss, preference_logits, sequence_logps, trimmed_mean,
)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# policy chosen, policy rejected, reference chosen, reference rejected
LOGPS = (t(-3.0, -10.0), t(-7.0, -2.0), t(-4.0, -9.0), t(-6.0, -4.0))


def test_the_preference_logit_is_the_gap_of_the_log_ratios():
    h = preference_logits(*LOGPS)
    assert h.tolist() == [(-3 + 4) - (-7 + 6), (-10 + 9) - (-2 + 4)]


def test_dpo_is_minus_log_sigmoid_of_beta_times_the_logit():
    loss = dpo_loss(*LOGPS, beta=0.5)
    assert loss.tolist() == pytest.approx([-math.log(sigmoid(0.5 * 2.0)), -math.log(sigmoid(0.5 * -3.0))])


def test_label_smoothing_mixes_in_the_flipped_label_and_zero_recovers_dpo():
    eps = 0.1
    smoothed = dpo_loss(*LOGPS, beta=0.5, label_smoothing=eps)
    expected = [-(1 - eps) * math.log(sigmoid(0.5 * h)) - eps * math.log(sigmoid(-0.5 * h)) for h in (2.0, -3.0)]
    assert smoothed.tolist() == pytest.approx(expected)
    assert torch.equal(dpo_loss(*LOGPS, beta=0.5, label_smoothing=0.0), dpo_loss(*LOGPS, beta=0.5))


def test_smoothed_dpo_stops_pushing_a_pair_it_already_ranks_far_apart():
    """With eps > 0 the loss has a finite minimiser in h: its gradient changes sign, DPO's never does."""
    h = torch.tensor([0.0, 50.0], requires_grad=True)
    zeros = torch.zeros(2)
    dpo_loss(h, zeros, zeros, zeros, beta=1.0, label_smoothing=0.2).sum().backward()
    assert h.grad[0] < 0 < h.grad[1]  # push up near 0, push back far out
    h.grad = None
    dpo_loss(h, zeros, zeros, zeros, beta=1.0).sum().backward()
    assert (h.grad <= 0).all()


def test_dpo_gradient_raises_chosen_and_lowers_rejected():
    chosen, rejected = torch.tensor([-5.0], requires_grad=True), torch.tensor([-5.0], requires_grad=True)
    dpo_loss(chosen, rejected, torch.tensor([-5.0]), torch.tensor([-5.0]), beta=0.1).sum().backward()
    assert chosen.grad.item() < 0 < rejected.grad.item()
    assert chosen.grad.item() == pytest.approx(-0.1 * 0.5)  # -beta * sigma(-beta h) at h = 0


def test_ipo_regresses_the_logit_to_half_over_tau():
    tau = 0.25
    assert ipo_loss(*LOGPS, beta=tau).tolist() == pytest.approx([(2.0 - 2.0) ** 2, (-3.0 - 2.0) ** 2])
    h = torch.tensor([2.0], requires_grad=True)  # at the target: no gradient
    ipo_loss(h, torch.zeros(1), torch.zeros(1), torch.zeros(1), beta=tau).sum().backward()
    assert h.grad.item() == 0.0


def test_bradley_terry_is_minus_log_sigmoid_of_the_reward_gap_less_the_margin():
    chosen, rejected = t(2.0, 0.0, 1.0), t(1.0, 3.0, 1.0)
    assert bradley_terry_loss(chosen, rejected).tolist() == pytest.approx(
        [-math.log(sigmoid(1.0)), -math.log(sigmoid(-3.0)), math.log(2.0)])
    margin = t(0.5, float("nan"), 2.0)  # NaN: no margin given
    assert bradley_terry_loss(chosen, rejected, margin).tolist() == pytest.approx(
        [-math.log(sigmoid(0.5)), -math.log(sigmoid(-3.0)), -math.log(sigmoid(-2.0))])


def test_the_trimmed_mean_leaves_the_largest_losses_out_of_the_gradient():
    losses = t(0.1, 5.0, 0.3, 0.2, 4.0).requires_grad_()
    value = trimmed_mean(losses, 0.4)  # 2 of 5 dropped: the 5.0 and the 4.0
    value.backward()
    assert value.item() == pytest.approx((0.1 + 0.3 + 0.2) / 3)
    assert losses.grad.tolist() == pytest.approx([1 / 3, 0.0, 1 / 3, 1 / 3, 0.0])
    assert float(trimmed_mean(losses, 0.0)) == pytest.approx(float(losses.mean()))
    assert float(trimmed_mean(t(2.0, 1.0), 0.9)) == pytest.approx(1.0)  # at least one loss is kept
    with pytest.raises(ValueError, match=r"drop must be in \[0, 1\)"):
        trimmed_mean(losses, 1.0)


def test_sequence_logps_sum_or_average_over_the_mask():
    logp = t(-1.0, -2.0, -3.0, -4.0).reshape(1, 4).repeat(2, 1)
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])
    assert sequence_logps(logp, mask).tolist() == [-5.0, 0.0]
    assert sequence_logps(logp, mask, average=True).tolist() == [-2.5, 0.0]


def test_implicit_rewards_are_beta_times_the_log_ratio():
    assert implicit_rewards(t(-3.0), t(-4.0), 0.1).tolist() == pytest.approx([0.1])


@pytest.mark.parametrize("kwargs,match", [({"beta": 0.0}, "beta > 0"), ({"beta": 0.1, "label_smoothing": 0.5}, "label_smoothing")])
def test_bad_settings_are_refused_with_the_reason(kwargs, match):
    with pytest.raises(ValueError, match=match):
        dpo_loss(*LOGPS, **kwargs)
    with pytest.raises(ValueError, match="tau"):
        ipo_loss(*LOGPS, beta=-1.0)
