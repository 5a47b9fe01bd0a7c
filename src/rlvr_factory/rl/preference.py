"""Preference losses: pure functions of sequence log-probs (DPO, IPO) or scalar rewards (Bradley-Terry).

Every function takes one value per preference pair (chosen `w`, rejected `l`) and returns the
per-pair loss, so the caller chooses the reduction (the training loops take the mean).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

PREFERENCE_LOSSES = ("dpo", "ipo")


def sequence_logps(token_logp: torch.Tensor, mask: torch.Tensor, average: bool = False) -> torch.Tensor:
    """log pi(y | x) of each row: the sum of its token log-probs where `mask` is 1 (the mean with `average`)."""
    keep = mask.bool()
    total = torch.where(keep, token_logp, torch.zeros_like(token_logp)).sum(-1)
    return total / keep.sum(-1).clamp(min=1) if average else total


def bradley_terry_loss(
    chosen_rewards: torch.Tensor, rejected_rewards: torch.Tensor, margin: torch.Tensor | None = None
) -> torch.Tensor:
    """The reward model's pairwise loss, -log sigma(r(x, y_w) - r(x, y_l) - m) per pair.

    The Bradley-Terry likelihood of the preference (InstructGPT, Ouyang et al. 2022, Eq. 1);
    `margin` m (one per pair, NaN: none) asks for a larger gap on clearer preferences
    (Llama 2, Touvron et al. 2023, Eq. 2).
    """
    gap = chosen_rewards - rejected_rewards
    if margin is not None:
        gap = gap - torch.nan_to_num(margin.to(gap.dtype), nan=0.0)
    return -F.logsigmoid(gap)


def trimmed_mean(losses: torch.Tensor, drop: float) -> torch.Tensor:
    """The mean of `losses` without the `drop` share of the largest (at least one kept).

    The small-loss trick against label noise (Co-teaching, Han et al. 2018): a mislabelled pair is
    the one the model disagrees with most, so leaving each batch's highest losses out of the
    gradient keeps flipped labels from pulling against the rest; set `drop` near the noise rate.
    """
    if not 0.0 <= drop < 1.0:
        raise ValueError(f"drop must be in [0, 1), got {drop}")
    k = min(int(drop * len(losses)), len(losses) - 1)
    return losses.mean() if k <= 0 else losses.topk(len(losses) - k, largest=False).values.mean()


def preference_logits(
    policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor
) -> torch.Tensor:
    """h = [log pi(y_w) - log pi_ref(y_w)] - [log pi(y_l) - log pi_ref(y_l)], the implicit reward gap over beta."""
    return (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)


def dpo_loss(
    policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
    beta: float = 0.1, label_smoothing: float = 0.0,
) -> torch.Tensor:
    """DPO's loss per pair, -log sigma(beta h) (Rafailov et al. 2023, Eq. 7), h from `preference_logits`.

    With `label_smoothing` eps > 0, each label is taken to be flipped with probability eps:
    -(1 - eps) log sigma(beta h) - eps log sigma(-beta h) (conservative DPO: Mitchell 2023, "A note
    on DPO with noisy preferences"), whose optimum keeps h finite when pairs are noisy.
    """
    if beta <= 0:
        raise ValueError(f"DPO needs beta > 0, got {beta}")
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), got {label_smoothing}")
    logits = beta * preference_logits(policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    return -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)


def ipo_loss(
    policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
    beta: float = 0.1,
) -> torch.Tensor:
    """IPO's loss per pair, (h - 1 / (2 tau))^2 with tau = `beta` (Azar et al. 2023, Eq. 17).

    A squared loss regresses the log-ratio gap to a finite target instead of pushing it to
    infinity, so it does not overfit deterministic preferences. The IPO authors (and TRL) feed
    it length-averaged log-probs: pass `sequence_logps(..., average=True)`.
    """
    if beta <= 0:
        raise ValueError(f"IPO needs beta (tau) > 0, got {beta}")
    return (preference_logits(policy_chosen, policy_rejected, ref_chosen, ref_rejected) - 1.0 / (2.0 * beta)) ** 2


def implicit_rewards(policy_logps: torch.Tensor, ref_logps: torch.Tensor, beta: float) -> torch.Tensor:
    """DPO's implicit reward of each completion, beta (log pi(y|x) - log pi_ref(y|x)) (Rafailov et al. 2023, Eq. 5)."""
    return beta * (policy_logps - ref_logps)
