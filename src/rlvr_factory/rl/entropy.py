"""Entropy of the policy's next-token distribution (logged every round; optional bonus)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Shannon entropy H = -sum_v p_v log p_v of softmax(logits) over the last axis.

    The entropy bonus of A3C (Mnih et al. 2016, Sec. 4) subtracts coef * H from the loss
    to keep exploration alive; veRL/OpenRLHF aggregate it over completion tokens like the
    policy loss.
    """
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)
