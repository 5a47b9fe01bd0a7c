"""The reward audit as a picture: domains or families down, attack kinds across, each cell the share of that
kind's attacks the group's reward paid (white: none, red: all; grey: no such attack was made; a group whose
code attack reached the host is marked). Rendered without a display; knows nothing about Kedro."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.colors import LinearSegmentedColormap
from matplotlib.figure import Figure

from rlvr_factory.audit.attacks import KINDS

_PAID = LinearSegmentedColormap.from_list("paid", ["#ffffff", "#d62728"])


def paid_shares(report: Mapping[str, Any]) -> tuple[list[str], np.ndarray]:
    """The groups of a report (`AuditReport.to_json()`) and, per group and kind, the share paid (NaN: not tried)."""
    results = report["results"]
    shares = np.full((len(results), len(KINDS)), np.nan)
    for row, result in enumerate(results):
        for col, kind in enumerate(KINDS):
            tried = result["tried"].get(kind, 0)
            if tried:
                shares[row, col] = result["paid"].get(kind, 0) / tried
    return [r["group"] for r in results], shares


def plot_reward_audit(report: Mapping[str, Any]) -> Figure:
    """One heatmap of the audit: what each domain or family paid, by kind of attack (a note when it was off)."""
    if "results" not in report:
        figure = Figure(figsize=(6, 1.2))
        figure.text(0.5, 0.5, "the reward audit is off (curate.audit.enabled: false)", ha="center", va="center")
        return figure
    groups, shares = paid_shares(report)
    figure = Figure(figsize=(9, 1.6 + 0.22 * max(len(groups), 1)))
    axes = figure.add_subplot()
    axes.set_facecolor("#dddddd")
    image = axes.imshow(np.ma.masked_invalid(shares), cmap=_PAID, vmin=0, vmax=1, aspect="auto",
                        interpolation="nearest")
    axes.set_xticks(range(len(KINDS)), KINDS, rotation=45, ha="right", fontsize=8)
    canaries = {r["group"] for r in report["results"] if r.get("canary")}
    labels = [f"{g}  (ran on the host)" if g in canaries else g for g in groups]
    axes.set_yticks(range(len(groups)), labels, fontsize=7)
    failing = len(report.get("failing", {}))
    axes.set_title(f"Reward audit: {failing} of {len(groups)} pay an attack "
                   f"({report.get('attacks', 0)} attacks, {report.get('tasks_per_group', 0)} tasks each)", fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.03, pad=0.02, label="share of the kind's attacks paid")
    figure.tight_layout()
    return figure
