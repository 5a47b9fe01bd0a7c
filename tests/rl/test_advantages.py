"""GRPO / Dr. GRPO group-relative advantages, RLOO, REINFORCE++ and per-component (GDPO) normalisation."""

import math

import pytest
import torch

from rlvr_factory.rl.advantages import (
    component_advantages, compute_advantages, grpo_advantages, reinforce_pp_advantages, rloo_advantages,
)


def test_single_group_is_centred_and_divided_by_the_unbiased_std():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    groups = torch.tensor([0, 0, 0, 0])
    # mean 0.5; unbiased std = sqrt(4 * 0.25 / 3) = sqrt(1/3)
    expected = 0.5 / math.sqrt(1 / 3)
    advantages = grpo_advantages(rewards, groups)
    torch.testing.assert_close(advantages, torch.tensor([expected, -expected, -expected, expected]), atol=1e-5, rtol=0)


def test_uneven_rewards_use_the_group_mean_and_std():
    rewards = torch.tensor([2.0, 4.0, 9.0])
    advantages = grpo_advantages(rewards, torch.zeros(3, dtype=torch.long))
    mean, std = 5.0, math.sqrt(((2 - 5) ** 2 + (4 - 5) ** 2 + (9 - 5) ** 2) / 2)
    torch.testing.assert_close(
        advantages, torch.tensor([(2 - mean) / std, (4 - mean) / std, (9 - mean) / std]), atol=1e-5, rtol=0
    )


def test_dr_grpo_only_centres_the_rewards():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    advantages = grpo_advantages(rewards, torch.zeros(5, dtype=torch.long), scale_by_std=False)
    torch.testing.assert_close(advantages, torch.tensor([0.4, -0.6, -0.6, 0.4, 0.4]))


def test_a_group_of_one_gets_zero_advantage():
    advantages = grpo_advantages(torch.tensor([1.0, 5.0, 3.0]), torch.tensor([0, 1, 1]))
    assert advantages[0].item() == 0.0
    assert advantages[1].item() > 0 > advantages[2].item()


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_a_group_whose_rewards_are_all_equal_gets_zero_advantage(scale_by_std):
    advantages = grpo_advantages(torch.tensor([1.0, 1.0, 1.0]), torch.tensor([4, 4, 4]), scale_by_std=scale_by_std)
    assert torch.equal(advantages, torch.zeros(3))


def test_interleaved_groups_with_arbitrary_ids_are_normalised_separately():
    rewards = torch.tensor([3.0, 1.0, 5.0, 1.0, 7.0, 0.0])
    groups = torch.tensor([42, 7, 42, 7, 13, 42])
    advantages = grpo_advantages(rewards, groups)
    # group 42: rewards 3, 5, 0 -> mean 8/3, unbiased std
    g = torch.tensor([3.0, 5.0, 0.0])
    g_adv = (g - g.mean()) / g.std()
    torch.testing.assert_close(advantages[[0, 2, 5]], g_adv, atol=1e-5, rtol=0)
    # group 7: equal rewards -> 0; group 13: a single sample -> 0
    assert advantages[[1, 3, 4]].tolist() == [0.0, 0.0, 0.0]


def test_integer_rewards_give_float_advantages():
    advantages = grpo_advantages(torch.tensor([1, 0]), torch.tensor([0, 0]), scale_by_std=False)
    assert advantages.dtype == torch.float32
    assert advantages.tolist() == [0.5, -0.5]


# RLOO, REINFORCE++ and the estimator switch


def test_rloo_subtracts_the_mean_of_the_other_samples():
    # rewards [1, 0, 0, 1]: the baseline of sample 0 is mean(0, 0, 1) = 1/3
    advantages = rloo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0]), torch.zeros(4, dtype=torch.long))
    assert advantages.tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])


def test_rloo_gives_a_group_of_one_and_an_all_equal_group_zero():
    advantages = rloo_advantages(torch.tensor([1.0, 0.5, 0.5, 0.5]), torch.tensor([7, 3, 3, 3]))
    assert advantages.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_reinforce_pp_normalises_over_the_whole_batch_after_the_group_baseline():
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    centred = torch.tensor([0.5, -0.5, 0.0, 0.0])  # group 1 is all-equal
    expected = centred / (centred.std() + 1e-6)
    assert reinforce_pp_advantages(rewards, groups).tolist() == pytest.approx(expected.tolist())


def test_reinforce_pp_without_group_baseline_centres_on_the_batch_mean():
    rewards = torch.tensor([3.0, 1.0, 2.0])
    advantages = reinforce_pp_advantages(rewards, torch.tensor([0, 1, 2]), group_baseline=False)
    assert advantages.tolist() == pytest.approx([1.0, -1.0, 0.0], abs=1e-5)


def test_reinforce_pp_of_a_uniform_batch_or_a_single_sample_is_zero():
    assert reinforce_pp_advantages(torch.tensor([1.0, 1.0]), torch.tensor([0, 1])).tolist() == [0.0, 0.0]
    assert reinforce_pp_advantages(torch.tensor([1.0]), torch.tensor([0]), group_baseline=False).tolist() == [0.0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [("grpo", [0.7071, -0.7071]), ("dr_grpo", [0.5, -0.5]), ("rloo", [1.0, -1.0]), ("reinforce_pp", [0.7071, -0.7071])],
)
def test_compute_advantages_selects_the_estimator_by_name(name, expected):
    advantages = compute_advantages(name, torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    assert advantages.tolist() == pytest.approx(expected, abs=1e-4)


def test_an_unknown_estimator_is_refused_by_name():
    with pytest.raises(ValueError, match="rloo"):
        compute_advantages("ppo", torch.tensor([1.0]), torch.tensor([0]))


def test_domains_are_normalised_separately_for_reinforce_pp():
    # domain 0 rewards in {0, 1}; domain 1 rewards in {0, 10}: each is scaled to unit std on its own
    rewards = torch.tensor([1.0, 0.0, 10.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1])
    per_domain = compute_advantages("reinforce_pp", rewards, groups, torch.tensor([0, 0, 1, 1]))
    single = reinforce_pp_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]))
    assert per_domain.tolist() == pytest.approx(single.tolist() * 2, rel=1e-5)  # up to eps
    pooled = compute_advantages("reinforce_pp", rewards, groups)
    assert abs(pooled[0].item()) < abs(pooled[2].item())  # pooled, the big-reward domain dominates


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo"])
def test_domains_do_not_change_group_wise_estimators(name):
    rewards, groups = torch.tensor([1.0, 0.0, 3.0, 1.0, 2.0]), torch.tensor([0, 0, 1, 1, 1])
    domains = torch.tensor([0, 0, 1, 1, 1])
    assert torch.allclose(compute_advantages(name, rewards, groups, domains), compute_advantages(name, rewards, groups))


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_every_estimator_gives_a_lone_sample_and_an_all_equal_batch_zero(name):
    assert compute_advantages(name, torch.tensor([0.7]), torch.tensor([0])).tolist() == [0.0]
    assert compute_advantages(name, torch.tensor([0.5, 0.5, 0.5]), torch.tensor([0, 0, 1])).tolist() == [0.0] * 3


# Per-component (GDPO-style) normalisation


def test_summing_components_first_ties_compositions_that_per_component_normalisation_tells_apart():
    # (outcome, format) of two groups of two: in group 0 the better sample wins one component, in
    # group 1 both. Summed first, GRPO gives both groups the same advantages (Liu et al. 2026, Fig. 1).
    components = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    groups, weights = torch.tensor([0, 0, 1, 1]), torch.tensor([1.0, 1.0])
    summed_first = grpo_advantages(components @ weights, groups)
    assert summed_first[:2].tolist() == pytest.approx(summed_first[2:].tolist())
    decoupled = component_advantages("grpo", components, weights, groups)
    assert decoupled[3] == pytest.approx(2 * decoupled[1].item(), rel=1e-4)  # winning both counts twice
    assert decoupled[1] > 0 > decoupled[0] and decoupled[3] > 0 > decoupled[2]


def test_per_component_advantages_are_the_weighted_sum_of_group_advantages_normalised_over_the_batch():
    components = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.5]])
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    weights = torch.tensor([1.0, 0.5])
    expected = grpo_advantages(components[:, 0], groups) + 0.5 * grpo_advantages(components[:, 1], groups)
    expected = (expected - expected.mean()) / (expected.std() + 1e-6)
    torch.testing.assert_close(component_advantages("grpo", components, weights, groups), expected)


def test_a_component_with_zero_weight_changes_nothing():
    components = torch.tensor([[1.0, 5.0], [0.0, -3.0], [1.0, 2.0], [0.0, 9.0]])
    groups = torch.tensor([0, 0, 1, 1])
    alone = component_advantages("grpo", components[:, :1], torch.tensor([1.0]), groups)
    torch.testing.assert_close(component_advantages("grpo", components, torch.tensor([1.0, 0.0]), groups), alone)


def test_a_single_component_is_the_estimator_then_batch_normalisation():
    rewards, groups = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0]), torch.tensor([0, 0, 0, 1, 1, 1])
    plain = rloo_advantages(rewards, groups)
    expected = (plain - plain.mean()) / (plain.std() + 1e-6)
    got = compute_advantages("rloo", rewards, groups, components=rewards[:, None], weights=torch.tensor([1.0]))
    torch.testing.assert_close(got, expected)


def test_per_sample_weights_let_domains_weigh_components_differently():
    components = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    weights = torch.tensor([[1.0, 0.1], [1.0, 0.1], [0.1, 1.0], [0.1, 1.0]])  # domain 0 prizes column 0, domain 1 column 1
    groups, domains = torch.tensor([0, 0, 1, 1]), torch.tensor([0, 0, 1, 1])
    advantages = compute_advantages("grpo", torch.zeros(4), groups, domains, components, weights)
    assert advantages[0] > advantages[1] and advantages[3] > advantages[2]


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_per_component_advantages_of_groups_without_spread_are_zero(name):
    components = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    got = component_advantages(name, components, torch.tensor([1.0, 1.0]), torch.tensor([0, 0, 1, 1]))
    assert got.tolist() == [0.0] * 4


def test_mismatched_components_and_weights_are_refused():
    with pytest.raises(ValueError, match="weights"):
        component_advantages("grpo", torch.zeros(3, 2), torch.ones(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="both"):
        compute_advantages("grpo", torch.zeros(2), torch.zeros(2, dtype=torch.long), components=torch.zeros(2, 1))
