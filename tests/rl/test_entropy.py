"""Entropy of the next-token distribution."""

import math

import pytest
import torch

from rlvr_factory.rl.entropy import entropy_from_logits


def test_uniform_logits_have_entropy_log_vocab():
    assert entropy_from_logits(torch.zeros(2, 3, 8)).flatten().tolist() == pytest.approx([math.log(8)] * 6)


def test_a_two_way_distribution_matches_the_hand_computed_entropy():
    # softmax([ln 3, 0]) = [0.75, 0.25]
    h = entropy_from_logits(torch.tensor([math.log(3.0), 0.0])).item()
    assert h == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)))


def test_a_near_deterministic_distribution_has_near_zero_entropy():
    assert entropy_from_logits(torch.tensor([100.0, 0.0, 0.0])).item() == pytest.approx(0.0, abs=1e-6)
