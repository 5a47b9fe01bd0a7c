"""Declared reward components -> the value and weight tensors of per-component normalisation."""

import pytest
import torch

from rlvr_factory.training.components import REST, component_tensors
from rlvr_factory.verifiers.score import declared_components


def test_a_breakdown_declares_the_components_it_gives_a_weight():
    breakdown = {"outcome": 1.0, "format": 0.0, "steps": 3.0, "weight.outcome": 1.0, "weight.format": 0.2,
                 "weight.process": 0.5}
    # `steps` has no weight (not a component); `process` has a weight but no value (0)
    assert declared_components(breakdown) == {"format": (0.0, 0.2), "outcome": (1.0, 1.0), "process": (0.0, 0.5)}
    assert declared_components({"outcome": 1.0}) == {}


def test_the_weighted_columns_sum_to_each_samples_reward():
    declared = [{"outcome": (1.0, 1.0), "format": (1.0, 0.1)}, {"outcome": (0.0, 1.0), "format": (1.0, 0.1)}, {}]
    rewards = torch.tensor([1.1 - 0.3, 0.1, 0.7])  # sample 0 carries a -0.3 shaping penalty; sample 2 declares nothing
    values, weights, names = component_tensors(declared, rewards)
    assert names == ["format", "outcome", REST]
    torch.testing.assert_close((values * weights).sum(dim=1), rewards)
    assert values[0, 2].item() == pytest.approx(-0.3) and values[1, 2].item() == 0.0  # float noise is no remainder
    assert weights[2].tolist() == [0.0, 0.0, 1.0] and values[2, 2].item() == pytest.approx(0.7)
