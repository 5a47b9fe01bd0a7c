"""Reading a run over many domains: per-round tables stacked, the heatmap, the gain table."""

import pandas as pd
import pytest

from rlvr_factory.domain_report import domain_gains, domain_heatmap, domain_rounds, gain_summary, without_domain_curves
from rlvr_factory.training.domain_levels import LEVEL_COLUMNS


def table(round_index: int, rates: dict[str, float], levels: dict[str, int]) -> pd.DataFrame:
    return pd.DataFrame([{"round": round_index, "domain": d, "level": levels[d], "level_pass_rate": r, "streak": 0,
                          "weight": 1.0, "pass_rate": r, "reward_mean": r, "samples": 8, "difficulty_mean": 1.0}
                         for d, r in rates.items()], columns=LEVEL_COLUMNS)


def test_round_tables_stack_into_one_long_table_sorted_by_round_and_domain():
    stacked = domain_rounds(table(1, {"b": 0.5, "a": 0.2}, {"a": 1, "b": 2}), table(0, {"a": 0.1, "b": 0.4}, {"a": 1, "b": 1}))
    assert list(zip(stacked["round"], stacked["domain"])) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    with pytest.raises(ValueError, match="no per-round domain table"):
        domain_rounds(table(0, {}, {}))


def test_the_heatmap_has_a_row_per_domain_a_column_per_round_and_names_the_final_level():
    rates = [{f"d{i:02d}": (i + k) / 100 for i in range(60)} for k in range(3)]
    stacked = domain_rounds(*[table(k, r, {d: 1 + k for d in r}) for k, r in enumerate(rates)])
    figure = domain_heatmap(stacked)
    ax = figure.axes[0]
    grid = ax.images[0].get_array()
    assert grid.shape == (60, 3)
    assert grid[5, 2] == pytest.approx(0.07)  # domain d05 in round 2
    assert [t.get_text() for t in ax.get_yticklabels()][:2] == ["d00 (L3)", "d01 (L3)"]


def test_gains_are_sorted_largest_first_with_the_final_level_and_summarised():
    sft = {"pass@1/domain_a": 0.5, "pass@1/domain_b": 0.2, "pass@1/domain_c": 0.3}
    rl = {"pass@1/domain_a": 0.4, "pass@1/domain_b": 0.6, "pass@1/domain_c": 0.3, "num_tasks/domain_a": 4,
          "pass@8/domain_a": 0.9}
    rows = domain_gains(sft, rl, {"b.level": 2.0})
    assert [r["domain"] for r in rows] == ["b", "c", "a"]
    assert rows[0]["gain"] == pytest.approx(0.4) and rows[0]["final_level"] == 2.0 and rows[2]["num_tasks"] == 4
    summary = gain_summary(rows)
    assert summary["largest_drop"] == pytest.approx(0.1) and summary["domains_gained"] == 1
    assert summary["gain_mean"] == pytest.approx(0.1)
    assert gain_summary([]) == {}


def test_per_domain_curves_are_dropped_only_beyond_the_limit():
    stats = {"pass_rate": 0.5, "a.level": 1.0, "b.level": 2.0, "a_b": 1.0}
    assert without_domain_curves(stats, {"a", "b"}, max_domains=2) == stats
    assert without_domain_curves(stats, {"a", "b"}, max_domains=1) == {"pass_rate": 0.5, "a_b": 1.0}


def test_a_long_runs_heatmap_keeps_its_size_with_each_column_the_mean_of_consecutive_rounds():
    # A column per round made a 5,000-round run's picture 175,000 pixels wide (2.5 GB to draw, after the loop).
    from rlvr_factory.domain_report import MAX_COLUMNS

    rounds = 1000
    stacked = domain_rounds(*[table(k, {"a": (k % 2) * 1.0, "b": 0.25}, {"a": 1, "b": 2}) for k in range(rounds)])
    figure = domain_heatmap(stacked)
    ax = figure.axes[0]
    grid = ax.images[0].get_array()
    assert grid.shape == (2, MAX_COLUMNS)
    assert grid[0, 0] == pytest.approx(0.5) and grid[1, -1] == pytest.approx(0.25)  # rounds 0-9: half of them 1
    assert figure.get_size_inches()[0] <= 0.35 * MAX_COLUMNS + 3
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels[:2] == ["0", "40"] and len(labels) <= 26  # each label names the first round of its column
    assert "mean of 10 rounds" in ax.get_xlabel()
    small = domain_heatmap(domain_rounds(*[table(k, {"a": 0.5}, {"a": 1}) for k in range(3)])).axes[0]
    assert [t.get_text() for t in small.get_xticklabels()] == ["0", "1", "2"] and small.get_xlabel() == "RL round"
