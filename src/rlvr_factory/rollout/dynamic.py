"""Draw prompt groups for a round, optionally with DAPO's dynamic sampling.

Dynamic sampling (Yu et al. 2025, Sec. 3.2, Eq. 11) over-samples and filters: groups whose
rewards are all equal carry no gradient, so they are dropped and more prompts are drawn
until the round has `prompts` groups with a signal, or `max_extra_draws` extra draws
have been made.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from rlvr_factory.models.policy import Policy
from rlvr_factory.rl.sampling import groups_with_signal
from rlvr_factory.rollout.hf import Completion, SamplingConfig, generate


@dataclass(frozen=True)
class DynamicSampling:
    enabled: bool = False  # drop zero-variance groups and draw more prompts (DAPO)
    max_extra_draws: int = 3  # bound on the generation calls made after the first
    min_draw: int = 8  # smallest number of prompts one extra draw generates for


@dataclass
class Drawn:
    """The round's groups: each kept prompt's index into the candidates, and its completions."""

    prompt_indices: list[int]
    completions: list[Completion]  # `prompt_index` refers to a position in `prompt_indices`
    stats: dict[str, float]


def draw_groups(
    policy: Policy, prompts: Sequence[str], order: Sequence[int], count: int, samples_per_prompt: int,
    sampling: SamplingConfig, score: Callable[[list[int], list[Completion]], list[float]],
    dynamic: DynamicSampling, desc: str = "rollout",
) -> Drawn:
    """Generate `samples_per_prompt` completions for the first `count` prompts of `order`.

    With `dynamic.enabled`, `score(prompt_indices, completions)` rewards each completion,
    groups without a reward spread are dropped, and the next prompts of `order` are drawn
    (each extra draw sized by the keep rate so far, at most `count` prompts) until `count` groups are kept or the
    bound is hit. A round in which no group has a signal keeps its first draw (all its
    advantages are zero). Every draw's sampling seed follows from `sampling.seed`.
    """
    first = list(order[:count])
    completions, timing = generate(policy, [prompts[i] for i in first], samples_per_prompt, sampling, desc=desc)
    seconds, tokens = timing["seconds"], timing["new_tokens"]
    base = {"dynamic_sampling_draws": 1.0, "dynamic_sampling_prompts_drawn": float(len(first)),
            "dynamic_sampling_groups_dropped": 0.0}
    if not dynamic.enabled:
        return Drawn(first, completions, {**_timing(seconds, tokens), **base})
    seeds = random.Random(sampling.seed)
    kept: list[tuple[int, list[Completion]]] = []
    fallback = (first, completions)
    batch, batch_completions, cursor, draws, dropped = first, completions, len(first), 1, 0
    while True:
        rewards = score(batch, batch_completions)
        signal = groups_with_signal(torch.tensor(rewards), torch.tensor([c.prompt_index for c in batch_completions]))
        by_prompt: dict[int, list[Completion]] = {}
        for c, has in zip(batch_completions, signal.tolist()):
            if has:
                by_prompt.setdefault(c.prompt_index, []).append(c)
        dropped += len(batch) - len(by_prompt)
        kept += [(batch[p], cs) for p, cs in sorted(by_prompt.items())]
        missing = count - len(kept)
        if missing <= 0 or draws > dynamic.max_extra_draws or cursor >= len(order):
            break
        keep_rate = len(kept) / cursor
        size = min(len(order) - cursor, count, max(dynamic.min_draw, math.ceil(missing / max(keep_rate, 1 / count))))
        batch = list(order[cursor : cursor + size])
        cursor += size
        draws += 1
        seed = seeds.getrandbits(62)
        batch_completions, timing = generate(
            policy, [prompts[i] for i in batch], samples_per_prompt, replace(sampling, seed=seed),
            desc=f"{desc} (draw {draws})",
        )
        seconds, tokens = seconds + timing["seconds"], tokens + timing["new_tokens"]
    stats = {**_timing(seconds, tokens), "dynamic_sampling_draws": float(draws),
             "dynamic_sampling_prompts_drawn": float(cursor), "dynamic_sampling_groups_dropped": float(dropped)}
    if not kept:
        return Drawn(*fallback, stats)
    kept = kept[:count]
    indices, out = [], []
    for position, (index, cs) in enumerate(kept):
        indices.append(index)
        out += [replace(c, prompt_index=position) for c in cs]
    return Drawn(indices, out, stats)


def _timing(seconds: float, tokens: float) -> dict[str, float]:
    return {"rollout_seconds": seconds, "tokens_per_second": tokens / max(seconds, 1e-9)}
