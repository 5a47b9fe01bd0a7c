"""Direct preference optimisation: train the policy on pairs against a frozen reference (DPO, IPO).

The reference is the policy as training starts (the SFT policy; with LoRA, the adapters start at
zero, so the same model): its sequence log-probs of every pair are computed once before the first
step, so no second model is held in memory and a resumed run finds the same reference.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import torch

from rlvr_factory.models.policy import Policy
from rlvr_factory.rl.preference import PREFERENCE_LOSSES, dpo_loss, implicit_rewards, ipo_loss, sequence_logps
from rlvr_factory.training.lm import token_logprobs
from rlvr_factory.schema import configurable, parse
from rlvr_factory.training.pairs import (
    Checkpoint, EncodedPair, PairTrainConfig, pair_batch, ranking_metrics, real_number, train_on_pairs, whole_number,
)


@dataclass(frozen=True)
class DPOConfig:
    train: PairTrainConfig = field(default_factory=PairTrainConfig)  # the optimisation loop
    loss: str = "dpo"  # dpo (Rafailov et al. 2023) | ipo (Azar et al. 2023)
    beta: float = 0.1  # strength of the KL anchor to the reference (IPO's tau)
    label_smoothing: float = 0.0  # eps: assumed share of flipped labels (conservative DPO); dpo only
    eval_batch_size: int = 64  # pairs per forward pass when scoring held-out pairs

    def __post_init__(self) -> None:
        real_number(self.beta, "beta", 0.0, strict=True)
        real_number(self.label_smoothing, "label_smoothing", 0.0, 0.5)
        whole_number(self.eval_batch_size, "eval_batch_size", 1)
        if self.loss not in PREFERENCE_LOSSES:
            raise ValueError(f"preference loss must be one of {PREFERENCE_LOSSES}, got {self.loss!r}")
        if self.loss == "ipo" and self.label_smoothing:
            raise ValueError("label_smoothing applies to the dpo loss only; set it to 0 with loss: ipo")

    @property
    def average(self) -> bool:
        """IPO compares length-averaged log-probs; DPO compares sums."""
        return self.loss == "ipo"

    @classmethod
    def from_params(cls, params: Any) -> DPOConfig:
        """From the `dpo` parameter block (`train` and the loss keys; checked by `schema.parse`, a key left out
        takes this class's default)."""
        values = params if isinstance(params, Mapping) else {k: getattr(params, k) for k in configurable(cls)}
        return parse(cls, {k: v for k, v in values.items() if k in configurable(cls)}, "dpo")


def pair_logps(model: torch.nn.Module, batch: Sequence[EncodedPair], pad_id: int, average: bool
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(y_w | x) and log pi(y_l | x) of each pair (completion tokens only), from one forward pass."""
    ids, attention, mask = pair_batch(batch, pad_id, next(model.parameters()).device)
    logp, _ = token_logprobs(model, ids, attention)
    totals = sequence_logps(logp, mask, average)
    return totals[: len(batch)], totals[len(batch):]


@torch.inference_mode()
def reference_logps(model: torch.nn.Module, pairs: Sequence[EncodedPair], pad_id: int, average: bool,
                    batch_size: int = 64) -> torch.Tensor:
    """The reference's (chosen, rejected) log-probs of every pair, shape (n, 2), on the CPU."""
    model.eval()
    rows = []
    for lo in range(0, len(pairs), batch_size):
        chosen, rejected = pair_logps(model, pairs[lo : lo + batch_size], pad_id, average)
        rows.append(torch.stack([chosen, rejected], dim=1).cpu())
    return torch.cat(rows) if rows else torch.zeros(0, 2)


def _loss(config: DPOConfig, chosen, rejected, ref: torch.Tensor) -> torch.Tensor:
    if config.loss == "ipo":
        return ipo_loss(chosen, rejected, ref[:, 0], ref[:, 1], config.beta)
    return dpo_loss(chosen, rejected, ref[:, 0], ref[:, 1], config.beta, config.label_smoothing)


def dpo_loss_fn(pad_id: int, config: DPOConfig, reference: torch.Tensor):
    """The preference loss over a batch, with each pair's implicit rewards and whether they rank it right."""
    def loss(model: torch.nn.Module, batch: Sequence[EncodedPair], indices: Sequence[int]) -> dict[str, torch.Tensor]:
        chosen, rejected = pair_logps(model, batch, pad_id, config.average)
        ref = reference[list(indices)].to(chosen.device)
        chosen_reward = implicit_rewards(chosen.detach(), ref[:, 0], config.beta)
        rejected_reward = implicit_rewards(rejected.detach(), ref[:, 1], config.beta)
        return {"loss": _loss(config, chosen, rejected, ref).mean(), "chosen_reward": chosen_reward,
                "rejected_reward": rejected_reward, "margin": chosen_reward - rejected_reward,
                "accuracy": (chosen_reward > rejected_reward).float()}
    return loss


@torch.inference_mode()
def preference_metrics(policy: Policy, pairs: Sequence[EncodedPair], reference: torch.Tensor, config: DPOConfig,
                       prefix: str = "val_") -> dict[str, float]:
    """Held-out chosen-vs-rejected: mean implicit-reward margin, the share of pairs it ranks right
    (overall and per `kind`), the mean chosen / rejected implicit rewards and the loss."""
    policy.model.eval()
    current = reference_logps(policy.model, pairs, policy.tokenizer.pad_token_id, config.average,
                              config.eval_batch_size)
    chosen = implicit_rewards(current[:, 0], reference[:, 0], config.beta)
    rejected = implicit_rewards(current[:, 1], reference[:, 1], config.beta)
    loss = float(_loss(config, current[:, 0], current[:, 1], reference).mean())
    return {**ranking_metrics(pairs, chosen, rejected, prefix), f"{prefix}loss": loss}


def train_dpo(
    policy: Policy, train: Sequence[EncodedPair], held_out: Sequence[EncodedPair], config: DPOConfig,
    checkpoint: Checkpoint | None = None,
) -> list[dict[str, float]]:
    """Optimise the policy in place on `train` pairs against itself as it starts (the reference);
    returns the per-step history with the held-out margin and accuracy (`val_*`) every
    `config.train.eval_every` steps and at the end."""
    pad_id = policy.tokenizer.pad_token_id
    ref_train = reference_logps(policy.model, train, pad_id, config.average, config.eval_batch_size)
    ref_held_out = reference_logps(policy.model, held_out, pad_id, config.average, config.eval_batch_size)
    settings = {k: v for k, v in asdict(config).items() if k != "train"}
    return train_on_pairs(
        policy, train, config.train, dpo_loss_fn(pad_id, config, ref_train),
        evaluate=lambda: preference_metrics(policy, held_out, ref_held_out, config) if held_out else {},
        checkpoint=checkpoint, settings=settings, desc=f"{config.loss}",
    )
