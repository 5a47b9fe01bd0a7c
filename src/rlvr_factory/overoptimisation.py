"""Over-optimisation of a learned reward, visible: the proxy reward against the gold reward per round.

A run trained on a reward model (the proxy) whose tasks also have a verifier (the gold) scores
every rollout with both (`domains/learned_reward.py`). `component_stats` reads one round's
`scored` table into per-round numbers; `proxy_gold_curve` lines the rounds up; the figure is
the Gao et al. 2022 picture (their Fig. 1): the proxy keeps rising while the gold rises, then
stalls or falls. `tracking_summary` says where the gold peaked and what the proxy did after.
Knows nothing about Kedro.
"""

from __future__ import annotations


import pandas as pd
from matplotlib.figure import Figure

CURVE_COLUMNS = ["round", "proxy_reward_mean", "gold_accuracy", "gold_reward_mean", "val_greedy_accuracy"]
EXCLUDED_STATUS = "infra_error"  # left out of the loss, so out of the round's numbers too


def component_stats(scored: pd.DataFrame) -> dict[str, float]:
    """A learned-reward round's proxy and gold over its usable rollouts: `proxy_reward_mean` (the reward
    model), `gold_reward_mean` and `gold_accuracy` (the verifier), `gold_ok_fraction` (samples the
    verifier could judge). Empty for a round whose reward has no learned component."""
    rows = scored[scored["status"] != EXCLUDED_STATUS]
    breakdowns = list(rows["reward_breakdown"])
    if not breakdowns or not all("rm" in b for b in breakdowns):
        return {}
    frame = pd.DataFrame(breakdowns)
    return {
        "proxy_reward_mean": float(frame["rm"].mean()),
        "gold_reward_mean": float(frame["verifier"].mean()),
        "gold_accuracy": float(frame["gold_correct"].mean()),
        "gold_ok_fraction": float(frame["gold_ok"].mean()),
    }


def proxy_gold_curve(round_history: list[dict]) -> pd.DataFrame:
    """Proxy and gold per round (`CURVE_COLUMNS`). In a run whose reward is the verifier itself the
    proxy is the mean reward and the gold the pass rate: the two coincide by construction."""
    if not round_history:
        raise ValueError("the round history is empty; run the `rl` pipeline first")
    rows = []
    for r in sorted(round_history, key=lambda r: r["round"]):
        learned = "proxy_reward_mean" in r
        rows.append({
            "round": int(r["round"]),
            "proxy_reward_mean": r["proxy_reward_mean"] if learned else r["reward_mean"],
            "gold_accuracy": r["gold_accuracy"] if learned else r["pass_rate"],
            "gold_reward_mean": r["gold_reward_mean"] if learned else r["reward_mean"],
            "val_greedy_accuracy": r["val_greedy_accuracy"],
        })
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def tracking_summary(curve: pd.DataFrame, learned: bool = True) -> dict[str, float | int | str]:
    """Where the gold stopped following the proxy: the round of the gold's peak (rollout accuracy),
    the gold and proxy at the start, the peak and the end, and a one-line verdict."""
    first, last = curve.iloc[0], curve.iloc[-1]
    peak = curve.loc[curve["gold_accuracy"].idxmax()]
    val_peak = curve.loc[curve["val_greedy_accuracy"].idxmax()]
    summary: dict[str, float | int | str] = {
        "learned_reward": int(learned),
        "rounds": int(len(curve)),
        "gold_peak_round": int(peak["round"]),
        "val_peak_round": int(val_peak["round"]),
        **{f"{name}_{where}": float(row[column]) for where, row in (("start", first), ("peak", peak), ("end", last))
           for name, column in (("gold", "gold_accuracy"), ("proxy", "proxy_reward_mean"))},
        "val_greedy_accuracy_start": float(first["val_greedy_accuracy"]),
        "val_greedy_accuracy_peak": float(val_peak["val_greedy_accuracy"]),
        "val_greedy_accuracy_end": float(last["val_greedy_accuracy"]),
    }
    proxy_gain = summary["proxy_end"] - summary["proxy_peak"]
    gold_loss = summary["gold_peak"] - summary["gold_end"]
    if not learned:
        verdict = "the reward is the verifier: proxy and gold coincide"
    elif int(peak["round"]) == int(last["round"]) or gold_loss <= 0:
        verdict = "the gold follows the proxy up to the last round"
    else:
        verdict = (f"the gold stops tracking the proxy after round {int(peak['round'])}: the proxy moves by "
                   f"{proxy_gain:+.3f} afterwards while gold accuracy falls by {gold_loss:.3f}")
    summary["verdict"] = verdict
    return summary


def plot_proxy_gold(curve: pd.DataFrame, summary: dict) -> Figure:
    """Left: proxy and gold per round, the gold's peak marked; right: gold against proxy, in round
    order (the Gao et al. 2022 curve). Rendered without a display."""
    figure = Figure(figsize=(10, 3.8), dpi=100)
    by_round, gao = figure.subplots(1, 2)
    by_round.plot(curve["round"], curve["proxy_reward_mean"], marker="o", color="tab:purple", label="proxy reward (RM)")
    by_round.set_xlabel("RL round")
    by_round.set_ylabel("proxy reward", color="tab:purple")
    gold_axis = by_round.twinx()
    gold_axis.plot(curve["round"], curve["gold_accuracy"], marker="s", color="tab:green", label="gold: rollout accuracy")
    gold_axis.plot(curve["round"], curve["val_greedy_accuracy"], marker="^", color="tab:olive", linestyle="--",
                   label="gold: validation greedy accuracy")
    gold_axis.set_ylabel("gold (verifier) accuracy", color="tab:green")
    gold_axis.set_ylim(-0.02, 1.02)
    by_round.axvline(summary["gold_peak_round"], color="grey", linestyle=":", label="gold peak")
    lines = by_round.get_legend_handles_labels()
    more = gold_axis.get_legend_handles_labels()
    by_round.legend(lines[0] + more[0], lines[1] + more[1], loc="best", fontsize="x-small")
    by_round.grid(alpha=0.3)
    by_round.set_title("proxy and gold per round", fontsize="small")
    gao.plot(curve["proxy_reward_mean"], curve["gold_accuracy"], marker="o", color="tab:green")
    for r, x, y in zip(curve["round"], curve["proxy_reward_mean"], curve["gold_accuracy"]):
        gao.annotate(str(int(r)), (x, y), textcoords="offset points", xytext=(3, 3), fontsize="x-small")
    gao.set_xlabel("proxy reward (reward model)")
    gao.set_ylabel("gold accuracy (verifier)")
    gao.grid(alpha=0.3)
    gao.set_title(summary["verdict"], fontsize="x-small", wrap=True)
    figure.tight_layout()
    return figure
