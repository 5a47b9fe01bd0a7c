"""Online pass-rate tracking and the curriculum's prompt order."""

import math
import random

import pytest

from rlvr_factory.rl.curriculum import in_band, interleave, prompt_order, update_pass_rates


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
