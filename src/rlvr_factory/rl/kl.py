"""Per-token KL estimators between the policy and a reference (Schulman 2020, "Approximating KL")."""

from __future__ import annotations

import torch


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str = "k3") -> torch.Tensor:
    """Estimate KL(pi || pi_ref) per token from log-probs of tokens sampled from pi.

    With log r = ref_logp - logp: k1 = -log r (unbiased, high variance), k2 = (log r)^2 / 2
    (biased, low variance), k3 = (r - 1) - log r (unbiased, low variance, always >= 0).
    """
    log_ratio = ref_logp - logp
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.pow(2)
    if kind == "k3":
        return torch.exp(log_ratio) - 1.0 - log_ratio
    raise ValueError(f"kl kind must be k1, k2 or k3, got {kind!r}")
