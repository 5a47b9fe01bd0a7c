"""Reading a run over many domains: per-domain tables and a heatmap instead of a hundred curves.

* `without_domain_curves`: the round's stats as MLflow curves, per-domain ones only while there are
  few domains (beyond, the per-round domain table artifact and the heatmap carry them);
* `domain_rounds` and `domain_heatmap`: every round's domain table stacked, and its pass rate as a
  domains x rounds picture;
* `domain_gains`: the evaluation's per-domain table, SFT vs RL, sorted by gain.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import pandas as pd
from matplotlib.figure import Figure

GAIN_METRIC = "pass@1"  # the per-domain pass rate the gain table ranks by (sampled, so it moves smoothly)


def without_domain_curves(stats: Mapping[str, Any], domains: set[str], max_domains: int) -> dict[str, Any]:
    """`stats` without its `<domain>.<metric>` keys when there are more than `max_domains` domains."""
    if len(domains) <= max_domains:
        return dict(stats)
    return {k: v for k, v in stats.items() if k.split(".", 1)[0] not in domains or "." not in k}


def domain_rounds(*tables: pd.DataFrame) -> pd.DataFrame:
    """The per-round domain tables as one long table (round, domain, level, pass rates, weight ...)."""
    frames = [t for t in tables if len(t)]
    if not frames:
        raise ValueError("no per-round domain table has rows; did any round run?")
    return pd.concat(frames, ignore_index=True).sort_values(["round", "domain"], ignore_index=True)


MAX_COLUMNS = 100  # a heatmap of more rounds shows each column as the mean of consecutive rounds


def domain_heatmap(rounds: pd.DataFrame, value: str = "pass_rate") -> Figure:
    """Each domain's `value` per round as a heatmap (domains down, rounds across), with each domain's
    final curriculum level beside its name.

    Up to `MAX_COLUMNS` rounds, a column per round; a longer run's columns are the mean of consecutive
    rounds (the x axis says how many), so the picture, and the memory drawing it takes, stay the same size
    at 5,000 rounds as at 100 (a column per round made a 5,000-round run's picture 175,000 pixels wide)."""
    grid = rounds.pivot(index="domain", columns="round", values=value).sort_index()
    final = rounds.sort_values("round").groupby("domain")["level"].last().reindex(grid.index)
    per_column = -(-grid.shape[1] // MAX_COLUMNS)  # rounds per column
    first = grid.columns.to_numpy()[::per_column]  # each column's first round
    if per_column > 1:
        grid = grid.T.groupby(pd.RangeIndex(grid.shape[1]) // per_column).mean().T
    figure = Figure(figsize=(max(6.0, 0.35 * grid.shape[1] + 3), max(3.0, 0.17 * grid.shape[0] + 1.5)),
                    layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(grid.to_numpy(dtype=float), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                      interpolation="nearest")
    ax.set_yticks(range(len(grid.index)), [f"{d} (L{int(lv)})" for d, lv in zip(grid.index, final)],
                  fontsize=7 if len(grid.index) > 30 else 9)
    every = max(1, grid.shape[1] // 25)  # at most ~25 labels
    ax.set_xticks(range(0, grid.shape[1], every), [str(int(r)) for r in first[::every]], fontsize=8)
    ax.set_xlabel("RL round" if per_column == 1 else f"RL round (each column: the mean of {per_column} rounds from it)")
    ax.set_title(f"{value.replace('_', ' ')} per domain and round (L: final curriculum level)")
    figure.colorbar(image, ax=ax, label=value.replace("_", " "))
    return figure


def domain_gains(sft: Mapping[str, float], rl: Mapping[str, float], last_round: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per domain of the evaluation: SFT and RL pass rate (pass@1) and greedy accuracy, the gain, the
    number of test tasks and the domain's final curriculum level; sorted by gain, largest first."""
    prefix = f"{GAIN_METRIC}/domain_"
    domains = sorted(k[len(prefix):] for k in rl if k.startswith(prefix) and "/" not in k[len(prefix):])
    rows = [
        {
            "domain": d,
            "sft_pass_rate": sft.get(f"{prefix}{d}"),
            "rl_pass_rate": rl[f"{prefix}{d}"],
            "gain": rl[f"{prefix}{d}"] - sft.get(f"{prefix}{d}", 0.0),
            "sft_greedy_accuracy": sft.get(f"greedy_accuracy/domain_{d}"),
            "rl_greedy_accuracy": rl.get(f"greedy_accuracy/domain_{d}"),
            "num_tasks": int(rl.get(f"num_tasks/domain_{d}", 0)),
            "final_level": last_round.get(f"{d}.level"),
        }
        for d in domains
    ]
    return sorted(rows, key=lambda r: (-r["gain"], r["domain"]))


def gain_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Over the domains of a gain table: mean SFT and RL pass rate, mean gain, the largest drop, and
    how many domains gained / fell."""
    if not rows:
        return {}
    gains = [r["gain"] for r in rows]
    return {
        "domains": float(len(rows)),
        "sft_pass_rate_mean": sum(r["sft_pass_rate"] or 0.0 for r in rows) / len(rows),
        "rl_pass_rate_mean": sum(r["rl_pass_rate"] for r in rows) / len(rows),
        "gain_mean": sum(gains) / len(gains),
        "largest_drop": -min(0.0, min(gains)),
        "domains_gained": float(sum(g > 0 for g in gains)),
        "domains_fell": float(sum(g < 0 for g in gains)),
    }
