"""The per-domain curriculum's state as a table, one row per domain and round: what the next round's
prompt choice reads, what MLflow keeps per round, and what the report's heatmap is drawn from."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pandas as pd

from rlvr_factory.domains.base import Task
from rlvr_factory.rl.curriculum import DomainLevel, domain_prompt_order, domain_weights, update_domain_levels
from rlvr_factory.schema import Fraction, NonNegativeFloat, PositiveInt
from rlvr_factory.training.rounds import usable_rows

# level: the domain's difficulty level for the next round; level_pass_rate: the online pass rate at
# that level (NaN: unmeasured); streak: rounds in a row above (+) / below (-) the band; weight: its
# share of the next round's prompts; pass_rate, reward_mean, samples, difficulty_mean: this round's
# samples of the domain (all levels drawn).
LEVEL_COLUMNS = ["round", "domain", "level", "level_pass_rate", "streak", "weight", "pass_rate", "reward_mean",
                 "samples", "difficulty_mean"]


@dataclass(frozen=True)
class LevelSettings:
    """`rl.curriculum.levels`: the per-domain curriculum (its band and EMA are the curriculum's)."""

    enabled: bool = False  # each domain draws from its current level; false: levels are tracked, not used
    patience: PositiveInt = 2  # rounds a domain's level pass rate must stay above (below) the band before it moves
    out_of_band_weight: float = 0.25  # a domain's share of prompts while its pass rate lies outside the band (inside: 1)


@dataclass(frozen=True)
class CurriculumConfig:
    enabled: bool = False  # prompts chosen by their online pass rate; false: a seeded uniform sample of the train split
    band: tuple[Fraction, Fraction] = (0.1, 0.9)  # target pass-rate band [low, high]; unseen tasks count as in band
    band_fraction: Fraction = 0.8  # share of prompts from the band; the rest refresh the others' estimates
    difficulty_weights: dict[int, NonNegativeFloat] | None = None  # e.g. {1: 1, 2: 1, 3: 2, 4: 2}: share of each level; null: by level size
    pass_rate_ema: Fraction = 0.5  # weight of the newest round in each task's pass-rate estimate (tracked always)
    levels: LevelSettings = field(default_factory=LevelSettings)  # per-domain levels (docs/domain_scale.md)


def levels_from_frame(frame: pd.DataFrame | None) -> dict[str, DomainLevel]:
    """The curriculum state a round's table holds (empty before the first round)."""
    if frame is None:
        return {}
    return {
        str(r.domain): DomainLevel(int(r.level), None if pd.isna(r.level_pass_rate) else float(r.level_pass_rate),
                                   int(r.streak))
        for r in frame.itertuples(index=False)
    }


def task_levels(tasks: Sequence[Task]) -> dict[str, list[int]]:
    """The difficulty levels each domain's tasks have."""
    levels: dict[str, set[int]] = {}
    for task in tasks:
        levels.setdefault(task.domain, set()).add(task.difficulty)
    return {d: sorted(v) for d, v in levels.items()}


def track_domain_levels(
    scored: pd.DataFrame, tasks: Sequence[Task], curriculum: CurriculumConfig, previous: pd.DataFrame | None,
    round_index: int,
) -> pd.DataFrame:
    """The curriculum's table after a round: each domain's level moved by this round's pass rate at
    its level, its weight for the next round, and this round's per-domain summary."""
    settings, band = curriculum.levels, curriculum.band
    before = levels_from_frame(previous)
    levels = task_levels(tasks)
    difficulty = {t.task_id: t.difficulty for t in tasks}
    rows = usable_rows(scored).assign(difficulty=lambda f: f["task_id"].map(difficulty))
    start = {d: before.get(d, DomainLevel(ladder[0])).level for d, ladder in levels.items()}
    at_level = rows[rows["difficulty"] == rows["domain"].map(start)]
    observed = at_level.groupby("domain")["correct"].mean().astype(float).to_dict()
    state = update_domain_levels(before, observed, levels, band, curriculum.pass_rate_ema, settings.patience)
    weights = domain_weights(state, band, settings.out_of_band_weight)
    summary = rows.groupby("domain").agg(pass_rate=("correct", "mean"), reward_mean=("reward", "mean"),
                                         samples=("reward", "size"), difficulty_mean=("difficulty", "mean"))
    return pd.DataFrame(
        [
            {"round": round_index, "domain": d, "level": s.level,
             "level_pass_rate": math.nan if s.pass_rate is None else s.pass_rate, "streak": s.streak,
             "weight": weights[d], **_summary(summary, d)}
            for d, s in sorted(state.items())
        ],
        columns=LEVEL_COLUMNS,
    )


def _summary(summary: pd.DataFrame, domain: str) -> dict[str, float]:
    if domain not in summary.index:
        return {"pass_rate": math.nan, "reward_mean": math.nan, "samples": 0, "difficulty_mean": math.nan}
    row = summary.loc[domain]
    return {"pass_rate": float(row.pass_rate), "reward_mean": float(row.reward_mean), "samples": int(row.samples),
            "difficulty_mean": float(row.difficulty_mean)}


def level_prompt_order(
    tasks: Sequence[Task], rates: Mapping[str, float], levels: pd.DataFrame | None, curriculum: CurriculumConfig,
    rng: random.Random,
) -> list[int]:
    """The order a round draws train prompts in under the per-domain curriculum (`domain_prompt_order`)."""
    settings, band = curriculum.levels, curriculum.band
    state = levels_from_frame(levels)
    state = {d: state.get(d, DomainLevel(ladder[0])) for d, ladder in task_levels(tasks).items()}
    return domain_prompt_order(
        [t.domain for t in tasks], [t.difficulty for t in tasks], [rates.get(t.task_id) for t in tasks], state,
        domain_weights(state, band, settings.out_of_band_weight), rng, band, curriculum.band_fraction,
    )


def level_stats(levels: pd.DataFrame) -> dict[str, float]:
    """The round's curriculum per domain (`<domain>.level`, `<domain>.level_pass_rate`, `<domain>.weight`)
    and over the domains (mean level, domains whose level pass rate is in the band or unmeasured)."""
    stats: dict[str, float] = {
        "curriculum_level_mean": float(levels["level"].mean()) if len(levels) else 0.0,
        "curriculum_domains_weighted": float((levels["weight"] == 1.0).sum()),
    }
    for r in levels.itertuples(index=False):
        stats.update({f"{r.domain}.level": float(r.level), f"{r.domain}.weight": float(r.weight)})
        if not pd.isna(r.level_pass_rate):
            stats[f"{r.domain}.level_pass_rate"] = float(r.level_pass_rate)
    return stats
