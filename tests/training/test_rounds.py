"""From the scored table to update samples and round metrics."""

import pandas as pd
import pytest

from rlvr_factory.training.rounds import observed_pass_rates, round_metrics, samples_from_scored


def scored_table() -> pd.DataFrame:
    rows = [
        # task, domain, reward, correct, status, finish, completion tokens
        ("a", "math", 1.0, True, "ok", "stop", 4),
        ("a", "math", 0.0, False, "ok", "length", 8),
        ("a", "math", 0.0, False, "infra_error", "stop", 100),
        ("b", "math", 1.0, True, "ok", "stop", 2),
        ("b", "math", 1.0, True, "ok", "stop", 2),
        ("c", "code", 0.5, False, "timeout", "stop", 6),
        ("c", "code", 0.0, False, "ok", "stop", 10),
    ]
    frame = pd.DataFrame(rows, columns=["task_id", "domain", "reward", "correct", "status", "finish_reason",
                                        "completion_tokens"])
    breakdown = {"outcome": 1.0, "format": 1.0, "weight.outcome": 1.0, "weight.format": 0.5}
    return frame.assign(prompt_ids=[[1, 2]] * len(rows), completion_ids=[[3]] * len(rows),
                        reward_breakdown=[breakdown] + [{}] * (len(rows) - 1))


def test_infra_errors_are_left_out_of_the_samples():
    samples = samples_from_scored(scored_table())
    assert len(samples) == 6
    assert [s.group for s in samples] == ["a", "a", "b", "b", "c", "c"]
    assert [s.truncated for s in samples] == [False, True, False, False, False, False]
    assert {s.domain for s in samples} == {"math", "code"}


def test_samples_carry_the_reward_components_their_verifier_declared():
    samples = samples_from_scored(scored_table())
    assert samples[0].components == {"format": (1.0, 0.5), "outcome": (1.0, 1.0)}
    assert samples[1].components == {}


def test_round_metrics_cover_the_usable_rows_and_count_the_failures():
    metrics = round_metrics(scored_table())
    assert metrics["reward_mean"] == pytest.approx(3.5 / 6)
    assert metrics["pass_rate"] == pytest.approx(3 / 6)
    assert metrics["completion_tokens_mean"] == pytest.approx(32 / 6)
    assert metrics["truncated_fraction"] == pytest.approx(1 / 6)
    assert metrics["infra_errors"] == 1 and metrics["timeouts"] == 1
    assert metrics["zero_variance_groups"] == 1  # "b": both rewards 1


def test_round_metrics_are_reported_per_domain():
    metrics = round_metrics(scored_table())
    assert metrics["math.reward_mean"] == pytest.approx(0.75) and metrics["math.pass_rate"] == pytest.approx(0.75)
    assert metrics["code.reward_mean"] == pytest.approx(0.25) and metrics["code.completion_tokens_mean"] == 8.0


def test_observed_pass_rates_ignore_infra_errors():
    assert observed_pass_rates(scored_table()) == {"a": 0.5, "b": 1.0, "c": 0.0}
