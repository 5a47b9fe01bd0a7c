"""The gap between the sampling engine's log-probs and the trainer's, and the importance weight that corrects it.

The engine (vLLM, or transformers' `generate`) samples with its own kernels, and, with
asynchronous rounds, from an older policy; the trainer recomputes the log-probs of the same
tokens. Both are pure functions of per-token log-prob tensors and a mask of the tokens that count.
"""

from __future__ import annotations

import torch

from rlvr_factory.rl.kl import kl_penalty
from rlvr_factory.rl.losses import masked_mean


def logprob_mismatch(trainer_logp: torch.Tensor, sampling_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Mean and max |trainer - sampling| log-prob over the masked tokens, and KL(engine || trainer)
    estimated with k3 (Schulman 2020) on the engine's samples, as 0-dim tensors (nothing waits for the device)."""
    diff = (trainer_logp - sampling_logp).abs()
    on = mask.bool()
    return {
        "abs_mean": masked_mean(diff, mask),
        "abs_max": torch.where(on, diff, torch.zeros_like(diff)).amax() if diff.numel() else diff.new_zeros(()),
        "kl": masked_mean(kl_penalty(sampling_logp, trainer_logp, "k3"), mask),
    }


def truncated_importance_weights(trainer_logp: torch.Tensor, sampling_logp: torch.Tensor, cap: float) -> torch.Tensor:
    """Truncated importance sampling (TIS; Yao et al. 2025, "Your Efficient RL Framework Secretly Brings
    You Off-Policy RL Training", Eq. 4): w_t = min(pi_trainer(a_t) / pi_engine(a_t), C), detached.

    Multiplying each token's policy-gradient term by w_t makes the update an expectation under the
    trainer's policy although the tokens were drawn by the engine; the cap C bounds the variance.
    """
    if cap <= 0:
        raise ValueError(f"the TIS cap must be positive, got {cap}")
    return torch.exp(trainer_logp.detach() - sampling_logp).clamp(max=cap)
