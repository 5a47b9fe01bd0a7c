"""Length handling: DAPO's soft overlong penalty and the truncated-completion loss mask."""

from __future__ import annotations

import torch


def overlong_penalty(lengths: torch.Tensor, max_length: int, cache_length: int) -> torch.Tensor:
    """DAPO's soft overlong punishment (Yu et al. 2025, Eq. 13), added to the reward.

    R_length(y) = 0 if |y| <= L_max - L_cache; ((L_max - L_cache) - |y|) / L_cache if
    L_max - L_cache < |y| <= L_max; -1 if |y| > L_max. The penalty ramps linearly from 0
    to -1 over the last `cache_length` tokens of the budget.
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"overlong cache_length must be in (0, max_length={max_length}], got {cache_length}")
    lengths = lengths.float()
    soft_start = max_length - cache_length
    ramp = (soft_start - lengths) / cache_length
    return torch.where(lengths <= soft_start, torch.zeros_like(lengths), torch.where(lengths <= max_length, ramp, -torch.ones_like(lengths)))


def mask_truncated(mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """The loss mask with every truncated completion's row zeroed (DAPO's overlong filtering,
    Yu et al. 2025, Sec. 3.4): a completion cut off by the budget is not judged by its reward."""
    return mask * (~truncated.bool()).unsqueeze(-1).to(mask.dtype)
