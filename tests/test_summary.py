"""`rlvr_factory.summary`: the line per RL round with the run's ETA, the final results table, and the
small metrics file `dvc exp show` tabulates."""

from __future__ import annotations

import pytest

from rlvr_factory.summary import RoundClock, duration, results_table, round_line, summary_metrics

STATS = {"round": 2, "reward_mean": 0.4125, "pass_rate": 0.398, "val_greedy_accuracy": 0.31, "kl": 0.0123,
         "policy_drift_kl": 0.0021, "entropy": 0.301}
HISTORY = [{"round": 0, "val_greedy_accuracy": 0.25}, {"round": 1, "val_greedy_accuracy": 0.375},
           {"round": 2, "val_greedy_accuracy": 0.3}]


def _eval(greedy: float, domains: dict[str, float] | None = None, with_majority: bool = True) -> dict:
    report = {"greedy_accuracy": greedy, "pass@1": greedy / 2, "pass@8": 0.5, "num_tasks": 400.0}
    if with_majority:
        report["maj@8"] = 0.25
    for name, value in (domains or {}).items():
        report |= {f"greedy_accuracy/domain_{name}": value, f"pass@1/domain_{name}": value,
                   f"pass@8/domain_{name}": value, f"num_tasks/domain_{name}": 200.0}
    return report


def _report(domains: dict[str, float] | None = None, with_majority: bool = True) -> dict:
    return {"sft": _eval(0.1, domains and {d: 0.05 for d in domains}, with_majority),
            "rl": _eval(0.338, domains, with_majority), "rounds": 3, "round_history": HISTORY}


@pytest.mark.parametrize("seconds, text", [(8.24, "8.2 s"), (45.4, "45 s"), (185, "3m05s"), (3725, "1h02m")])
def test_durations_read_like_a_person_writes_them(seconds, text):
    assert duration(seconds) == text


def test_the_eta_is_the_remaining_rounds_at_the_mean_pace_plus_the_pending_work():
    clock = RoundClock(rounds=5, pending_seconds=30.0)
    clock.finish(10.0)
    clock.finish(20.0)
    assert clock.eta() == pytest.approx(3 * 15.0 + 30.0)
    for _ in range(3):
        clock.finish(15.0)
    assert clock.eta() == pytest.approx(30.0)  # all rounds done: only the evaluation is left


def test_an_eta_before_any_round_finished_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        RoundClock(rounds=3).eta()


def test_a_round_line_counts_rounds_from_one_and_says_each_statistic():
    line = round_line(STATS, rounds=20, seconds=12.4, eta=225, with_reference=False)
    assert line.startswith("round  3/20: ")
    for part in ("reward 0.412", "pass rate 0.398", "val acc 0.310", "KL(step) 0.0021", "entropy 0.301",
                 "12 s", "ETA 3m45s"):
        assert part in line
    assert "\n" not in line


def test_with_a_reference_policy_the_round_line_shows_the_kl_to_it():
    assert "KL(ref) 0.0123" in round_line(STATS, rounds=3, seconds=1.0, eta=2.0, with_reference=True)


def test_the_results_table_sets_sft_against_rl_on_every_metric():
    lines = results_table(_report()).splitlines()
    assert lines[0].split() == ["test", "split", "tasks", "greedy", "pass@1", "pass@8", "maj@8"]
    assert lines[1].split() == ["SFT", "400", "10.0%", "5.0%", "50.0%", "25.0%"]
    assert lines[2].split() == ["RL", "(3", "rounds)", "400", "33.8%", "16.9%", "50.0%", "25.0%"]
    assert lines[3] == "validation greedy accuracy: 25.0% after 1 round, 30.0% after 3 (best: 37.5% after 2)"
    assert len({len(line) for line in lines[:3]}) == 1  # columns aligned


def test_with_several_domains_the_table_adds_a_row_per_domain_and_stage():
    lines = results_table(_report({"arithmetic": 0.5, "code": 0.125})).splitlines()
    assert [line.split()[0] for line in lines[1:7]] == ["SFT", "RL", "arithmetic:", "arithmetic:", "code:", "code:"]
    assert lines[6].split()[1:4] == ["RL", "200", "12.5%"]
    assert lines[6].split()[-1] == "-"  # no maj@k reported for this domain


def test_a_single_domain_run_has_no_per_domain_rows():
    assert len(results_table(_report({"arithmetic": 0.5})).splitlines()) == 4


def test_a_report_without_pass_at_k_is_refused_with_a_hint():
    with pytest.raises(ValueError, match="written by `evaluate`"):
        results_table({"sft": {"greedy_accuracy": 0.1}, "rl": {"greedy_accuracy": 0.2}, "rounds": 1, "round_history": HISTORY})


def _repair_report() -> dict:
    report = _report()
    for stage, first, within in (("sft", 0.125, 0.25), ("rl", 0.375, 0.5)):
        report[stage] |= {"repair@1turn": first, "repair@2turns": within, "repair@1turn/kind_off_by_one": 0.0}
    return report


def test_a_code_repair_run_states_both_policies_repair_rates_with_the_first_edit_and_within_max_turns():
    lines = results_table(_repair_report()).splitlines()
    assert lines[3] == "repair rate, first edit -> within 2 turns (test split): SFT 12.5% -> 25.0%, RL 37.5% -> 50.0%"
    assert lines[4].startswith("validation greedy accuracy")
    assert summary_metrics(_repair_report(), 0.2)["repair"] == {"1turn": {"sft": 0.125, "rl": 0.375},
                                                                "2turns": {"sft": 0.25, "rl": 0.5}}
    assert "repair" not in summary_metrics(_report(), 0.2)


def test_the_summary_metrics_hold_the_headline_numbers_only():
    assert summary_metrics(_report(), sft_val_greedy_accuracy=0.2) == {
        "greedy": {"sft": 0.1, "rl": 0.338},
        "pass@8": {"sft": 0.5, "rl": 0.5},
        "val": {"sft": 0.2, "best": 0.375, "last": 0.3},
    }


def test_the_summary_metrics_break_rl_accuracy_down_by_domain_only_for_several_domains():
    assert "rl_greedy_by_domain" not in summary_metrics(_report({"arithmetic": 0.5}), 0.2)
    mixed = summary_metrics(_report({"arithmetic": 0.5, "code": 0.125}), 0.2)
    assert mixed["rl_greedy_by_domain"] == {"arithmetic": 0.5, "code": 0.125}
