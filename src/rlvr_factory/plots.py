"""The round curves: one table per run (what `dvc plots show` draws) and the figure made from it
(reward and pass rate, validation accuracy against the SFT baseline, KL and entropy, lengths, and
for multi-turn runs the tool calls and turns of an episode).
Rendered without a display; knows nothing about Kedro."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, PercentFormatter

REQUIRED = ["round", "reward_mean", "pass_rate", "val_greedy_accuracy"]
OPTIONAL = ["entropy", "kl", "policy_drift_kl", "completion_tokens_mean", "truncated_fraction"]
EPISODE = ["turns_per_episode", "tool_calls_per_episode"]  # kept only for runs whose episodes use them
PASS_BY_TURNS = "pass_rate/turns_"  # with the number of turns: the pass rate of the episodes that took that many
SFT_BASELINE = "sft_val_greedy_accuracy"
COLORS = {"reward": "#1f77b4", "pass": "#ff7f0e", "val": "#2ca02c", "sft": "#7f7f7f", "entropy": "#9467bd",
          "kl": "#d62728", "drift": "#e377c2", "tokens": "#17becf", "truncated": "#8c564b", "tools": "#bcbd22", "turns": "#393b79"}


def round_curves(round_history: Sequence[Mapping], sft_val_greedy_accuracy: float) -> pd.DataFrame:
    """One row per RL round: reward, pass rate, validation accuracy with the SFT policy's as a
    baseline column, and, when the rounds report them, entropy, KL and completion lengths; turns
    and tool calls per episode, and the pass rate by number of turns (empty for a round with no
    episode of that length), only when some episode took more than one turn or called a tool."""
    if not round_history:
        raise ValueError("the round history is empty; run the `rl` pipeline first")
    missing = [c for c in REQUIRED if c not in round_history[0]]
    if missing:
        raise ValueError(f"the round history lacks {missing}; was it written by the `rl` pipeline?")
    columns = REQUIRED + [c for c in OPTIONAL if all(c in r for r in round_history)]
    if _multi_turn(round_history):
        by_turns = sorted({k for r in round_history for k in r if k.startswith(PASS_BY_TURNS)},
                          key=lambda k: int(k.removeprefix(PASS_BY_TURNS)))
        columns += EPISODE + by_turns
    curves = pd.DataFrame([{c: r.get(c, np.nan) for c in columns} for r in round_history])
    curves = curves.sort_values("round", ignore_index=True)
    curves.insert(4, SFT_BASELINE, float(sft_val_greedy_accuracy))
    return curves


def _multi_turn(round_history: Sequence[Mapping]) -> bool:
    if not all(c in r for r in round_history for c in EPISODE):
        return False
    return any(r["turns_per_episode"] > 1 or r["tool_calls_per_episode"] > 0 for r in round_history)


def _fraction_axis(axes: Axes) -> None:
    axes.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))


def _style(axes: Axes, title: str, ylabel: str) -> None:
    axes.set_title(title, loc="left", fontsize=11, fontweight="bold")
    axes.set_xlabel("RL round")
    axes.set_ylabel(ylabel)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.grid(alpha=0.3)
    axes.spines[["top"]].set_visible(False)


def _legend(*axes: Axes) -> None:
    """One legend for a panel and its twin, in the headroom `_headroom` leaves above the data."""
    handles = [h for a in axes for h in a.get_legend_handles_labels()[0]]
    labels = [label for a in axes for label in a.get_legend_handles_labels()[1]]
    axes[-1].legend(handles, labels, loc="upper left", fontsize="small", framealpha=0.9)


def _headroom(axes: Axes, top: float, bottom: float = 0.0) -> None:
    """Y limits from `bottom` with a third of the range free above the data, for the legend (a non-finite `top`,
    e.g. a step KL that overflowed, leaves the unit range: matplotlib draws no non-finite point)."""
    top = top if math.isfinite(top) else bottom + 1.0
    axes.set_ylim(bottom, bottom + max(top - bottom, 1e-6) * 1.45)


def _finite_max(values: pd.Series) -> float:
    """The largest finite value (NaN when there is none)."""
    finite = values[np.isfinite(values.to_numpy(dtype=float))]
    return float(finite.max()) if len(finite) else math.nan


def _reward_panel(axes: Axes, curves: pd.DataFrame) -> None:
    rounds = curves["round"]
    if np.allclose(curves["reward_mean"], curves["pass_rate"]):  # a 0/1 reward: one line says both
        axes.plot(rounds, curves["pass_rate"], "o-", color=COLORS["pass"], label="pass rate = mean reward (0/1 reward)")
    else:
        axes.plot(rounds, curves["reward_mean"], "o-", color=COLORS["reward"], label="mean reward")
        axes.plot(rounds, curves["pass_rate"], "s--", color=COLORS["pass"], label="pass rate (correct samples)")
    _headroom(axes, float(curves[["reward_mean", "pass_rate"]].max().max()))
    _fraction_axis(axes)
    _style(axes, "Rollouts: reward and pass rate", "of the round's samples")
    _legend(axes)


def _validation_panel(axes: Axes, curves: pd.DataFrame) -> None:
    rounds, accuracy = curves["round"], curves["val_greedy_accuracy"]
    sft = float(curves[SFT_BASELINE].iloc[0])
    axes.axhline(sft, color=COLORS["sft"], linestyle="--", linewidth=1.5, label=f"SFT policy: {sft:.1%}")
    axes.plot(rounds, accuracy, "o-", color=COLORS["val"], label="after the round's update")
    best = int(accuracy.idxmax())
    align = "right" if best == len(accuracy) - 1 else "left" if best == 0 else "center"  # stay inside the axes
    axes.annotate(f"best {accuracy[best]:.1%}", (rounds[best], accuracy[best]), textcoords="offset points",
                  xytext=(0, 8), ha=align, fontsize="small", color=COLORS["val"])
    _headroom(axes, max(float(accuracy.max()), sft))
    _fraction_axis(axes)
    _style(axes, "Validation: greedy accuracy", "tasks solved")
    _legend(axes)


Line = tuple[str, str, str, str]  # column, matplotlib format, colour (COLORS key), label


def _twin_panel(axes: Axes, curves: pd.DataFrame, lines: tuple[Sequence[Line], Sequence[Line]], title: str,
                ylabels: tuple[str, str], right_floor: float, right_percent: bool = False) -> None:
    """A panel with a left and a right y axis, each drawing those of its lines the table has."""
    twin = axes.twinx()
    for target, side in zip((axes, twin), lines):
        present = [line for line in side if line[0] in curves]
        for column, fmt, color, label in present:
            target.plot(curves["round"], curves[column], fmt, color=COLORS[color], label=label)
        _headroom(target, np.nanmax([right_floor if target is twin else 0.0, *(_finite_max(curves[c]) for c, *_ in present)]))
    if right_percent:
        twin.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    twin.set_ylabel(ylabels[1])
    twin.spines[["top"]].set_visible(False)
    _style(axes, title, ylabels[0])
    _legend(axes, twin)


def _divergence_panel(axes: Axes, curves: pd.DataFrame) -> None:
    has_reference = "kl" in curves and curves["kl"].abs().max() > 0
    kl = [("kl", "s--", "kl", "KL to the reference (right)")] if has_reference else []
    _twin_panel(axes, curves, ([("entropy", "o-", "entropy", "entropy (left)")],
                               [*kl, ("policy_drift_kl", "^:", "drift", "KL of the update step (right)")]),
                "Policy: entropy and KL", ("entropy (nats per token)", "KL (nats per token)"), right_floor=1e-3)


def _length_panel(axes: Axes, curves: pd.DataFrame) -> None:
    _twin_panel(axes, curves, ([("completion_tokens_mean", "o-", "tokens", "mean completion length (left)")],
                               [("truncated_fraction", "s--", "truncated", "truncated at the budget (right)")]),
                "Completions: length", ("tokens", "of the samples"), right_floor=0.05, right_percent=True)


def _episode_panel(axes: Axes, curves: pd.DataFrame) -> None:
    rounds = curves["round"]
    axes.plot(rounds, curves["tool_calls_per_episode"], "o-", color=COLORS["tools"], label="tool calls")
    axes.plot(rounds, curves["turns_per_episode"], "s--", color=COLORS["turns"], label="turns")
    _headroom(axes, float(curves[EPISODE].max().max()))
    _style(axes, "Episodes: tool calls and turns", "per episode (mean)")
    _legend(axes)


def _turns_panel(axes: Axes, curves: pd.DataFrame) -> None:
    columns = [c for c in curves if c.startswith(PASS_BY_TURNS)]
    markers = "o^sDv"
    for i, column in enumerate(columns):
        turns = int(column.removeprefix(PASS_BY_TURNS))
        axes.plot(curves["round"], curves[column], f"{markers[i % len(markers)]}-", color=f"C{i}",
                  label=f"{turns} turn{'s' if turns > 1 else ''}")
    _headroom(axes, float(np.nanmax(curves[columns].to_numpy())) if columns else 1.0)
    _fraction_axis(axes)
    _style(axes, "Episodes: pass rate by turns used", "of the episodes that long")
    _legend(axes)


def plot_round_curves(curves: pd.DataFrame) -> Figure:
    """The panels of the round curves in one figure (four; six when the episodes had several
    turns), its title the run's validation story."""
    multi_turn = all(c in curves for c in EPISODE)
    figure = Figure(figsize=(18 if multi_turn else 12, 7.5), dpi=100, layout="constrained")
    accuracy = curves["val_greedy_accuracy"]
    figure.suptitle(
        f"{len(curves)} RL rounds: validation greedy accuracy {curves[SFT_BASELINE].iloc[0]:.1%} (SFT) → "
        f"{accuracy.iloc[-1]:.1%} after the last round, best {accuracy.max():.1%}", fontsize=13, fontweight="bold")
    panels = figure.subplots(2, 3 if multi_turn else 2, sharex=True)
    _reward_panel(panels[0, 0], curves)
    _validation_panel(panels[0, 1], curves)
    _divergence_panel(panels[1, 0], curves)
    _length_panel(panels[1, 1], curves)
    if multi_turn:
        _episode_panel(panels[0, 2], curves)
        _turns_panel(panels[1, 2], curves)
    for axes in panels[0]:
        axes.tick_params(labelbottom=True)
    return figure
