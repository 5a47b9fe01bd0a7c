"""Drawing a round's groups, with and without DAPO's dynamic sampling."""

from dataclasses import replace

import pytest

from rlvr_factory.domains import ArithmeticDomain, Task
from rlvr_factory.rollout.agent_loop import RolloutConfig, sample_episodes
from rlvr_factory.rollout.dynamic import DynamicSampling, draw_groups
from rlvr_factory.rollout.engine import SamplingConfig

TASKS = [Task(f"t{i}", "arithmetic", f"Compute {i}+1", {"answer": str(i + 1)}, 1, "train", "test") for i in range(30)]
DOMAIN = ArithmeticDomain(levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={})
SAMPLING = SamplingConfig(max_new_tokens=3, seed=5)


def every_third_prompt_has_signal(indices, episodes):
    """Prompts 0, 3, 6, ... get rewards 1, 0, 1, 0 ...; every other prompt gets 1 for every sample."""
    return [float(e.sample_index % 2 == 0) if indices[e.task_index] % 3 == 0 else 1.0 for e in episodes]


def draw(policy, dynamic, score=every_third_prompt_has_signal, count=4):
    def run(indices, seed):
        return sample_episodes(policy, DOMAIN, [TASKS[i] for i in indices], 4, RolloutConfig(), replace(SAMPLING, seed=seed))

    return draw_groups(run, list(range(30)), count, SAMPLING.seed, score, dynamic)


def test_without_dynamic_sampling_the_first_prompts_are_drawn_once(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=False))
    assert drawn.prompt_indices == [0, 1, 2, 3]
    assert len(drawn.episodes) == 16
    assert drawn.stats["dynamic_sampling_draws"] == 1 and drawn.stats["dynamic_sampling_groups_dropped"] == 0


def test_zero_variance_groups_are_dropped_and_more_prompts_drawn_until_the_round_is_full(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, max_extra_draws=3, min_draw=2))
    # draw 1: prompts 0-3 keep 0, 3; keep rate 1/2 -> draw 2: 4-7 keeps 6; rate 3/8 -> draw 3: 8-10 keeps 9
    assert drawn.prompt_indices == [0, 3, 6, 9]
    assert drawn.stats["dynamic_sampling_draws"] == 3
    assert drawn.stats["dynamic_sampling_prompts_drawn"] == 11
    assert drawn.stats["dynamic_sampling_groups_dropped"] == 7
    # episodes point at positions in prompt_indices, a whole group each
    assert [e.task_index for e in drawn.episodes] == [p for p in range(4) for _ in range(4)]
    assert all(e.prompt_ids == drawn.episodes[4 * (i // 4)].prompt_ids for i, e in enumerate(drawn.episodes))


def test_the_number_of_extra_draws_is_bounded(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, max_extra_draws=1, min_draw=2))
    assert drawn.prompt_indices == [0, 3, 6]  # fewer groups than asked, all with a signal
    assert drawn.stats["dynamic_sampling_draws"] == 2


def test_a_round_without_any_signal_keeps_its_first_draw(tiny_policy):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, max_extra_draws=2), score=lambda i, es: [0.0] * len(es))
    assert drawn.prompt_indices == [0, 1, 2, 3]
    assert drawn.stats["dynamic_sampling_groups_dropped"] == 12  # three draws of at most 4 prompts, none kept
    assert drawn.stats["dynamic_sampling_prompts_drawn"] == 12


def test_dynamic_sampling_is_deterministic_from_the_seed(tiny_policy):
    dynamic = DynamicSampling(enabled=True, max_extra_draws=3, min_draw=2)
    first, second = draw(tiny_policy, dynamic), draw(tiny_policy, dynamic)
    assert [e.completion_ids for e in first.episodes] == [e.completion_ids for e in second.episodes]


@pytest.mark.parametrize("count", [1, 2])
def test_extra_groups_beyond_the_round_size_are_not_kept(tiny_policy, count):
    drawn = draw(tiny_policy, DynamicSampling(enabled=True, min_draw=2), count=count)
    assert drawn.prompt_indices == [0, 3][:count]
