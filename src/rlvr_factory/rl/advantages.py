"""Advantage estimators: pure functions from per-sample rewards to per-sample advantages."""

from __future__ import annotations

import torch


def grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantages (GRPO; Shao et al. 2024, DeepSeekMath, Eq. 3).

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps), with the unbiased std over the
    samples that share the prompt. `scale_by_std=False` gives Dr. GRPO (Liu et al. 2025),
    which drops the division. A group of one, or one whose rewards are all equal, gets 0.
    """
    rewards = rewards.float()
    advantages = torch.zeros_like(rewards)
    for gid in torch.unique(group_ids):
        idx = group_ids == gid
        group = rewards[idx]
        if group.numel() < 2:
            continue
        centred = group - group.mean()
        advantages[idx] = centred / (group.std() + eps) if scale_by_std else centred
    return advantages
