"""Per-token KL estimators between the policy and a reference (Schulman 2020, "Approximating KL"),
and the KL penalty placed in the reward instead of the loss."""

from __future__ import annotations

import torch

KL_KINDS = ("k1", "k2", "k3")
KL_PLACEMENTS = ("loss", "reward")


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
    raise ValueError(f"kl kind must be one of {KL_KINDS}, got {kind!r}")


def kl_shaped_rewards(
    rewards: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, coef: float,
    kind: str = "k1",
) -> torch.Tensor:
    """Sequence rewards with the KL penalty folded in (Ziegler et al. 2019, Eq. 2; InstructGPT,
    Ouyang et al. 2022, Eq. 2): R(x, y) = r(x, y) - beta * sum_t KL_t over the completion tokens.

    `logp` and `ref_logp` are the rollout policy's and the reference's (batch, time) token
    log-probs, `mask` is 1 on completion tokens. The penalty carries no gradient: it shapes
    the reward the advantages are computed from.
    """
    per_token = kl_penalty(logp.detach(), ref_logp.detach(), kind)
    per_seq = torch.where(mask.bool(), per_token, torch.zeros_like(per_token)).sum(-1)
    return rewards.float() - coef * per_seq
