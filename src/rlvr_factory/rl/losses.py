"""Policy-gradient losses: pure functions of log-probs, advantages and masks."""

from __future__ import annotations

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over positions where `mask` is 1 (0 when the mask is empty)."""
    keep = mask.bool()
    return torch.where(keep, values, torch.zeros_like(values)).sum() / keep.sum().clamp(min=1)


AGGREGATIONS = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def loss_units(mask: torch.Tensor, mode: str) -> float:
    """What `aggregate_loss` divides by: unmasked tokens (`token-mean`) or sequences with at
    least one unmasked token (the `seq-mean-*` modes). At least 1."""
    keep = mask.bool()
    count = keep.sum() if mode == "token-mean" else keep.any(dim=-1).sum()
    return float(max(1, int(count)))


def aggregate_loss(
    token_loss: torch.Tensor, mask: torch.Tensor, mode: str = "token-mean", norm_length: int | None = None,
    units: float | None = None,
) -> torch.Tensor:
    """Reduce a (batch, time) loss to a scalar over the positions where `mask` is 1.

    `token-mean`: every token of the batch weighs the same (DAPO, Yu et al. 2025, Eq. 12).
    `seq-mean-token-mean`: mean per sequence, then over sequences (GRPO, Shao et al. 2024, Eq. 3).
    `seq-mean-token-sum-norm`: sum per sequence over a constant `norm_length` (default: the
    batch width), then mean over sequences; no length bias (Dr. GRPO, Liu et al. 2025, Eq. 2).
    Rows with no unmasked token are left out of the sequence means.

    `units` overrides the divisor (`loss_units` of the whole minibatch): summing the
    aggregates of micro-batches that share it gives the minibatch's aggregate, which is what
    gradient accumulation needs.
    """
    if mode not in AGGREGATIONS:
        raise ValueError(f"loss aggregation must be one of {AGGREGATIONS}, got {mode!r}")
    keep = mask.bool()
    values = torch.where(keep, token_loss, torch.zeros_like(token_loss))
    if mode == "token-mean":
        total = values.sum()
    elif mode == "seq-mean-token-mean":
        total = (values.sum(-1) / keep.sum(-1).clamp(min=1)).sum()
    else:
        total = (values.sum(-1) / (norm_length or token_loss.shape[-1])).sum()
    return total / (units if units is not None else loss_units(mask, mode))


def clipped_policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: str = "token-mean",
    norm_length: int | None = None,
    units: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (Schulman et al. 2017, Eq. 7), aggregated by `aggregation`.

    L_t = -min(rho_t A, clip(rho_t, 1 - clip_low, 1 + clip_high) A), with
    rho_t = exp(logp_t - old_logp_t) and the sequence's advantage A broadcast over its
    tokens. Separate bounds allow DAPO's clip-higher. With `dual_clip = c > 1`, tokens with
    A < 0 have their loss capped at -c A (dual-clip PPO, Ye et al. 2020, Eq. 5), so a huge
    ratio on a bad action cannot blow the update up. `norm_length` and `units` go to
    `aggregate_loss`. Returns (loss, clipped token fraction).
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
    adv = advantages.unsqueeze(-1) if advantages.dim() == logp.dim() - 1 else advantages
    ratio = torch.exp(logp - old_logp)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    token_loss = -torch.minimum(unclipped, clipped)
    if dual_clip is not None:
        token_loss = torch.where(adv < 0, torch.minimum(token_loss, -dual_clip * adv), token_loss)
    clip_fraction = masked_mean((clipped < unclipped).float(), mask)
    return aggregate_loss(token_loss, mask, aggregation, norm_length, units), clip_fraction
