"""Online curriculum: per-task pass rates tracked across rounds, and the order prompts are drawn in.

Too-easy prompts (every sample right) and too-hard ones (every sample wrong) give GRPO-style
estimators no gradient; prompts whose pass rate lies in a target band do (cf. DAPO, Yu et al.
2025, Eq. 11; the online difficulty filtering of Bae et al. 2025, "Online Difficulty Filtering
for Reasoning Oriented RL", Sec. 3).
"""

from __future__ import annotations

import math
import random
from typing import Mapping, Sequence


def update_pass_rates(
    previous: Mapping[str, float], observed: Mapping[str, float], ema: float
) -> dict[str, float]:
    """Each task's pass-rate estimate after a round.

    p <- (1 - ema) * p + ema * observed for a task seen before; a first observation is taken
    as is. Tasks not observed this round keep their estimate. `ema` in (0, 1]: 1 keeps only
    the latest round.
    """
    if not 0.0 < ema <= 1.0:
        raise ValueError(f"pass_rate_ema must be in (0, 1], got {ema}")
    rates = dict(previous)
    for task, rate in observed.items():
        rates[task] = rate if task not in rates else (1.0 - ema) * rates[task] + ema * rate
    return rates


def interleave(pools: Sequence[Sequence[int]], weights: Sequence[float]) -> list[int]:
    """Merge `pools` so every prefix holds them in proportion to `weights` (smooth weighted
    round-robin). An exhausted pool drops out and the others share its place; pools of
    weight 0 come last. The result holds every item once."""
    pos = [0] * len(pools)
    taken = [0] * len(pools)
    out: list[int] = []
    while True:
        live = [i for i, p in enumerate(pools) if pos[i] < len(p)]
        if not live:
            return out
        weighted = [i for i in live if weights[i] > 0] or live
        total = sum(weights[i] for i in weighted) or len(weighted)
        share = {i: (weights[i] / total if total else 1 / len(weighted)) for i in weighted}
        best = max(weighted, key=lambda i: (share[i] * (len(out) + 1) - taken[i], -i))
        out.append(pools[best][pos[best]])
        pos[best] += 1
        taken[best] += 1


def in_band(rate: float | None, band: tuple[float, float]) -> bool:
    """Whether a pass rate lies in [low, high]; an unseen task (None or NaN) counts as in band,
    since it must be tried to be known."""
    return rate is None or math.isnan(rate) or band[0] <= rate <= band[1]


def prompt_order(
    pass_rates: Sequence[float | None],
    difficulties: Sequence[int],
    rng: random.Random,
    band: tuple[float, float] = (0.0, 1.0),
    band_fraction: float = 1.0,
    difficulty_weights: Mapping[int, float] | None = None,
) -> list[int]:
    """The order in which to draw the candidate prompts (indices into the inputs).

    Difficulty-stratified: difficulty levels are interleaved in proportion to
    `difficulty_weights` (a level missing from it gets weight 0; None: each level in
    proportion to its size). Within a level, `band_fraction` of the prompts come from those
    whose pass rate is in `band` (or unseen), the rest from the others, so their estimates
    stay fresh. Each pool is shuffled by `rng` first, so the order is fixed by the seed.
    """
    if not 0.0 <= band[0] <= band[1] <= 1.0:
        raise ValueError(f"curriculum band must satisfy 0 <= low <= high <= 1, got {list(band)}")
    if not 0.0 <= band_fraction <= 1.0:
        raise ValueError(f"curriculum band_fraction must be in [0, 1], got {band_fraction}")
    levels = sorted(set(difficulties))
    strata = []
    for level in levels:
        members = [i for i, d in enumerate(difficulties) if d == level]
        inside = [i for i in members if in_band(pass_rates[i], band)]
        outside = [i for i in members if not in_band(pass_rates[i], band)]
        rng.shuffle(inside)
        rng.shuffle(outside)
        strata.append(interleave([inside, outside], [band_fraction, 1.0 - band_fraction]))
    if difficulty_weights is None:
        weights = [float(len(s)) for s in strata]
    else:
        by_level = {int(k): float(v) for k, v in difficulty_weights.items()}
        weights = [by_level.get(level, 0.0) for level in levels]
        if any(w < 0 for w in weights) or not any(weights):
            raise ValueError(f"curriculum difficulty_weights need a positive weight for a level of {levels}, got {dict(difficulty_weights)}")
    return interleave(strata, weights)
