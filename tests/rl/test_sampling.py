"""DAPO's dynamic-sampling filter."""

import torch

from rlvr_factory.rl.sampling import groups_with_signal


def test_groups_that_are_all_right_or_all_wrong_are_dropped():
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    assert groups_with_signal(rewards, groups).tolist() == [False, False, False, False, True, True]


def test_a_group_of_one_has_no_signal():
    assert groups_with_signal(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([5, 9, 9])).tolist() == [False, True, True]


def test_a_spread_under_eps_counts_as_equal():
    rewards = torch.tensor([0.5, 0.5001, 0.0, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    assert groups_with_signal(rewards, groups, eps=1e-3).tolist() == [False, False, True, True]
