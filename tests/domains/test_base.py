"""The shared generator of split tasks: levels in turn, one seeded generator, no prompt twice."""

from __future__ import annotations

import pytest

from rlvr_factory.domains.base import draw_split_tasks


def draw_digit(rng, level):
    n = rng.randint(0, 9)
    return f"level {level}: {n}", {"n": n}


def test_levels_take_turns_and_prompts_never_repeat():
    tasks = draw_split_tasks("toy", {"train": 6, "test": 4}, [1, 2], seed=0, draw=draw_digit)
    assert [t.difficulty for t in tasks] == [1, 2, 1, 2, 1, 2, 1, 2, 1, 2]
    assert [t.task_id for t in tasks[-2:]] == ["toy-test-00002", "toy-test-00003"]
    assert len({t.prompt for t in tasks}) == 10 and {t.source for t in tasks} == {"generated:seed=0"}
    assert draw_split_tasks("toy", {"train": 6, "test": 4}, [1, 2], seed=0, draw=draw_digit) == tasks


def test_a_level_that_runs_out_of_prompts_is_refused():
    with pytest.raises(ValueError, match="level 1 ran out of distinct tasks after 1000 draws"):
        draw_split_tasks("toy", {"train": 11}, [1], seed=0, draw=draw_digit)
