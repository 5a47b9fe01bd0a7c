"""Pieces shared by every training loop: batching, token log-probs, optimiser and schedule."""

from __future__ import annotations

import math
import random
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


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
    prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]], pad_id: int,
    masks: Sequence[Sequence[int] | None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded prompt+completion batch and a mask that is 1 on completion tokens only.

    `masks` (one per row, aligned with its completion; None: all ones) narrows the mask further,
    e.g. to the policy's tokens of a multi-turn trajectory (0 on observation tokens).
    """
    ids, attention = pad_batch([list(p) + list(c) for p, c in zip(prompts, completions)], pad_id)
    completion_mask = torch.zeros_like(attention)
    for row, (p, c) in enumerate(zip(prompts, completions)):
        mask = masks[row] if masks is not None else None
        if mask is None:
            completion_mask[row, len(p) : len(p) + len(c)] = 1
        else:
            if len(mask) != len(c):
                raise ValueError(f"row {row}: a loss mask of {len(mask)} tokens for a completion of {len(c)}")
            completion_mask[row, len(p) : len(p) + len(c)] = torch.tensor(list(mask), dtype=completion_mask.dtype)
    return ids, attention, completion_mask


LOGIT_CHUNK_ELEMENTS = 2**25  # fp32 logits alive at once (128 MiB): ~220 tokens of a 151,936-token vocabulary


def _chunk_logprobs(
    features: torch.Tensor, targets: torch.Tensor, head: Callable[[torch.Tensor], torch.Tensor],
    with_entropy: bool, entropy_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) = logit[target] - logsumexp(logits) of some tokens, and their entropy
    (empty without `with_entropy`), from the same fp32 logits."""
    logits = head(features).float()
    lse = logits.logsumexp(-1)
    logp = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse
    entropy = logits.new_zeros(0)
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            # from log p = z - logsumexp(z), not softmax(z): softmax's CPU backward sums in an order
            # that depends on the thread count, and a run must not change with it (resume, CI)
            shifted = logits - lse.unsqueeze(-1)
            entropy = -(shifted.exp() * shifted).sum(-1)
    return logp, entropy


def token_logprobs(
    model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor, with_entropy: bool = False,
    entropy_grad: bool = True, positions: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given the ones before it, aligned with `ids`.

    Only the tokens where `positions` (same shape as `ids`, e.g. the completion mask) is
    nonzero are scored, every one after the first by default; the others, and position 0
    (which has no context), get 0. The vocabulary-wide logits exist only for a chunk of
    scored tokens at a time (`LOGIT_CHUNK_ELEMENTS`), and under autograd each chunk is
    recomputed in the backward pass instead of kept. With `with_entropy`, also the entropy
    of the predictive distribution at each scored token (same alignment) from the same
    logits; `entropy_grad=False` computes it outside the autograd graph (for logging only).
    """
    wanted = torch.ones_like(ids[:, 1:], dtype=torch.bool) if positions is None else positions[:, 1:].bool()
    out = model(input_ids=ids, attention_mask=attention, output_hidden_states=True, logits_to_keep=1)
    hidden, head = out.hidden_states[-1], model.get_output_embeddings()
    if head is None or not torch.allclose(head(hidden[:, -1]).float(), out.logits[:, -1].float(), rtol=1e-3, atol=1e-4):
        # a model whose logits are more than its output layer (soft-capping, scaling): its own logits
        hidden, head = model(input_ids=ids, attention_mask=attention).logits, torch.nn.Identity()
    features, targets = hidden[:, :-1][wanted], ids[:, 1:][wanted]
    size = max(1, LOGIT_CHUNK_ELEMENTS // max(1, model.config.get_text_config().vocab_size))
    parts = []
    for lo in range(0, len(targets), size):
        args = (features[lo : lo + size], targets[lo : lo + size], head, with_entropy, entropy_grad)
        if torch.is_grad_enabled():
            parts.append(checkpoint(_chunk_logprobs, *args, use_reentrant=False))
        else:
            parts.append(_chunk_logprobs(*args))
    logp = features.new_zeros(wanted.shape, dtype=torch.float32)
    logp[wanted] = torch.cat([p[0] for p in parts]) if parts else logp.new_zeros(0)
    entropy = None
    if with_entropy:
        entropy = logp.new_zeros(wanted.shape)
        entropy[wanted] = torch.cat([p[1] for p in parts]) if parts else logp.new_zeros(0)
        entropy = F.pad(entropy, (1, 0))
    return F.pad(logp, (1, 0)), entropy


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
