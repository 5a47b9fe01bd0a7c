"""Bradley-Terry reward-model training on preference pairs, and its held-out pair accuracy."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import torch

from rlvr_factory.models.policy import Policy
from rlvr_factory.models.reward_model import sequence_rewards
from rlvr_factory.rl.preference import bradley_terry_loss, trimmed_mean
from rlvr_factory.schema import configurable, parse
from rlvr_factory.training.pairs import (
    Checkpoint, EncodedPair, PairTrainConfig, pair_batch, ranking_metrics, real_number, train_on_pairs, whole_number,
)


@dataclass(frozen=True)
class RewardModelConfig:
    train: PairTrainConfig = field(default_factory=PairTrainConfig)  # the optimisation loop
    use_margin: bool = False  # subtract each pair's margin from the reward gap (Llama 2); pairs without one use 0
    eval_batch_size: int = 64  # pairs per forward pass when scoring held-out pairs
    drop_highest_loss: float = 0.0  # share of each batch's pairs with the highest loss left out of the gradient (label noise)

    def __post_init__(self) -> None:
        if not isinstance(self.use_margin, bool):
            raise ValueError(f"use_margin must be true or false, got {self.use_margin!r}")
        whole_number(self.eval_batch_size, "eval_batch_size", 1)
        real_number(self.drop_highest_loss, "drop_highest_loss", 0.0, 1.0)

    @classmethod
    def from_params(cls, params: Any) -> RewardModelConfig:
        """From the `reward_model` parameter block's `train`, `use_margin`, `eval_batch_size` and `drop_highest_loss`
        (checked by `schema.parse`; a key left out takes this class's default)."""
        values = params if isinstance(params, Mapping) else {k: getattr(params, k) for k in configurable(cls)}
        return parse(cls, {k: v for k, v in values.items() if k in configurable(cls)}, "reward_model")


def pair_rewards(model: torch.nn.Module, batch: Sequence[EncodedPair], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """r(x, y_w) and r(x, y_l) of each pair, from one forward pass over both completions."""
    ids, attention, mask = pair_batch(batch, pad_id, next(model.parameters()).device)
    rewards = sequence_rewards(model, ids, attention, mask)
    return rewards[: len(batch)], rewards[len(batch):]


def bt_loss_fn(pad_id: int, use_margin: bool, drop_highest: float = 0.0):
    """The reward model's loss over a batch: the Bradley-Terry loss's mean (without the `drop_highest`
    share of the largest, `trimmed_mean`), with per-pair accuracy and rewards."""
    def loss(model: torch.nn.Module, batch: Sequence[EncodedPair], _: Sequence[int]) -> dict[str, torch.Tensor]:
        chosen, rejected = pair_rewards(model, batch, pad_id)
        margin = torch.tensor([p.margin for p in batch], device=chosen.device) if use_margin else None
        return {"chosen_reward": chosen.detach(), "rejected_reward": rejected.detach(),  # a NaN reward is named first
                "loss": trimmed_mean(bradley_terry_loss(chosen, rejected, margin), drop_highest),
                "accuracy": (chosen > rejected).float().detach(), "margin": (chosen - rejected).detach()}
    return loss


@torch.inference_mode()
def pair_accuracy(reward_model: Policy, pairs: Sequence[EncodedPair], batch_size: int = 64,
                  prefix: str = "val_") -> dict[str, float]:
    """Held-out agreement with the preferences (`ranking_metrics` of the rewards): the share of
    pairs with r(chosen) > r(rejected), overall and per `kind`, the mean margin and rewards.

    A reward that is not finite stops with the batch's pair ids named.
    """
    if not pairs:
        raise ValueError("pair_accuracy got no pairs; is the held-out preference split empty?")
    model = reward_model.model
    model.eval()
    chosen_all, rejected_all = [], []
    for lo in range(0, len(pairs), batch_size):
        batch = pairs[lo : lo + batch_size]
        chosen, rejected = pair_rewards(model, batch, reward_model.tokenizer.pad_token_id)
        if not (torch.isfinite(chosen).all() and torch.isfinite(rejected).all()):
            raise FloatingPointError(f"the reward model produced a non-finite reward on the held-out batch of pairs "
                                     f"{[p.pair_id for p in batch][:8]}; it cannot be used as a reward")
        chosen_all.append(chosen.cpu())
        rejected_all.append(rejected.cpu())
    return ranking_metrics(pairs, torch.cat(chosen_all), torch.cat(rejected_all), prefix)


def train_reward_model(
    reward_model: Policy, train: Sequence[EncodedPair], held_out: Sequence[EncodedPair], config: RewardModelConfig,
    checkpoint: Checkpoint | None = None,
) -> list[dict[str, float]]:
    """Train the reward model in place on `train` pairs (Bradley-Terry); returns the per-step history
    with the held-out pair accuracy (`val_*`) every `config.train.eval_every` steps and at the end."""
    return train_on_pairs(
        reward_model, train, config.train,
        bt_loss_fn(reward_model.tokenizer.pad_token_id, config.use_margin, config.drop_highest_loss),
        evaluate=lambda: pair_accuracy(reward_model, held_out, config.eval_batch_size), checkpoint=checkpoint,
        settings={"use_margin": config.use_margin, "drop_highest_loss": config.drop_highest_loss}, desc="reward model",
    )
