"""Pieces shared by every training loop: batching, token log-probs, optimiser and schedule."""

from __future__ import annotations

import math
import random
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from rlvr_factory.rl.entropy import entropy_from_logits


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch, and make torch kernels deterministic."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True, warn_only=True)


def pad_batch(
    sequences: Sequence[Sequence[int]], pad_id: int, left: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack token lists into (input_ids, attention_mask), padding right (or left)."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        span = slice(width - len(seq), width) if left else slice(0, len(seq))
        ids[row, span] = torch.tensor(list(seq), dtype=torch.long)
        mask[row, span] = 1
    return ids, mask


def join_prompt_completion(
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+completion batch and a mask that is 1 on completion tokens only."""
    ids, attention = pad_batch([list(p) + list(c) for p, c in zip(prompts, completions)], pad_id)
    completion_mask = torch.zeros_like(attention)
    for row, (p, c) in enumerate(zip(prompts, completions)):
        completion_mask[row, len(p) : len(p) + len(c)] = 1
    return ids, attention, completion_mask


def token_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given the ones before it, aligned with `ids`.

    Position 0 (which has no context) gets 0. With `with_entropy`, also the entropy of
    the predictive distribution at each position (same alignment); `entropy_grad=False`
    computes it outside the autograd graph (for logging only).
    """
    logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1].float()
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    logp = F.pad(logp, (1, 0))
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = F.pad(entropy_from_logits(logits if entropy_grad else logits.detach()), (1, 0))
    return logp, entropy


def make_optimizer(
    model: torch.nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95)
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms and biases)."""
    decay = [p for p in model.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas)


SCHEDULES = ("cosine", "linear", "constant")


def lr_factor(kind: str, step: int, warmup_steps: int, total_steps: int) -> float:
    """The LR multiplier at `step`: linear warm-up, then `cosine` decay to 10% at `total_steps`,
    `linear` decay to 0, or `constant`."""
    if kind not in SCHEDULES:
        raise ValueError(f"lr schedule must be cosine, linear or constant, got {kind!r}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if kind == "cosine":
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))
    if kind == "linear":
        return 1.0 - progress
    return 1.0


def lr_schedule(
    optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step scheduler following `lr_factor`."""
    lr_factor(kind, 0, warmup_steps, total_steps)  # refuse an unknown kind now, not at the first step
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: lr_factor(kind, step, warmup_steps, total_steps))


def minibatches(n: int, size: int, rng: random.Random) -> Iterator[list[int]]:
    """Shuffled index minibatches covering range(n) once."""
    order = list(range(n))
    rng.shuffle(order)
    for start in range(0, n, size):
        yield order[start : start + size]
