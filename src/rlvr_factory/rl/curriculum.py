"""Online curriculum: per-task pass rates tracked across rounds, and the order prompts are drawn in.

Too-easy prompts (every sample right) and too-hard ones (every sample wrong) give GRPO-style
estimators no gradient; prompts whose pass rate lies in a target band do (cf. DAPO, Yu et al.
2025, Eq. 11; the online difficulty filtering of Bae et al. 2025, "Online Difficulty Filtering
for Reasoning Oriented RL", Sec. 3).

Across many domains the same band steers a level per domain: each domain draws from its current
difficulty level, which rises when the domain's online pass rate stays above the band and falls
when it stays below (a per-domain version of the teacher-student curricula of Matiisen et al.
2019 and of reasoning-gym's own curriculum levels), and the domains whose pass rate lies in the
band get the larger share of each round's prompts (`update_domain_levels`, `domain_weights`,
`domain_prompt_order`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
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


@dataclass(frozen=True)
class DomainLevel:
    """A domain's place in the curriculum: its difficulty level, the online pass rate measured at
    that level (None: not yet), and how many rounds in a row it lay above (+) or below (-) the band."""

    level: int
    pass_rate: float | None = None
    streak: int = 0


def update_domain_levels(
    state: Mapping[str, DomainLevel],
    observed: Mapping[str, float],
    levels: Mapping[str, Sequence[int]],
    band: tuple[float, float],
    ema: float,
    patience: int,
) -> dict[str, DomainLevel]:
    """Every domain's level after a round.

    `observed[d]` is domain d's pass rate this round on tasks of its current level; `levels[d]`
    the levels its tasks have (a domain new to `state` starts at its lowest). The level's pass
    rate is averaged like a task's (`update_pass_rates`); after `patience` rounds in a row above
    the band the domain moves to its next level, after `patience` below to its previous one, and
    the new level's pass rate starts unmeasured. A domain not observed keeps its state.
    """
    if patience < 1:
        raise ValueError(f"curriculum patience must be at least 1 round, got {patience}")
    if not 0.0 <= band[0] <= band[1] <= 1.0:
        raise ValueError(f"curriculum band must satisfy 0 <= low <= high <= 1, got {list(band)}")
    updated = {}
    for domain, available in sorted(levels.items()):
        ladder = sorted(set(available))
        current = state.get(domain) or DomainLevel(ladder[0])
        if domain not in observed:
            updated[domain] = current
            continue
        rate = update_pass_rates({} if current.pass_rate is None else {"": current.pass_rate}, {"": observed[domain]},
                                 ema)[""]
        streak = (max(current.streak, 0) + 1 if rate > band[1] else min(current.streak, 0) - 1 if rate < band[0]
                  else 0)
        step = 1 if streak >= patience else -1 if streak <= -patience else 0
        position = ladder.index(current.level) if current.level in ladder else 0
        target = min(max(position + step, 0), len(ladder) - 1)
        updated[domain] = (DomainLevel(ladder[target]) if target != position
                           else replace(current, level=ladder[position], pass_rate=rate, streak=streak))
    return updated


def domain_weights(state: Mapping[str, DomainLevel], band: tuple[float, float], out_of_band_weight: float) -> dict[str, float]:
    """Each domain's share of a round's prompts: 1 while its level's pass rate is in the band (or
    unmeasured: it must be tried to be known), `out_of_band_weight` while it lies outside."""
    if not 0.0 <= out_of_band_weight <= 1.0:
        raise ValueError(f"curriculum out_of_band_weight must be in [0, 1], got {out_of_band_weight}")
    return {d: 1.0 if in_band(s.pass_rate, band) else out_of_band_weight for d, s in state.items()}


def domain_prompt_order(
    domains: Sequence[str],
    difficulties: Sequence[int],
    pass_rates: Sequence[float | None],
    state: Mapping[str, DomainLevel],
    weights: Mapping[str, float],
    rng: random.Random,
    band: tuple[float, float] = (0.0, 1.0),
    band_fraction: float = 1.0,
) -> list[int]:
    """The order in which to draw the candidate prompts: each domain's tasks of its current level
    (`prompt_order` within it: in-band tasks first), the domains interleaved by `weights`; tasks of
    other levels follow, so every candidate appears once. Seeded by `rng`."""
    by_domain: dict[str, list[int]] = {}
    for i, domain in enumerate(domains):
        by_domain.setdefault(domain, []).append(i)
    current, rest = [], []
    for domain in sorted(by_domain):
        members = by_domain[domain]
        level = state[domain].level if domain in state else min(difficulties[i] for i in members)
        at_level = [i for i in members if difficulties[i] == level]
        order = prompt_order([pass_rates[i] for i in at_level], [level] * len(at_level), rng, band, band_fraction)
        current.append([at_level[k] for k in order])
        rest += [i for i in members if difficulties[i] != level]
    rng.shuffle(rest)
    ranked = interleave(current, [weights.get(d, 1.0) for d in sorted(by_domain)])
    return ranked + rest
