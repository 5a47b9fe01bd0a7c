"""Online pass-rate tracking, the curriculum's prompt order, and the per-domain levels."""

import math
import random

import pytest

from rlvr_factory.rl.curriculum import (
    DomainLevel, domain_prompt_order, domain_weights, in_band, interleave, prompt_order, update_domain_levels,
    update_pass_rates,
)


def test_a_first_observation_is_taken_as_is_and_later_ones_are_averaged():
    rates = update_pass_rates({}, {"a": 0.5}, ema=0.25)
    assert rates == {"a": 0.5}
    rates = update_pass_rates(rates, {"a": 1.0, "b": 0.0}, ema=0.25)
    assert rates == pytest.approx({"a": 0.75 * 0.5 + 0.25 * 1.0, "b": 0.0})


def test_unobserved_tasks_keep_their_estimate_and_the_input_is_not_changed():
    before = {"a": 0.3}
    after = update_pass_rates(before, {"b": 1.0}, ema=1.0)
    assert after == {"a": 0.3, "b": 1.0} and before == {"a": 0.3}


def test_an_ema_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="pass_rate_ema"):
        update_pass_rates({}, {}, ema=0.0)


def test_interleave_keeps_every_prefix_in_proportion():
    order = interleave([[0, 1, 2, 3, 4, 5], [10, 11, 12]], [2.0, 1.0])
    assert order == [0, 10, 1, 2, 11, 3, 4, 12, 5]


def test_interleave_lets_the_other_pools_fill_an_exhausted_one_and_puts_zero_weight_last():
    assert interleave([[0], [10, 11, 12]], [0.9, 0.1]) == [0, 10, 11, 12]
    assert interleave([[0, 1], [10, 11]], [1.0, 0.0]) == [0, 1, 10, 11]


def test_unseen_tasks_count_as_in_band():
    assert in_band(None, (0.2, 0.8)) and in_band(math.nan, (0.2, 0.8))
    assert in_band(0.2, (0.2, 0.8)) and not in_band(0.9, (0.2, 0.8)) and not in_band(0.0, (0.2, 0.8))


def test_prompts_in_the_band_come_first_in_the_configured_share():
    rates = [0.0, 0.5, 1.0, 0.4, 0.0, 0.6, 1.0, 0.5]  # in band [0.1, 0.9]: 1, 3, 5, 7
    order = prompt_order(rates, [1] * 8, random.Random(0), band=(0.1, 0.9), band_fraction=1.0)
    assert sorted(order[:4]) == [1, 3, 5, 7] and sorted(order) == list(range(8))
    order = prompt_order(rates, [1] * 8, random.Random(0), band=(0.1, 0.9), band_fraction=0.5)
    assert [i in (1, 3, 5, 7) for i in order] == [True, False] * 4


def test_difficulty_weights_set_the_share_of_each_level():
    difficulties = [1] * 6 + [2] * 6 + [3] * 6
    order = prompt_order([None] * 18, difficulties, random.Random(0), difficulty_weights={1: 1, 2: 2, 3: 0})
    head = [difficulties[i] for i in order[:9]]
    assert head.count(1) == 3 and head.count(2) == 6
    assert [difficulties[i] for i in order[12:]] == [3] * 6  # weight 0 comes last


def test_without_weights_levels_are_drawn_in_proportion_to_their_size():
    difficulties = [1] * 2 + [2] * 6
    order = prompt_order([None] * 8, difficulties, random.Random(0))
    assert [difficulties[i] for i in order[:4]].count(1) == 1


def test_the_order_is_fixed_by_the_seed():
    rates, levels = [0.5, None, 0.0, 1.0, 0.3] * 4, [1, 2] * 10
    first = prompt_order(rates, levels, random.Random(7), band=(0.1, 0.9), band_fraction=0.75)
    assert first == prompt_order(rates, levels, random.Random(7), band=(0.1, 0.9), band_fraction=0.75)
    assert first != prompt_order(rates, levels, random.Random(8), band=(0.1, 0.9), band_fraction=0.75)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"band": (0.8, 0.2)}, "band"), ({"band_fraction": 1.5}, "band_fraction"), ({"difficulty_weights": {1: 0}}, "difficulty_weights")],
)
def test_bad_curriculum_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        prompt_order([None, None], [1, 1], random.Random(0), **kwargs)


# Per-domain levels

BAND = (0.2, 0.8)
LEVELS = {"easy": [1, 2, 3], "hard": [1, 2, 3]}


def rounds(observations: list[dict[str, float]], patience: int = 2, ema: float = 1.0) -> list[dict[str, DomainLevel]]:
    state, history = {}, []
    for observed in observations:
        state = update_domain_levels(state, observed, LEVELS, BAND, ema, patience)
        history.append(state)
    return history


def test_every_domain_starts_at_its_lowest_level_unmeasured():
    state = update_domain_levels({}, {}, {"a": [3, 1, 2]}, BAND, ema=0.5, patience=2)
    assert state == {"a": DomainLevel(level=1, pass_rate=None, streak=0)}


def test_a_domain_above_the_band_for_patience_rounds_moves_up_and_starts_unmeasured():
    history = rounds([{"easy": 0.9}, {"easy": 0.95}, {"easy": 0.85}])
    assert [s["easy"].level for s in history] == [1, 2, 2]
    assert history[0]["easy"] == DomainLevel(1, 0.9, 1)
    assert history[1]["easy"] == DomainLevel(2, None, 0)  # raised: the new level is unmeasured
    assert history[2]["easy"] == DomainLevel(2, 0.85, 1)


def test_a_domain_below_the_band_moves_down_but_never_below_its_lowest_level():
    history = rounds([{"hard": 0.9}, {"hard": 0.9}, {"hard": 0.0}, {"hard": 0.1}, {"hard": 0.0}, {"hard": 0.0}])
    assert [s["hard"].level for s in history] == [1, 2, 2, 1, 1, 1]
    assert history[-1]["hard"].streak == -2  # it stays at level 1, still counted below the band


def test_a_round_inside_the_band_resets_the_streak_and_an_unobserved_domain_keeps_its_state():
    history = rounds([{"easy": 0.9, "hard": 0.5}, {"easy": 0.5}, {"easy": 0.9}])
    assert [s["easy"].streak for s in history] == [1, 0, 1] and history[-1]["easy"].level == 1
    assert history[1]["hard"] == history[0]["hard"] == DomainLevel(1, 0.5, 0)


def test_the_level_pass_rate_is_an_ema_and_the_top_level_is_kept():
    state = {"easy": DomainLevel(3, 0.9, 5)}
    after = update_domain_levels(state, {"easy": 0.5}, LEVELS, BAND, ema=0.5, patience=2)
    assert after["easy"] == DomainLevel(3, 0.7, 0)
    top = update_domain_levels(state, {"easy": 1.0}, LEVELS, BAND, ema=0.5, patience=2)
    assert top["easy"].level == 3 and top["easy"].streak == 6


def test_bad_patience_or_band_is_refused():
    with pytest.raises(ValueError, match="patience"):
        update_domain_levels({}, {}, LEVELS, BAND, ema=0.5, patience=0)
    with pytest.raises(ValueError, match="band"):
        update_domain_levels({}, {}, LEVELS, (0.9, 0.1), ema=0.5, patience=1)


def test_domains_with_learning_signal_weigh_more_and_unmeasured_ones_count_as_in_band():
    state = {"in": DomainLevel(1, 0.5), "solved": DomainLevel(3, 1.0), "stuck": DomainLevel(1, 0.0), "new": DomainLevel(2)}
    assert domain_weights(state, BAND, 0.25) == {"in": 1.0, "solved": 0.25, "stuck": 0.25, "new": 1.0}
    with pytest.raises(ValueError, match="out_of_band_weight"):
        domain_weights(state, BAND, 1.5)


def test_each_domain_draws_from_its_current_level_in_proportion_to_its_weight():
    domains = ["a"] * 6 + ["b"] * 6
    difficulties = [1, 1, 1, 2, 2, 2] * 2
    state = {"a": DomainLevel(2), "b": DomainLevel(1)}
    order = domain_prompt_order(domains, difficulties, [None] * 12, state, {"a": 1.0, "b": 0.5}, random.Random(0))
    assert sorted(order) == list(range(12))
    head = order[:6]  # the current-level tasks: a at level 2 (3, 4, 5), b at level 1 (6, 7, 8)
    assert sorted(head) == [3, 4, 5, 6, 7, 8]
    assert [i < 6 for i in head[:3]] == [True, False, True]  # weight 1 : 0.5
    assert order == domain_prompt_order(domains, difficulties, [None] * 12, state, {"a": 1.0, "b": 0.5}, random.Random(0))
