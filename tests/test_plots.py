"""`rlvr_factory.plots`: the round-curve table (what `dvc plots show` draws) and the four-panel figure."""

from __future__ import annotations

import io

import pytest

from rlvr_factory.plots import SFT_BASELINE, plot_round_curves, round_curves

HISTORY = [
    {"round": r, "reward_mean": 0.1 * r, "pass_rate": 0.1 * r, "val_greedy_accuracy": 0.2 + 0.05 * r, "kl": 0.0,
     "policy_drift_kl": 0.001 * (r + 1), "entropy": 0.5 - 0.05 * r, "completion_tokens_mean": 16.0 + r,
     "truncated_fraction": 0.01 * r, "lr": 1e-4}
    for r in (2, 0, 1, 3)
]


def _png(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def test_the_table_has_one_row_per_round_in_order_with_the_sft_baseline():
    curves = round_curves(HISTORY, sft_val_greedy_accuracy=0.15)
    assert curves["round"].tolist() == [0, 1, 2, 3]
    assert list(curves.columns) == ["round", "reward_mean", "pass_rate", "val_greedy_accuracy", SFT_BASELINE,
                                    "entropy", "kl", "policy_drift_kl", "completion_tokens_mean", "truncated_fraction"]
    assert set(curves[SFT_BASELINE]) == {0.15}
    assert "lr" not in curves  # only what the figure draws


def test_statistics_a_round_does_not_report_are_left_out():
    curves = round_curves([{k: v for k, v in r.items() if k != "entropy"} for r in HISTORY], 0.1)
    assert "entropy" not in curves


def test_an_empty_or_foreign_history_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="run the `rl` pipeline"):
        round_curves([], 0.1)
    with pytest.raises(ValueError, match="lacks \\['val_greedy_accuracy'\\]"):
        round_curves([{"round": 0, "reward_mean": 0.0, "pass_rate": 0.0}], 0.1)


def test_the_figure_has_four_titled_panels_over_whole_rounds():
    figure = plot_round_curves(round_curves(HISTORY, 0.15))
    panels = [a for a in figure.axes if a.get_title(loc="left")]
    assert [a.get_title(loc="left") for a in panels] == [
        "Rollouts: reward and pass rate", "Validation: greedy accuracy", "Policy: entropy and KL", "Completions: length"]
    for axes in panels:
        assert axes.get_xlabel() == "RL round" and axes.get_ylabel()
        assert all(float(t).is_integer() for t in axes.get_xticks())
    assert "0.15" not in figure.get_suptitle() and "15.0% (SFT)" in figure.get_suptitle()


def test_a_0_1_reward_draws_one_line_for_reward_and_pass_rate_and_the_sft_baseline_is_drawn():
    figure = plot_round_curves(round_curves(HISTORY, 0.15))
    reward, validation = figure.axes[0], figure.axes[1]
    assert [line.get_label() for line in reward.get_lines()] == ["pass rate = mean reward (0/1 reward)"]
    assert [line.get_label() for line in validation.get_lines()] == ["SFT policy: 15.0%", "after the round's update"]
    partial = [{**r, "reward_mean": r["pass_rate"] + 0.05} for r in HISTORY]
    labels = [line.get_label() for line in plot_round_curves(round_curves(partial, 0.15)).axes[0].get_lines()]
    assert labels == ["mean reward", "pass rate (correct samples)"]


def test_kl_to_a_reference_is_drawn_only_when_the_run_has_one():
    def kl_labels(history):
        figure = plot_round_curves(round_curves(history, 0.1))
        return {line.get_label() for axes in figure.axes for line in axes.get_lines() if "KL" in line.get_label()}

    assert kl_labels(HISTORY) == {"KL of the update step (right)"}
    assert "KL to the reference (right)" in kl_labels([{**r, "kl": 0.01} for r in HISTORY])


def test_the_same_curves_render_to_the_same_png_bytes():
    # The PNG is a DVC output: its hash is in dvc.lock, which must not change between identical runs.
    curves = round_curves(HISTORY, 0.15)
    first = _png(plot_round_curves(curves))
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    assert _png(plot_round_curves(curves)) == first


def test_multi_turn_runs_get_the_episode_columns_and_two_more_panels():
    history = [{**r, "turns_per_episode": 1.0 + 0.2 * r["round"], "tool_calls_per_episode": 0.2 * r["round"],
                "pass_rate/turns_1": 0.1, **({"pass_rate/turns_2": 0.5} if r["round"] else {})} for r in HISTORY]
    curves = round_curves(history, 0.15)
    assert list(curves.columns)[-4:] == ["turns_per_episode", "tool_calls_per_episode", "pass_rate/turns_1",
                                         "pass_rate/turns_2"]
    assert curves["tool_calls_per_episode"].tolist() == pytest.approx([0.0, 0.2, 0.4, 0.6])
    assert curves["pass_rate/turns_2"].isna().tolist() == [True, False, False, False]  # round 0 had no 2-turn episode
    titles = [a.get_title(loc="left") for a in plot_round_curves(curves).axes if a.get_title(loc="left")]
    assert {"Episodes: tool calls and turns", "Episodes: pass rate by turns used"} <= set(titles)
    assert len(titles) == 6


def test_single_turn_runs_keep_four_panels_even_when_the_rounds_report_episode_statistics():
    history = [{**r, "turns_per_episode": 1.0, "tool_calls_per_episode": 0.0} for r in HISTORY]
    curves = round_curves(history, 0.15)
    assert not [c for c in curves if "turns" in c or "tool" in c]
    assert len([a for a in plot_round_curves(curves).axes if a.get_title(loc="left")]) == 4


def test_a_non_finite_statistic_is_drawn_without_its_points_not_a_crash():
    """An update step whose KL overflowed (a policy that moved far in one step) must not fail the run's report."""
    history = [{**r, "policy_drift_kl": float("inf") if r["round"] == 1 else float("nan") if r["round"] == 2
                else r["policy_drift_kl"]} for r in HISTORY]
    figure = plot_round_curves(round_curves(history, 0.1))
    twin = next(a for a in figure.axes if any(line.get_label() == "KL of the update step (right)" for line in a.get_lines()))
    bottom, top = twin.get_ylim()
    assert bottom == 0.0 and 0.004 < top < 1.0  # the finite points' range (the floor 1e-3, the largest 0.004)
    assert _png(figure)[:8] == b"\x89PNG\r\n\x1a\n"
