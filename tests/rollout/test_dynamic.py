"""Drawing a round's groups, with and without DAPO's dynamic sampling."""

import pytest

from rlvr_factory.rollout.dynamic import DynamicSampling, draw_groups
from rlvr_factory.rollout.hf import SamplingConfig

PROMPTS = [f"Compute {i}+1" for i in range(30)]
SAMPLING = SamplingConfig(max_new_tokens=3, seed=5)


def every_third_prompt_has_signal(indices, completions):
    """Prompts 0, 3, 6, ... get rewards 1, 0, 1, 0 ...; every other prompt gets 1 for every sample."""
    return [float(c.sample_index % 2 == 0) if indices[c.prompt_index] % 3 == 0 else 1.0 for c in completions]


def draw(policy, dynamic, score=every_third_prompt_has_signal, count=4):
    return draw_groups(policy, PROMPTS, list(range(30)), count, 4, SAMPLING, score, dynamic)


def test_without_dynamic_sampling_the_first_prompts_are_drawn_once(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=False))
    assert drawn.prompt_indices == [0, 1, 2, 3]
    assert len(drawn.completions) == 16
    assert drawn.stats["dynamic_sampling_draws"] == 1 and drawn.stats["dynamic_sampling_groups_dropped"] == 0


def test_zero_variance_groups_are_dropped_and_more_prompts_drawn_until_the_round_is_full(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, max_extra_draws=3, min_draw=2))
    # draw 1: prompts 0-3 keep 0, 3; keep rate 1/2 -> draw 2: 4-7 keeps 6; rate 3/8 -> draw 3: 8-10 keeps 9
    assert drawn.prompt_indices == [0, 3, 6, 9]
    assert drawn.stats["dynamic_sampling_draws"] == 3
    assert drawn.stats["dynamic_sampling_prompts_drawn"] == 11
    assert drawn.stats["dynamic_sampling_groups_dropped"] == 7
    # completions point at positions in prompt_indices, a whole group each
    assert [c.prompt_index for c in drawn.completions] == [p for p in range(4) for _ in range(4)]
    assert all(c.prompt_ids == drawn.completions[4 * (i // 4)].prompt_ids for i, c in enumerate(drawn.completions))


def test_the_number_of_extra_draws_is_bounded(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, max_extra_draws=1, min_draw=2))
    assert drawn.prompt_indices == [0, 3, 6]  # fewer groups than asked, all with a signal
    assert drawn.stats["dynamic_sampling_draws"] == 2


def test_a_round_without_any_signal_keeps_its_first_draw(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, max_extra_draws=2), score=lambda i, cs: [0.0] * len(cs))
    assert drawn.prompt_indices == [0, 1, 2, 3]
    assert drawn.stats["dynamic_sampling_groups_dropped"] == 12  # three draws of at most 4 prompts, none kept
    assert drawn.stats["dynamic_sampling_prompts_drawn"] == 12


def test_dynamic_sampling_is_deterministic_from_the_seed(tiny_policy):
    dynamic = DynamicSampling(enabled=True, max_extra_draws=3, min_draw=2)
    first, second = draw(tiny_policy, dynamic), draw(tiny_policy, dynamic)
    assert [c.completion_ids for c in first.completions] == [c.completion_ids for c in second.completions]


@pytest.mark.parametrize("count", [1, 2])
def test_extra_groups_beyond_the_round_size_are_not_kept(tiny_policy, count):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, min_draw=2), count=count)
    assert drawn.prompt_indices == [0, 3][:count]
