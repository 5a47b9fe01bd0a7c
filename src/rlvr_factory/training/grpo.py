"""One RL update round: shaped rewards, advantages, then PPO-clipped policy-gradient steps.

A sample is a trajectory (or, for chat templates that are not append-only, one turn of it):
prompt and completion token ids, and a loss mask that is 1 on the policy's tokens and 0 on
the observations an environment appended, so only the policy's tokens are trained on.
Advantages are computed per episode from its outcome reward; `turn_reward_weight` adds each
turn's return (the sum of the turn rewards from that turn on) to the advantage of that turn's
tokens.

Old log-probabilities are computed once per round (and not at all when the round is a
single on-policy step, where they equal the current ones); the round's samples are then
swept in shuffled minibatches for `epochs` passes, each minibatch optionally split into
micro-batches whose gradients accumulate. The optimizer's moments persist across rounds
in `Policy.optimizer_state`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal, Sequence

import torch

from rlvr_factory import distributed
from rlvr_factory.models.policy import Policy
from rlvr_factory.rl.advantages import ESTIMATORS, compute_advantages
from rlvr_factory.rl.kl import KL_KINDS, KL_PLACEMENTS, kl_penalty, kl_shaped_rewards
from rlvr_factory.rl.length import mask_truncated, overlong_penalty
from rlvr_factory.rl.losses import AGGREGATIONS, aggregate_loss, clipped_policy_loss, loss_units, masked_mean
from rlvr_factory.rl.mismatch import logprob_mismatch, truncated_importance_weights
from rlvr_factory.schema import SET_BY_RUN, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from rlvr_factory.training.components import component_tensors
from rlvr_factory.training.lm import join_prompt_completion, lr_factor, make_optimizer, minibatches, token_logprobs


MISMATCH_KEYS = ("engine_logprob_mismatch_abs_mean", "engine_logprob_mismatch_kl")  # token-weighted means over the round


@dataclass(frozen=True)
class UpdateConfig:
    lr: NonNegativeFloat = 2e-4  # policy learning rate
    warmup_steps: NonNegativeInt = 10  # optimizer steps (counted across rounds) of linear LR warm-up
    weight_decay: float = 0.0  # AdamW weight decay
    adam_beta2: float = 0.999  # second-moment decay; a long memory keeps rare large steps in check
    epochs: PositiveInt = 1  # passes over the round's samples
    minibatch_size: PositiveInt = 128  # samples per optimizer step
    micro_batch_size: PositiveInt | None = None  # samples per forward/backward; gradients accumulate to the minibatch
    micro_batch_tokens: PositiveInt | None = 2048  # padded tokens (rows x widest) per forward/backward, bounding activation memory; raise it on a GPU; null: no limit
    gradient_checkpointing: bool = False  # recompute each layer's activations in the backward pass: less memory, about a third more compute
    clip_low: NonNegativeFloat = 0.2  # PPO ratio clip below 1
    clip_high: NonNegativeFloat = 0.2  # PPO ratio clip above 1 (DAPO clip-higher when larger)
    advantage_estimator: Literal[ESTIMATORS] = "grpo"  # grpo | dr_grpo | rloo | reinforce_pp
    component_normalisation: bool = False  # GDPO: each declared reward component normalised apart, then weighted and summed
    loss_aggregation: Literal[AGGREGATIONS] = "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum-norm
    dual_clip: float | None = None  # cap on the loss of negative-advantage tokens (e.g. 3.0); None: off
    kl_coef: float = 0.0  # weight of the KL to the reference; 0 disables it
    kl_kind: Literal[KL_KINDS] = "k3"  # KL estimator: k1 | k2 | k3
    kl_placement: Literal[KL_PLACEMENTS] = "loss"  # loss: a term of the loss (GRPO); reward: a penalty on the reward (PPO-RLHF)
    entropy_coef: float = 0.0  # entropy bonus weight
    mask_truncated: bool = False  # leave completions cut off by the budget out of the loss (DAPO)
    overlong_cache_length: int = 0  # L_cache of DAPO's soft overlong penalty; 0 disables it
    overlong_max_length: int | None = None  # L_max of the penalty (the completion budget)
    skip_zero_advantage: bool = True  # no backward pass for samples whose gradient is exactly zero
    kl_sample_fraction: float = 1.0  # share of zero-advantage samples whose KL term (in the loss) is backpropagated, each weighted 1/share: an unbiased KL gradient for fewer backward passes; 1.0: all
    turn_reward_weight: float = 0.0  # weight of the per-turn reward return added to each turn's token advantages
    max_grad_norm: PositiveFloat = 1.0  # global gradient-norm clip
    engine_is_correction: bool = False  # weight each token by the TIS ratio pi_trainer / pi_engine (Yao et al. 2025)
    engine_is_cap: float = 2.0  # C, the cap of that ratio
    seed: int = field(default=0, metadata=SET_BY_RUN)  # minibatch order (the round's seed)

    def __post_init__(self) -> None:
        if self.kl_placement not in KL_PLACEMENTS:
            raise ValueError(f"kl_placement must be one of {KL_PLACEMENTS}, got {self.kl_placement!r}")
        if self.micro_batch_size is not None and self.micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1 or null, got {self.micro_batch_size}")
        if self.micro_batch_tokens is not None and self.micro_batch_tokens < 1:
            raise ValueError(f"micro_batch_tokens must be >= 1 or null, got {self.micro_batch_tokens}")
        if not 0 < self.kl_sample_fraction <= 1:
            raise ValueError(f"kl_sample_fraction must be in (0, 1], got {self.kl_sample_fraction}")
        if self.engine_is_cap <= 0:
            raise ValueError(f"engine_is_cap must be positive, got {self.engine_is_cap}")
        if self.overlong_cache_length and self.overlong_max_length is None:
            raise ValueError("the overlong penalty needs overlong_max_length (L_max), e.g. the sampling budget")


@dataclass
class Sample:
    group: str  # samples of the same prompt share a group (the task id)
    prompt_ids: list[int]
    completion_ids: list[int]
    reward: float
    domain: str = ""  # advantages are normalised within each domain
    truncated: bool = False  # the completion ran out of budget (finish_reason == "length")
    loss_mask: list[int] | None = None  # per completion token: 1 policy, 0 observation (None: all policy)
    token_turns: list[int] | None = None  # per completion token: the turn it belongs to (None: all turn 0)
    turn_rewards: list[float] | None = None  # each turn's own reward (None: none)
    episode: str | None = None  # samples of one episode (per-turn samples) share its advantage; None: its own
    components: dict[str, tuple[float, float]] = field(default_factory=dict)  # the verifier's declared (value, weight)s
    sampling_logprobs: list[float] | None = None  # per completion token: the engine's log-prob when it sampled it

    def turns(self) -> list[int]:
        """The turn of each completion token."""
        return self.token_turns if self.token_turns is not None else [0] * len(self.completion_ids)

    def mask(self) -> list[int]:
        """The loss mask over the completion tokens."""
        return self.loss_mask if self.loss_mask is not None else [1] * len(self.completion_ids)


def _join(part: Sequence[Sample], pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return join_prompt_completion([s.prompt_ids for s in part], [s.completion_ids for s in part], pad_id,
                                  [s.loss_mask for s in part])


@dataclass
class _Padded:
    """The round's samples padded once: (samples, widest) token ids, attention and completion mask,
    and the engine's sampling log-probs laid out like `token_logprobs` (None when a sample has none)."""

    ids: torch.Tensor
    attention: torch.Tensor
    completion_mask: torch.Tensor
    host_mask: torch.Tensor  # the completion mask on the host: the loss's divisors need no device sync
    sampling_logp: torch.Tensor | None
    lengths: list[int]  # prompt + completion tokens of each sample

    @classmethod
    def of(cls, samples: Sequence[Sample], pad_id: int, device) -> "_Padded":
        ids, attention, cmask = _join(samples, pad_id)
        sampling = None
        if all(s.sampling_logprobs is not None for s in samples):
            sampling = torch.zeros(ids.shape)
            for row, s in enumerate(samples):
                sampling[row, len(s.prompt_ids) : len(s.prompt_ids) + len(s.completion_ids)] = torch.tensor(s.sampling_logprobs)
            sampling = sampling.to(device)
        lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
        return cls(ids.to(device), attention.to(device), cmask.to(device), cmask, sampling, lengths)

    def micro_batches(self, rows: Sequence[int], max_rows: int | None, max_tokens: int | None) -> list[list[int]]:
        """`rows` cut, in order, into micro-batches of at most `max_rows` rows and `max_tokens` padded
        tokens (rows x the widest of them); a row wider than `max_tokens` makes a micro-batch alone."""
        out: list[list[int]] = []
        current: list[int] = []
        width = 0
        for i in rows:
            wider = max(width, self.lengths[i])
            if current and ((max_rows and len(current) >= max_rows) or (max_tokens and (len(current) + 1) * wider > max_tokens)):
                out.append(current)
                current, wider = [], self.lengths[i]
            current.append(i)
            width = wider
        return out + [current] if current else out

    def rows(self, tensor: torch.Tensor, rows: Sequence[int]) -> torch.Tensor:
        """`tensor`'s rows `rows`, cut to the widest of them (as if padded on their own)."""
        width = max(self.lengths[i] for i in rows)
        return tensor[torch.as_tensor(rows, device=tensor.device), :width]


@torch.inference_mode()
def _logprobs(model, padded: _Padded, config: UpdateConfig) -> torch.Tensor:
    """(samples, widest) log-probs of the completion tokens under `model`, a micro-batch at a time,
    each data-parallel rank computing its share of the rows (the others' are summed in: exact, as
    a rank's zeros add nothing)."""
    out = torch.zeros(padded.ids.shape, device=padded.ids.device)
    share = distributed.shard(len(padded.lengths))
    for rows in padded.micro_batches(range(share.start, share.stop), _max_rows(config), config.micro_batch_tokens):
        ids, attn, cmask = (padded.rows(t, rows) for t in (padded.ids, padded.attention, padded.completion_mask))
        out[rows[0] : rows[0] + len(rows), : ids.shape[1]] = token_logprobs(model, ids, attn, positions=cmask)[0]
    return distributed.sum_tensor(out)


def _max_rows(config: UpdateConfig) -> int:
    return config.micro_batch_size or config.minibatch_size


def _action_lengths(sample: Sample) -> list[int]:
    """The number of policy tokens of each turn of the sample."""
    lengths: dict[int, int] = {}
    for turn, keep in zip(sample.turns(), sample.mask()):
        lengths[turn] = lengths.get(turn, 0) + keep
    return [lengths[t] for t in sorted(lengths)] or [0]


def _shaped_rewards(
    samples: Sequence[Sample], config: UpdateConfig, old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None, completion_mask: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Each sample's reward plus the overlong penalty (on each turn's length) and, with `kl_placement: reward`,
    minus the KL."""
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    stats = {"overlong_penalty_mean": 0.0, "kl_reward_penalty_mean": 0.0}
    if config.overlong_cache_length:
        penalty = torch.stack([
            overlong_penalty(torch.tensor(_action_lengths(s)), config.overlong_max_length, config.overlong_cache_length).sum()
            for s in samples
        ])
        rewards = rewards + penalty
        stats["overlong_penalty_mean"] = float(penalty.mean())
    if config.kl_coef > 0 and config.kl_placement == "reward":
        shaped = kl_shaped_rewards(
            rewards, old_logp.cpu(), ref_logp.cpu(), completion_mask, config.kl_coef, config.kl_kind
        )
        stats["kl_reward_penalty_mean"] = float((rewards - shaped).mean())
        rewards = shaped
    return rewards, stats


def _episode_advantages(
    samples: Sequence[Sample], rewards: torch.Tensor, estimator: str, per_component: bool = False
) -> torch.Tensor:
    """One advantage per episode, given to each of its samples.

    An episode's samples all carry its outcome reward; its reward is that outcome plus the
    shaping terms (penalties) of all its samples. `per_component`: each declared reward
    component is normalised on its own before the weighted sum (GDPO; `component_tensors`).
    """
    members: dict[object, list[int]] = {}
    for i, s in enumerate(samples):
        members.setdefault(s.episode if s.episode is not None else i, []).append(i)
    episode_rewards = [
        rewards[rows[0]] if len(rows) == 1 else samples[rows[0]].reward + sum(rewards[i] - samples[i].reward for i in rows)
        for rows in members.values()
    ]
    firsts = [samples[rows[0]] for rows in members.values()]
    groups = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in firsts))}
    domains = {d: i for i, d in enumerate(dict.fromkeys(s.domain for s in firsts))}
    totals = torch.stack([torch.as_tensor(r, dtype=torch.float32) for r in episode_rewards])
    components, weights, _ = component_tensors([s.components for s in firsts], totals) if per_component else (None, None, None)
    per_episode = compute_advantages(
        estimator, totals, torch.tensor([groups[s.group] for s in firsts]),
        torch.tensor([domains[s.domain] for s in firsts]), components, weights,
    )
    of_sample = torch.empty(len(samples), dtype=torch.long)
    for e, rows in enumerate(members.values()):
        of_sample[rows] = e
    return per_episode[of_sample]


def _turn_returns(samples: Sequence[Sample], width: int, weight: float) -> torch.Tensor:
    """(samples, width) over prompt+completion positions: `weight` times the return of each completion
    token's turn (its own and every later turn reward), 0 elsewhere."""
    out = torch.zeros((len(samples), width))
    for row, s in enumerate(samples):
        rewards = s.turn_rewards or []
        returns = [sum(rewards[t:]) for t in range(len(rewards))]
        tokens = [weight * returns[t] if t < len(returns) else 0.0 for t in s.turns()]
        out[row, len(s.prompt_ids) : len(s.prompt_ids) + len(tokens)] = torch.tensor(tokens)
    return out


def kl_carriers(nonzero: Sequence[bool], fraction: float, seed: int) -> tuple[list[bool], torch.Tensor]:
    """Which samples carry the KL term into the backward pass, and its weight on each: every sample with a
    nonzero advantage (weight 1, it is backpropagated anyway), and each other one with probability `fraction`
    (weight 1/`fraction`), drawn from `seed`. Every sample's expected weight is 1, so the KL gradient is
    unbiased; `fraction` 1.0 carries all at weight 1."""
    draw = random.Random(f"{seed}:kl-carriers")
    carried = [True if n else draw.random() < fraction for n in nonzero]
    scale = torch.tensor([1.0 if n else 1.0 / fraction for n in nonzero])
    return carried, scale


def rl_update(
    policy: Policy, samples: Sequence[Sample], config: UpdateConfig, reference: torch.nn.Module | None = None
) -> dict[str, float]:
    """Apply one round of clipped policy-gradient updates in place; returns the round's stats."""
    if not samples:
        raise ValueError("rl_update got no samples; every rollout was excluded")
    if config.kl_coef > 0 and reference is None:
        raise ValueError("kl_coef > 0 needs a reference model")
    model, device, pad_id = policy.model, policy.device, policy.tokenizer.pad_token_id
    kl_in_loss = config.kl_coef > 0 and config.kl_placement == "loss"
    # One epoch over one minibatch is a single on-policy step: the old log-probs are the current ones.
    on_policy = config.epochs == 1 and config.minibatch_size >= len(samples) and not (
        config.kl_coef > 0 and config.kl_placement == "reward"
    )
    padded = _Padded.of(samples, pad_id, device)  # the round's one padding
    old_logp = None if on_policy else _logprobs(model, padded, config)
    ref_logp = _logprobs(reference, padded, config) if config.kl_coef > 0 else None
    rewards, stats = _shaped_rewards(samples, config, old_logp, ref_logp, padded.host_mask)
    advantages = _episode_advantages(samples, rewards, config.advantage_estimator, config.component_normalisation)
    truncated = torch.tensor([s.truncated for s in samples])
    # Dr. GRPO divides each sequence's loss sum by one constant: here the widest prompt+completion of the round.
    norm_length = max(len(s.prompt_ids) + len(s.completion_ids) for s in samples)
    turn_returns = _turn_returns(samples, norm_length, config.turn_reward_weight) if config.turn_reward_weight else None

    # Without a KL or entropy term in the loss, a sample whose advantage is 0 (or whose tokens are
    # all masked) has zero gradient: it only needs a forward pass for the stats, not a backward one.
    # With only the KL term, a seeded share of them carries it, weighted up (`kl_carriers`).
    per_token_terms = config.entropy_coef > 0 or not config.skip_zero_advantage
    nonzero = (advantages != 0).tolist()
    fraction = config.kl_sample_fraction if kl_in_loss and not per_token_terms else 1.0
    carried, kl_scale = kl_carriers(nonzero, fraction, config.seed)
    active = [a or per_token_terms or (kl_in_loss and c) for a, c in zip(nonzero, carried)]
    if turn_returns is not None:
        active = [a or bool(turn_returns[i].any()) for i, a in enumerate(active)]
    if config.mask_truncated and config.skip_zero_advantage:
        active = [a and not t for a, t in zip(active, truncated.tolist())]
    ctx = _Context(config, padded, advantages.to(device), truncated.to(device), old_logp, ref_logp, norm_length,
                   None if turn_returns is None else turn_returns.to(device),
                   None if fraction == 1.0 else kl_scale.to(device))

    with distributed.training_copy(model, config.gradient_checkpointing) as trained:
        totals, steps = _optimizer_steps(policy, trained, samples, config, ctx, active, truncated)
    model.eval()
    policy.version += 1
    synced = dict(zip(STEP_KEYS, torch.stack([totals[k] for k in STEP_KEYS]).tolist()))  # the round's one device sync
    mismatch_max = synced.pop("mismatch_max")
    stats.update({k: v / steps for k, v in synced.items()})
    if padded.sampling_logp is not None:
        stats["engine_logprob_mismatch_abs_max"] = mismatch_max
    else:
        for key in MISMATCH_KEYS:
            del stats[key]
    stats["advantage_abs_mean"] = float(advantages.abs().mean())
    stats["optimizer_steps"] = float(steps)
    stats["masked_truncated"] = float(truncated.sum()) if config.mask_truncated else 0.0
    stats["trained_sample_fraction"] = sum(active) / len(samples)
    return stats


STEP_KEYS = ("loss", "clip_fraction", "entropy", "kl", "policy_drift_kl", "grad_norm", *MISMATCH_KEYS, "mismatch_max")


def _optimizer_steps(policy: Policy, model, samples: Sequence[Sample], config: UpdateConfig, ctx: "_Context",
                     active: list[bool], truncated: torch.Tensor) -> tuple[dict[str, torch.Tensor], int]:
    """The round's optimizer steps on `model` (the policy's, or its sharded copy): the per-key totals of the
    steps' stats (float64 tensors) and the number of steps."""
    padded, device = ctx.padded, ctx.advantages.device
    optimizer = make_optimizer(model, config.lr, config.weight_decay, (0.9, config.adam_beta2))
    distributed.load_optimizer_state(model, optimizer, policy.optimizer_state)
    rng = random.Random(config.seed)
    first_state = next(iter(optimizer.state.values()), {})
    global_step = int(first_state.get("step", 0))
    zero = torch.zeros((), dtype=torch.float64, device=device)  # stats stay on the device, summed in float64
    totals = dict.fromkeys(STEP_KEYS, zero)
    steps = 0
    model.train()
    for _ in range(config.epochs):
        for idx in minibatches(len(samples), config.minibatch_size, rng):
            full_mask = padded.host_mask[idx]
            if config.mask_truncated:
                full_mask = mask_truncated(full_mask, truncated[idx])
            ctx.units = loss_units(full_mask, config.loss_aggregation)  # shared by the micro-batches
            ctx.tokens = loss_units(full_mask, "token-mean")
            for group in optimizer.param_groups:
                group["lr"] = config.lr * lr_factor("constant", global_step, config.warmup_steps, 0)
            global_step += 1
            optimizer.zero_grad(set_to_none=True)
            step = dict.fromkeys(STEP_KEYS, zero)
            local = idx[distributed.shard(len(idx))]  # this rank's share; the normalisers above are the minibatch's
            # samples with a gradient go through forward + backward, the others through a forward
            # for the stats; each in micro-batches bounded in rows and padded tokens
            for train in (True, False):
                batches = padded.micro_batches([i for i in local if active[i] == train], _max_rows(config),
                                               config.micro_batch_tokens)
                for at in range(distributed.most_passes(len(batches))):  # as many on every rank of a sharded model
                    with torch.enable_grad() if train else torch.inference_mode():
                        if at < len(batches):
                            _micro_step(model, batches[at], train, step, ctx)
                        else:
                            distributed.empty_pass(model, padded.ids, backward=train)
            distributed.reshard(model)
            for p in model.parameters():  # a minibatch without gradient still steps Adam's moments
                if p.requires_grad and p.grad is None:
                    p.grad = torch.zeros_like(p)
            distributed.sum_gradients(model)
            step = distributed.combine_stats(step, maxima=("mismatch_max",))
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            step["grad_norm"] = (norm.full_tensor() if hasattr(norm, "full_tensor") else norm).double()
            optimizer.step()
            for key in STEP_KEYS:
                totals[key] = torch.maximum(totals[key], step[key]) if key == "mismatch_max" else totals[key] + step[key]
            steps += 1
    policy.optimizer_state = distributed.optimizer_state(model, optimizer)
    return totals, steps


@dataclass
class _Context:
    """What every micro-step of a round reads; `units` and `tokens` are set per minibatch."""

    config: UpdateConfig
    padded: _Padded
    advantages: torch.Tensor
    truncated: torch.Tensor
    old_logp: torch.Tensor | None  # (samples, widest), or None: on-policy (the current log-probs)
    ref_logp: torch.Tensor | None
    norm_length: int
    turn_returns: torch.Tensor | None  # (samples, norm_length) per-token advantage terms, or None
    kl_scale: torch.Tensor | None  # (samples,) weight of each sample's KL term in the loss, or None: all 1
    units: float = 1.0
    tokens: float = 1.0


def _micro_step(model, rows: list[int], train: bool, step: dict[str, torch.Tensor], ctx: _Context) -> None:
    """Loss of one micro-batch (backpropagated when `train`) and its share of the minibatch's stats
    (float64 tensors on the device, so that nothing here waits for it)."""
    config, padded = ctx.config, ctx.padded
    ids, attn, cmask = (padded.rows(t, rows) for t in (padded.ids, padded.attention, padded.completion_mask))
    index = torch.as_tensor(rows, device=ids.device)
    if config.mask_truncated:
        cmask = mask_truncated(cmask, ctx.truncated[index])
    weight = cmask.sum().double() / ctx.tokens
    logp, entropy = token_logprobs(
        model, ids, attn, with_entropy=True, entropy_grad=train and config.entropy_coef > 0, positions=cmask,
    )
    width = ids.shape[1]
    old = logp.detach() if ctx.old_logp is None else padded.rows(ctx.old_logp, rows)
    advantages = ctx.advantages[index]
    if ctx.turn_returns is not None:
        advantages = advantages.unsqueeze(-1) + ctx.turn_returns[index, :width]
    sampling = None if padded.sampling_logp is None else padded.rows(padded.sampling_logp, rows)
    if sampling is not None:
        gap = logprob_mismatch(old, sampling, cmask)
        step["engine_logprob_mismatch_abs_mean"] = step["engine_logprob_mismatch_abs_mean"] + gap["abs_mean"].double() * weight
        step["engine_logprob_mismatch_kl"] = step["engine_logprob_mismatch_kl"] + gap["kl"].double() * weight
        step["mismatch_max"] = torch.maximum(step["mismatch_max"], gap["abs_max"].double())
    if config.engine_is_correction:
        if sampling is None:
            raise ValueError("engine_is_correction needs the engine's sampling log-probs on every sample "
                             "(the rollouts' `logprobs` column); turn it off for rollouts without them")
        weights = truncated_importance_weights(old, sampling, config.engine_is_cap)
        advantages = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages) * weights
    loss, clip_fraction = clipped_policy_loss(
        logp, old, advantages, cmask, config.clip_low, config.clip_high,
        config.dual_clip, config.loss_aggregation, ctx.norm_length, ctx.units,
    )
    total = loss
    if config.entropy_coef > 0:
        total = total - config.entropy_coef * aggregate_loss(entropy, cmask, config.loss_aggregation, ctx.norm_length, ctx.units)
    if ctx.ref_logp is not None:
        ref = padded.rows(ctx.ref_logp, rows)
        kl_tokens = kl_penalty(logp, ref, config.kl_kind)
        if config.kl_placement == "loss":
            weighted = kl_tokens if ctx.kl_scale is None else kl_tokens * ctx.kl_scale[index].unsqueeze(-1)
            total = total + config.kl_coef * aggregate_loss(weighted, cmask, config.loss_aggregation, ctx.norm_length, ctx.units)
        step["kl"] = step["kl"] + masked_mean(kl_tokens.detach(), cmask).double() * weight
    if train:
        total.backward()
    step["loss"] = step["loss"] + loss.detach().double()
    step["clip_fraction"] = step["clip_fraction"] + clip_fraction.double() * weight
    step["entropy"] = step["entropy"] + masked_mean(entropy.detach(), cmask).double() * weight
    step["policy_drift_kl"] = step["policy_drift_kl"] + masked_mean(kl_penalty(logp.detach(), old, "k3"), cmask).double() * weight
