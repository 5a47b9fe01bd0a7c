"""DAPO's dynamic sampling filter: keep only groups whose rewards carry a learning signal."""

from __future__ import annotations

import torch


def groups_with_signal(rewards: torch.Tensor, group_ids: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """A per-sample bool: does the sample's group have rewards that are not all equal?

    DAPO (Yu et al. 2025, Eq. 11) requires 0 < |{o_i : is_equivalent(a, o_i)}| < G: a group
    whose samples are all right or all wrong has zero advantage everywhere (Eq. 3) and
    gives no gradient. Here any group whose reward spread (max - min) exceeds `eps` is kept,
    which also covers shaped, non-binary rewards. A group of one never has a signal.
    """
    rewards = rewards.float()
    keep = torch.zeros_like(rewards, dtype=torch.bool)
    for gid in torch.unique(group_ids):
        idx = group_ids == gid
        group = rewards[idx]
        keep[idx] = bool(group.max() - group.min() > eps)
    return keep
