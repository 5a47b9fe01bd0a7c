"""One RL update round: group-relative advantages, then PPO-clipped policy-gradient steps.

Old log-probabilities are computed once per round; the round's samples are then swept
in shuffled minibatches for `epochs` passes. The optimizer's moments persist across
rounds in `Policy.optimizer_state`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch

from rlvr_factory.models.policy import Policy
from rlvr_factory.rl.advantages import compute_advantages
from rlvr_factory.rl.kl import kl_penalty
from rlvr_factory.rl.losses import clipped_policy_loss, masked_mean
from rlvr_factory.training.lm import join_prompt_completion, lr_factor, make_optimizer, minibatches, token_logprobs


@dataclass(frozen=True)
class UpdateConfig:
    lr: float = 2e-4  # policy learning rate
    warmup_steps: int = 0  # optimizer steps (counted across rounds) of linear LR warm-up
    weight_decay: float = 0.0  # AdamW weight decay
    adam_beta2: float = 0.999  # second-moment decay; a long memory keeps rare large steps in check
    epochs: int = 1  # passes over the round's samples
    minibatch_size: int = 128  # samples per optimizer step
    clip_low: float = 0.2  # PPO ratio clip below 1
    clip_high: float = 0.2  # PPO ratio clip above 1 (DAPO clip-higher when larger)
    advantage_estimator: str = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp
    loss_aggregation: str = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    dual_clip: float | None = None  # cap on the loss of negative-advantage tokens (e.g. 3.0); None: off
    kl_coef: float = 0.0  # weight of the KL-to-reference term in the loss; 0 disables it
    kl_kind: str = "k3"  # KL estimator: k1 | k2 | k3
    entropy_coef: float = 0.0  # entropy bonus weight
    max_grad_norm: float = 1.0  # global gradient-norm clip
    seed: int = 0  # minibatch order


@dataclass
class Sample:
    group: str  # samples of the same prompt share a group (the task id)
    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float


@torch.no_grad()
def _logprobs(model, batch: Sequence[Sample], pad_id: int, device, chunk: int) -> list[torch.Tensor]:
    out = []
    for lo in range(0, len(batch), chunk):
        part = batch[lo : lo + chunk]
        ids, attn, _ = join_prompt_completion([s.prompt_ids for s in part], [s.completion_ids for s in part], pad_id)
        logp, _ = token_logprobs(model, ids.to(device), attn.to(device))
        out.extend(logp.cpu())
    return out


def _pad_rows(rows: list[torch.Tensor], width: int) -> torch.Tensor:
    return torch.stack([torch.nn.functional.pad(r[:width], (0, max(0, width - len(r)))) for r in rows])


def rl_update(
    policy: Policy, samples: Sequence[Sample], config: UpdateConfig, reference: torch.nn.Module | None = None
) -> dict[str, float]:
    """Apply one round of clipped policy-gradient updates in place; returns the round's stats."""
    if not samples:
        raise ValueError("rl_update got no samples; every rollout was excluded")
    if config.kl_coef > 0 and reference is None:
        raise ValueError("kl_coef > 0 needs a reference model")
    model, device, pad_id = policy.model, policy.device, policy.tokenizer.pad_token_id
    groups = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in samples))}
    advantages = compute_advantages(
        config.advantage_estimator,
        torch.tensor([s.reward for s in samples]),
        torch.tensor([groups[s.group] for s in samples]),
    )
    old_logp = _logprobs(model, samples, pad_id, device, config.minibatch_size)
    ref_logp = _logprobs(reference, samples, pad_id, device, config.minibatch_size) if config.kl_coef > 0 else None

    optimizer = make_optimizer(model, config.lr, config.weight_decay, (0.9, config.adam_beta2))
    if policy.optimizer_state is not None:
        optimizer.load_state_dict(policy.optimizer_state)
    rng = random.Random(config.seed)
    first_state = next(iter(optimizer.state.values()), {})
    global_step = int(first_state.get("step", 0))
    totals = {"loss": 0.0, "clip_fraction": 0.0, "entropy": 0.0, "kl": 0.0, "policy_drift_kl": 0.0, "grad_norm": 0.0}
    steps = 0
    model.train()
    for _ in range(config.epochs):
        for idx in minibatches(len(samples), config.minibatch_size, rng):
            part = [samples[i] for i in idx]
            ids, attn, cmask = join_prompt_completion(
                [s.prompt_ids for s in part], [s.completion_ids for s in part], pad_id
            )
            ids, attn, cmask = ids.to(device), attn.to(device), cmask.to(device)
            logp, entropy = token_logprobs(model, ids, attn, with_entropy=True)
            width = ids.shape[1]
            old = _pad_rows([old_logp[i] for i in idx], width).to(device)
            loss, clip_fraction = clipped_policy_loss(
                logp, old, advantages[idx].to(device), cmask, config.clip_low, config.clip_high,
                config.dual_clip, config.loss_aggregation,
            )
            mean_entropy = masked_mean(entropy, cmask)
            drift = masked_mean(kl_penalty(logp.detach(), old, "k3"), cmask)
            kl = torch.zeros((), device=device)
            if ref_logp is not None:
                ref = _pad_rows([ref_logp[i] for i in idx], width).to(device)
                kl = masked_mean(kl_penalty(logp, ref, config.kl_kind), cmask)
            total = loss + config.kl_coef * kl - config.entropy_coef * mean_entropy
            for group in optimizer.param_groups:
                group["lr"] = config.lr * lr_factor("constant", global_step, config.warmup_steps, 0)
            global_step += 1
            optimizer.zero_grad(set_to_none=True)
            total.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            for key, value in (("loss", loss), ("clip_fraction", clip_fraction), ("entropy", mean_entropy), ("kl", kl), ("policy_drift_kl", drift), ("grad_norm", grad_norm)):
                totals[key] += float(value.detach())
            steps += 1
    model.eval()
    policy.optimizer_state = optimizer.state_dict()
    policy.version += 1
    stats = {k: v / steps for k, v in totals.items()}
    stats["advantage_abs_mean"] = float(advantages.abs().mean())
    stats["optimizer_steps"] = float(steps)
    return stats
