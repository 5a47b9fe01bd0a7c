"""Asynchronous rounds validate a round in two places: its update validates the first tasks right after it
trains, and the background worker the rest (`rl.validation_ahead_share`), behind the next rollout ahead;
`finish_round` adds the two into the accuracy over every task."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from rlvr_factory.domains import Task
from rlvr_factory.domains.base import tasks_to_frame
from rlvr_factory.pipelines.rl.nodes import (
    SECONDS_HERE, SOLVED_HERE, _solved, _validation_split, finish_round, validate_ahead,
)
from rlvr_factory.parameters import RLConfig
from rlvr_factory.rollout.background import forget_rollouts_ahead
from tests.conftest import make_scripted_policy
from tests.pipelines.conftest import typed_parameters

PARAMS = typed_parameters()
EVALUATE = replace(PARAMS.evaluate, validation_size=8,
                   sampling=replace(PARAMS.evaluate.sampling, max_new_tokens=12, batch_size=4))
# "\boxed{3}" is right for v0, v5 and v7: one of them among the first two tasks, two among the last six
ANSWERS = ["3", "4", "4", "4", "4", "3", "4", "3"]
TASKS = tasks_to_frame([Task(f"v{i}", "arithmetic", f"Compute {a}+0", {"answer": a, "steps": []}, 1, "validation", "t")
                        for i, a in enumerate(ANSWERS)] + [
    Task("v8", "arithmetic", "Compute 3+0", {"answer": "3", "steps": []}, 1, "validation", "t")])  # past validation_size
LEVELS = pd.DataFrame({"domain": ["arithmetic"], "level": [1]})


@pytest.fixture(autouse=True)
def _no_rollout_left_pending():
    """A validation ahead counts as pending until its round finishes; a refused one is forgotten here, so later
    tests train on every core."""
    yield
    forget_rollouts_ahead()


def _rl(share: float) -> RLConfig:
    return replace(PARAMS.rl, validation_ahead_share=share)


@pytest.mark.parametrize("share,here", [(0.75, 2), (0.0, 8), (1.0, 0), (0.7, 2)])
def test_the_update_takes_the_first_tasks_and_the_worker_the_last_share_of_them(share, here):
    mine, ahead = _validation_split(TASKS, EVALUATE, _rl(share))
    assert [t.task_id for t in mine + ahead] == [f"v{i}" for i in range(8)]  # each task once, in order
    assert len(mine) == here
    # a synchronous round (no rl) validates all of them in its update
    assert [t.task_id for t in _validation_split(TASKS, EVALUATE, None)[0]] == [f"v{i}" for i in range(8)]


def test_an_empty_validation_split_is_refused():
    with pytest.raises(ValueError, match="validation split is empty"):
        _validation_split(TASKS.iloc[:0], EVALUATE, _rl(0.75))


@pytest.mark.parametrize("share", [0.75, 0.0, 1.0])
def test_the_accuracy_is_over_every_task_whichever_side_validated_it(share):
    policy = make_scripted_policy("\\boxed{3}")
    episodes = PARAMS.rollout
    rl = _rl(share)
    mine, _ = _validation_split(TASKS, EVALUATE, rl)
    stats = {"round": 4, "policy_version": policy.version, "update_seconds": 1.0, "update_threads": 1,
             SOLVED_HERE: _solved(policy, mine, PARAMS.domain, PARAMS.verify, EVALUATE, episodes),
             SECONDS_HERE: 0.5}
    ahead = validate_ahead(policy, TASKS, PARAMS.domain, PARAMS.verify, EVALUATE, PARAMS.rollout, rl,
                           round_index=4)
    assert ahead.tasks == 8
    written, history = finish_round(stats, ahead, LEVELS, rl)
    assert written["val_greedy_accuracy"] == 3 / 8  # what validating all eight in the update gives
    assert _solved(policy, _validation_split(TASKS, EVALUATE, None)[0], PARAMS.domain, PARAMS.verify, EVALUATE,
                   episodes) == 3
    assert history["eval_seconds"]["value"] >= 0.5  # the update's part and the worker's
    assert not {SOLVED_HERE, SECONDS_HERE, "policy_version"} & set(written)  # neither part's count, nor the version
    assert SOLVED_HERE in stats  # the update's stats, as its dataset holds them, are left as they were


def test_a_validation_of_other_weights_than_the_round_wrote_is_refused():
    policy = make_scripted_policy("\\boxed{3}")
    ahead = validate_ahead(policy, TASKS, PARAMS.domain, PARAMS.verify, EVALUATE, PARAMS.rollout, _rl(0.75),
                           round_index=2)
    stats = {"round": 2, "policy_version": policy.version + 1, SOLVED_HERE: 0, SECONDS_HERE: 0.0}
    with pytest.raises(ValueError, match="policy version"):
        finish_round(stats, ahead, LEVELS, _rl(0.75))
    ahead.future.result()
