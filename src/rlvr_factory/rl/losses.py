"""Policy-gradient losses: pure functions of log-probs, advantages and masks."""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over positions where `mask` is 1 (0 when the mask is empty)."""
    keep = mask.bool()
    return torch.where(keep, values, torch.zeros_like(values)).sum() / keep.sum().clamp(min=1)


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (Schulman et al. 2017, Eq. 7), token-mean aggregated.

    L = -mean_t min(rho_t A, clip(rho_t, 1 - clip_low, 1 + clip_high) A), with
    rho_t = exp(logp_t - old_logp_t) and the sequence's advantage A broadcast over its
    tokens. Separate bounds allow DAPO's clip-higher. Returns (loss, clipped fraction).
    """
    adv = advantages.unsqueeze(-1) if advantages.dim() == logp.dim() - 1 else advantages
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    loss = masked_mean(-torch.minimum(unclipped, clipped), mask)
    clip_fraction = masked_mean((clipped < unclipped).float(), mask)
    return loss, clip_fraction
