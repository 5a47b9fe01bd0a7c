"""Advantage estimators: pure functions from per-sample rewards to per-sample advantages."""

from __future__ import annotations

import torch


def grpo_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, scale_by_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """Group-relative advantages (GRPO; Shao et al. 2024, DeepSeekMath, Eq. 3).

    A_i = (r_i - mean(r_group)) / (std(r_group) + eps), with the unbiased std over the
    samples that share the prompt. `scale_by_std=False` gives Dr. GRPO (Liu et al. 2025),
    which drops the division. A group of one, or one whose rewards are all equal, gets 0.
    """
    rewards = rewards.float()
    advantages = torch.zeros_like(rewards)
    for gid in torch.unique(group_ids):
        idx = group_ids == gid
        group = rewards[idx]
        if group.numel() < 2:
            continue
        centred = group - group.mean()
        advantages[idx] = centred / (group.std() + eps) if scale_by_std else centred
    return advantages


def rloo_advantages(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """REINFORCE leave-one-out (Kool et al. 2019; Ahmadian et al. 2024, Eq. 6).

    A_i = r_i - mean_{j != i} r_j over the samples of the same prompt, which equals
    G / (G - 1) * (r_i - mean(r_group)). A group of one has no baseline and gets 0.
    """
    rewards = rewards.float()
    advantages = torch.zeros_like(rewards)
    for gid in torch.unique(group_ids):
        idx = group_ids == gid
        size = int(idx.sum())
        if size >= 2:
            group = rewards[idx]
            advantages[idx] = (group - group.mean()) * size / (size - 1)
    return advantages


def reinforce_pp_advantages(
    rewards: torch.Tensor, group_ids: torch.Tensor, group_baseline: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """REINFORCE++ (Hu 2025, Eq. 8): advantages normalised over the whole batch.

    A = (r - b) / (std_batch(r - b) + eps), with b the group mean (the "REINFORCE++-baseline"
    variant, default) or the batch mean (`group_baseline=False`). A batch whose centred
    rewards are all zero gets 0.
    """
    rewards = rewards.float()
    if group_baseline:
        centred = torch.zeros_like(rewards)
        for gid in torch.unique(group_ids):
            idx = group_ids == gid
            centred[idx] = rewards[idx] - rewards[idx].mean()
    else:
        centred = rewards - rewards.mean()
    if centred.numel() < 2 or bool((centred == 0).all()):
        return torch.zeros_like(rewards)
    return centred / (centred.std() + eps)


ESTIMATORS = ("grpo", "dr_grpo", "rloo", "reinforce_pp")


def _by_name(estimator: str, rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    if estimator == "grpo":
        return grpo_advantages(rewards, group_ids, scale_by_std=True)
    if estimator == "dr_grpo":
        return grpo_advantages(rewards, group_ids, scale_by_std=False)
    if estimator == "rloo":
        return rloo_advantages(rewards, group_ids)
    if estimator == "reinforce_pp":
        return reinforce_pp_advantages(rewards, group_ids)
    raise ValueError(f"advantage estimator must be one of {ESTIMATORS}, got {estimator!r}")


def component_advantages(
    estimator: str, components: torch.Tensor, weights: torch.Tensor, group_ids: torch.Tensor, eps: float = 1e-6
) -> torch.Tensor:
    """Per-component (GDPO-style) advantages (Liu et al. 2026, "GDPO: Group reward-Decoupled
    Normalization Policy Optimization", Sec. 3).

    Each reward component r_k (column k of `components`, shape (N, K)) is normalised within
    its group by `estimator` on its own, the results are summed with the components' weights
    (`weights`: (K,), or (N, K) when samples weigh components differently, e.g. several domains),
    and the sum is normalised over the batch:
        A_sum = sum_k w_k * A_estimator(r_k),   A = (A_sum - mean(A_sum)) / (std(A_sum) + eps).
    Summing first (r = sum_k w_k r_k, then normalising) maps different reward compositions to
    the same advantage: with two binary components, (1, 0) and (0, 1) in one group tie.
    A batch whose summed advantages are all equal gets 0.
    """
    if components.dim() != 2 or weights.shape not in {(components.shape[1],), tuple(components.shape)}:
        raise ValueError(f"components must be (samples, K) with weights (K,) or (samples, K), "
                         f"got {tuple(components.shape)} and {tuple(weights.shape)}")
    weights = weights.float().expand(components.shape)
    summed = torch.zeros(components.shape[0], dtype=torch.float32)
    for k in range(components.shape[1]):
        if bool((weights[:, k] != 0).any()):
            summed += weights[:, k] * _by_name(estimator, components[:, k].float(), group_ids)
    if summed.numel() < 2 or bool((summed == summed[0]).all()):
        return torch.zeros_like(summed)
    return (summed - summed.mean()) / (summed.std() + eps)


def compute_advantages(
    estimator: str, rewards: torch.Tensor, group_ids: torch.Tensor, domain_ids: torch.Tensor | None = None,
    components: torch.Tensor | None = None, weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Advantages by name: `grpo`, `dr_grpo` (no std division), `rloo` or `reinforce_pp`.

    With `domain_ids`, each domain's samples are normalised on their own, so one domain's
    reward scale does not set another's step size (this matters for REINFORCE++, whose
    normalisation is otherwise over the whole batch; group-wise estimators are unaffected).
    With `components` (samples x K) and their `weights`, each component is normalised on its
    own before the weighted sum (`component_advantages`); `rewards` is then unused.
    """
    if (components is None) != (weights is None):
        raise ValueError("per-component advantages need both components and weights")
    if components is not None and components.shape[0] != rewards.shape[0]:
        raise ValueError(f"components have {components.shape[0]} rows for {rewards.shape[0]} rewards")

    def one(idx: torch.Tensor | slice) -> torch.Tensor:
        if components is None:
            return _by_name(estimator, rewards[idx], group_ids[idx])
        return component_advantages(estimator, components[idx], weights if weights.dim() == 1 else weights[idx],
                                    group_ids[idx])

    if domain_ids is None:
        return one(slice(None))
    advantages = torch.zeros_like(rewards, dtype=torch.float32)
    for domain in torch.unique(domain_ids):
        idx = domain_ids == domain
        advantages[idx] = one(idx)
    return advantages
