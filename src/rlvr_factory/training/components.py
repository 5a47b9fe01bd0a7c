"""Reward components of a round's samples as the tensors per-component normalisation reads."""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

REST = "rest"  # what the declared components leave of the trained reward (undeclared parts, shaping penalties)
TOLERANCE = 1e-6  # a remainder smaller than this is float error, not a component


def component_tensors(
    components: Sequence[Mapping[str, tuple[float, float]]], rewards: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """Values (N, K) and weights (N, K) of every sample's declared components (`name -> (value,
    weight)`; a component a sample does not declare has value and weight 0), plus `REST`: the
    trained reward minus the weighted declared components, with weight 1. So the weighted sum of
    the columns is each sample's reward, and a verifier that declares nothing is one component."""
    names = sorted({name for c in components for name in c} - {REST})
    values = torch.zeros(len(components), len(names) + 1)
    weights = torch.zeros(len(components), len(names) + 1)
    for i, declared in enumerate(components):
        for k, name in enumerate(names):
            values[i, k], weights[i, k] = declared.get(name, (0.0, 0.0))
    rest = rewards.float() - (values * weights).sum(dim=1)
    values[:, -1] = torch.where(rest.abs() < TOLERANCE, torch.zeros_like(rest), rest)
    weights[:, -1] = 1.0
    return values, weights, [*names, REST]
