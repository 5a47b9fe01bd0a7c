"""Per-token KL estimators k1, k2, k3 (Schulman, "Approximating KL Divergence")."""

import math

import pytest
import torch

from rlvr_factory.rl.kl import kl_penalty, kl_shaped_rewards

# policy prob 0.5, reference prob 0.25: log r = log(ref / pi) = -log 2
LOGP, REF = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
LN2 = math.log(2)


@pytest.mark.parametrize(
    "kind,expected",
    [("k1", LN2), ("k2", 0.5 * LN2**2), ("k3", 0.5 - 1 - (-LN2))],
)
def test_estimators_match_hand_computed_values_when_the_policy_is_more_likely(kind, expected):
    assert kl_penalty(LOGP, REF, kind).item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize(
    "kind,expected",
    [("k1", -LN2), ("k2", 0.5 * LN2**2), ("k3", 2 - 1 - LN2)],
)
def test_estimators_match_hand_computed_values_when_the_reference_is_more_likely(kind, expected):
    assert kl_penalty(REF, LOGP, kind).item() == pytest.approx(expected, rel=1e-5)


def test_default_estimator_is_k3():
    assert torch.equal(kl_penalty(LOGP, REF), kl_penalty(LOGP, REF, "k3"))


def test_k3_is_never_negative():
    torch.manual_seed(0)
    logp, ref = torch.randn(1000) * 3, torch.randn(1000) * 3
    assert (kl_penalty(logp, ref, "k3") >= 0).all()


@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_all_estimators_are_zero_when_policy_and_reference_agree(kind):
    logp = torch.log(torch.tensor([[0.1, 0.7], [0.3, 0.9]]))
    assert torch.equal(kl_penalty(logp, logp.clone(), kind), torch.zeros(2, 2))


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_estimators_average_to_the_exact_kl_under_the_policy(kind):
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    exact = (p * (p / q).log()).sum()
    expectation = (p * kl_penalty(p.log(), q.log(), kind)).sum()
    assert expectation.item() == pytest.approx(exact.item(), rel=1e-9)


def test_gradient_flows_to_the_policy_log_probs():
    logp = torch.tensor([math.log(0.5)], requires_grad=True)
    kl_penalty(logp, REF, "k3").sum().backward()
    # d/dlogp [exp(ref - logp) - 1 - (ref - logp)] = 1 - exp(ref - logp) = 1 - 0.5
    assert logp.grad.item() == pytest.approx(0.5)


def test_an_unknown_kind_raises_value_error():
    with pytest.raises(ValueError, match="k4"):
        kl_penalty(LOGP, REF, "k4")


# KL placed in the reward


def test_kl_in_the_reward_subtracts_beta_times_the_summed_completion_kl():
    logp = torch.tensor([[0.0, math.log(0.5), math.log(0.5)], [0.0, math.log(0.25), 0.0]])
    ref = torch.tensor([[0.0, math.log(0.25), math.log(0.5)], [0.0, math.log(0.5), 9.0]])
    mask = torch.tensor([[0, 1, 1], [0, 1, 0]])
    shaped = kl_shaped_rewards(torch.tensor([1.0, 0.0]), logp, ref, mask, coef=0.5, kind="k1")
    # row 0: k1 = log(0.5/0.25) + 0 = ln 2; row 1: k1 = log(0.25/0.5) = -ln 2 (masked 9.0 ignored)
    assert shaped.tolist() == pytest.approx([1.0 - 0.5 * LN2, 0.0 + 0.5 * LN2])


def test_kl_in_the_reward_is_a_constant_for_the_optimiser():
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    shaped = kl_shaped_rewards(torch.tensor([1.0]), logp, REF.unsqueeze(0), torch.ones(1, 1), coef=1.0)
    assert not shaped.requires_grad


def test_a_fully_masked_row_pays_no_kl_penalty():
    shaped = kl_shaped_rewards(torch.tensor([0.3]), torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2), coef=1.0)
    assert shaped.tolist() == pytest.approx([0.3])
