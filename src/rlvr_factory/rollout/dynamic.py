"""Draw prompt groups for a round, optionally with DAPO's dynamic sampling.

Dynamic sampling (Yu et al. 2025, Sec. 3.2, Eq. 11) over-samples and filters: groups whose
rewards are all equal carry no gradient, so they are dropped and more prompts are drawn
until the round has `prompts` groups with a signal, or `max_extra_draws` extra draws
have been made.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import torch

from rlvr_factory.rl.sampling import groups_with_signal
from rlvr_factory.rollout.episode import Episode
from rlvr_factory.schema import PositiveInt

# run(prompt indices, seed) -> (their episodes, task-major, `task_index` a position in the indices; the loop's stats)
Run = Callable[[list[int], int], tuple[list[Episode], dict[str, float]]]


@dataclass(frozen=True)
class DynamicSampling:
    enabled: bool = False  # drop zero-variance groups and draw more prompts (DAPO)
    max_extra_draws: int = 3  # bound on the generation calls made after the first
    min_draw: PositiveInt = 8  # smallest number of prompts one extra draw generates for


@dataclass
class Drawn:
    """The round's groups: each kept prompt's index into the candidates, and its episodes."""

    prompt_indices: list[int]
    episodes: list[Episode]  # `task_index` refers to a position in `prompt_indices`
    stats: dict[str, float]


def draw_groups(
    run: Run, order: Sequence[int], count: int, seed: int,
    score: Callable[[list[int], list[Episode]], list[float]], dynamic: DynamicSampling,
) -> Drawn:
    """The episodes of the first `count` prompts of `order` (`run` decides how many per prompt).

    With `dynamic.enabled`, `score(prompt_indices, episodes)` rewards each episode, groups
    without a reward spread are dropped, and the next prompts of `order` are drawn (each extra
    draw sized by the keep rate so far, at most `count` prompts) until `count` groups are kept
    or the bound is hit. A round in which no group has a signal keeps its first draw (all its
    advantages are zero). The first draw's seed is `seed`, every later one's follows from it.
    """
    first = list(order[:count])
    episodes, totals = run(first, seed)
    totals = Counter(totals)
    base = {"dynamic_sampling_draws": 1.0, "dynamic_sampling_prompts_drawn": float(len(first)),
            "dynamic_sampling_groups_dropped": 0.0}
    if not dynamic.enabled:
        return Drawn(first, episodes, {**_loop_stats(totals), **base})
    seeds = random.Random(seed)
    kept: list[tuple[int, list[Episode]]] = []
    fallback = (first, episodes)
    batch, batch_episodes, cursor, draws, dropped = first, episodes, len(first), 1, 0
    while True:
        rewards = score(batch, batch_episodes)
        signal = groups_with_signal(torch.tensor(rewards), torch.tensor([e.task_index for e in batch_episodes]))
        by_prompt: dict[int, list[Episode]] = {}
        for e, has in zip(batch_episodes, signal.tolist()):
            if has:
                by_prompt.setdefault(e.task_index, []).append(e)
        dropped += len(batch) - len(by_prompt)
        kept += [(batch[p], es) for p, es in sorted(by_prompt.items())]
        missing = count - len(kept)
        if missing <= 0 or draws > dynamic.max_extra_draws or cursor >= len(order):
            break
        keep_rate = len(kept) / cursor
        size = min(len(order) - cursor, count, max(dynamic.min_draw, math.ceil(missing / max(keep_rate, 1 / count))))
        batch = list(order[cursor : cursor + size])
        cursor += size
        draws += 1
        batch_episodes, stats = run(batch, seeds.getrandbits(62))
        totals.update(stats)
    stats = {**_loop_stats(totals), "dynamic_sampling_draws": float(draws),
             "dynamic_sampling_prompts_drawn": float(cursor), "dynamic_sampling_groups_dropped": float(dropped)}
    if not kept:
        return Drawn(*fallback, stats)
    kept = kept[:count]
    indices, out = [], []
    for position, (index, es) in enumerate(kept):
        indices.append(index)
        out += [replace(e, task_index=position) for e in es]
    return Drawn(indices, out, stats)


def _loop_stats(totals: Counter) -> dict[str, float]:
    """The draws' loop stats added up, with the sampling rate over all of them."""
    stats = {k: float(v) for k, v in totals.items() if k != "tokens_per_second"}
    stats["tokens_per_second"] = stats.get("engine_new_tokens", 0.0) / max(stats.get("engine_seconds", 0.0), 1e-9)
    return stats
