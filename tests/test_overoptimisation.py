"""Proxy against gold per round: the numbers of a round, the curve, where the gold stops tracking, the figure."""

from __future__ import annotations


import pandas as pd
import pytest

from rlvr_factory.overoptimisation import CURVE_COLUMNS, component_stats, plot_proxy_gold, proxy_gold_curve, tracking_summary


def learned_history(proxy: list[float], gold: list[float]) -> list[dict]:
    """A round history of a run on a learned reward, rounds given out of order."""
    rounds = [{"round": r, "proxy_reward_mean": p, "gold_accuracy": g, "gold_reward_mean": g, "val_greedy_accuracy": g / 2,
               "reward_mean": p, "pass_rate": g} for r, (p, g) in enumerate(zip(proxy, gold))]
    return rounds[::-1]


def scored(rows: list[tuple[str, dict]]) -> pd.DataFrame:
    return pd.DataFrame({"status": [s for s, _ in rows], "reward_breakdown": [b for _, b in rows]})


def test_a_rounds_proxy_and_gold_come_from_its_usable_rollouts():
    sample = {"rm": 1.5, "verifier": 1.0, "gold_correct": 1.0, "gold_ok": 1.0}
    table = scored([("ok", sample), ("ok", {**sample, "rm": -0.5, "verifier": 0.0, "gold_correct": 0.0}),
                    ("error", {**sample, "rm": 0.0, "verifier": 0.0, "gold_correct": 0.0, "gold_ok": 0.0}),
                    ("infra_error", {**sample, "rm": 100.0})])
    assert component_stats(table) == pytest.approx(
        {"proxy_reward_mean": 1 / 3, "gold_reward_mean": 1 / 3, "gold_accuracy": 1 / 3, "gold_ok_fraction": 2 / 3})


def test_a_round_without_a_learned_component_has_no_proxy_numbers():
    assert component_stats(scored([("ok", {"outcome": 1.0})])) == {}


def test_the_curve_lines_rounds_up_in_order_and_a_verifier_run_is_its_own_proxy():
    curve = proxy_gold_curve(learned_history([0.1, 0.5, 0.9], [0.2, 0.4, 0.3]))
    assert list(curve.columns) == CURVE_COLUMNS and curve["round"].tolist() == [0, 1, 2]
    assert curve["proxy_reward_mean"].tolist() == [0.1, 0.5, 0.9]
    plain = [{"round": 0, "reward_mean": 0.3, "pass_rate": 0.25, "val_greedy_accuracy": 0.2}]
    assert proxy_gold_curve(plain).iloc[0][["proxy_reward_mean", "gold_accuracy"]].tolist() == [0.3, 0.25]
    with pytest.raises(ValueError, match="round history is empty"):
        proxy_gold_curve([])


def test_a_gold_that_peaks_while_the_proxy_keeps_rising_is_named_with_its_round():
    summary = tracking_summary(proxy_gold_curve(learned_history([0.1, 0.4, 0.8, 1.2, 1.5], [0.2, 0.35, 0.5, 0.4, 0.3])))
    assert summary["gold_peak_round"] == 2 and summary["gold_peak"] == 0.5 and summary["gold_end"] == 0.3
    assert summary["verdict"].startswith("the gold stops tracking the proxy after round 2")
    assert "+0.700" in summary["verdict"] and "0.200" in summary["verdict"]


def test_a_gold_that_rises_to_the_last_round_follows_the_proxy():
    summary = tracking_summary(proxy_gold_curve(learned_history([0.1, 0.4, 0.8], [0.2, 0.3, 0.5])))
    assert summary["gold_peak_round"] == 2 and summary["verdict"] == "the gold follows the proxy up to the last round"


def test_a_verifier_run_is_said_to_be_its_own_proxy():
    summary = tracking_summary(proxy_gold_curve(learned_history([0.1, 0.4], [0.4, 0.1])), learned=False)
    assert summary["learned_reward"] == 0 and "coincide" in summary["verdict"]


def test_the_figure_has_both_panels_and_the_verdict_as_a_title():
    curve = proxy_gold_curve(learned_history([0.1, 0.4, 0.8], [0.2, 0.5, 0.3]))
    figure = plot_proxy_gold(curve, tracking_summary(curve))
    by_round, gao = figure.axes[0], figure.axes[1]
    assert gao.get_title().startswith("the gold stops tracking the proxy after round 1")
    assert list(gao.lines[0].get_xdata()) == [0.1, 0.4, 0.8] and list(gao.lines[0].get_ydata()) == [0.2, 0.5, 0.3]
    assert by_round.get_xlabel() == "RL round"
