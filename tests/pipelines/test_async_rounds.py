"""Asynchronous rounds (`rl.max_staleness: 1`): round k+1's rollout samples from a frozen copy of round k's
starting policy while round k's update trains; the staleness never exceeds the bound, in a whole run
and in a resumed one."""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from kedro.framework.hooks import hook_impl
from kedro.pipeline import Pipeline

from rlvr_factory.pipelines.rl.pipeline import RLShape, behaviour_rounds, deferred_validations, round_block, round_plans
from rlvr_factory.schema import ConfigError
from tests.pipelines.conftest import TINY_PARAMS, round_table, run_pipeline
from tests.pipelines.test_resume import before_rl  # noqa: F401  (the fixture: curate, base model and SFT run once)
from tests.pipelines.test_rl_options import merged
from tests.pipelines.test_rlvr_pipeline import _kedro_cli, _kill_once_written, _log_tail

ASYNC = {"rl": {"max_staleness": 1}, "rollout": {"background": True}}
HISTORY = "data/08_reporting/round_history.json"


def unrolled(rounds: int, checkpoint_every: int, max_staleness: int) -> Pipeline:
    """Every round's nodes as the round loop runs them (`round_block`), joined to check their wiring."""
    shape = RLShape(rounds, checkpoint_every, False, max_staleness)
    return Pipeline([round_block(k, shape, shape.plans()) for k in range(rounds)])


def test_each_round_samples_from_the_policy_one_round_back_but_never_from_before_a_checkpoint():
    assert behaviour_rounds(5, 0, 0) == [0, 1, 2, 3, 4]
    assert behaviour_rounds(5, 0, 1) == [0, 0, 1, 2, 3]
    assert behaviour_rounds(6, 2, 1) == [0, 0, 2, 2, 4, 4]  # the round after a checkpoint starts from it
    with pytest.raises(ValueError, match="one rollout ahead"):
        round_plans(4, 0, 2)


def test_the_next_rollout_depends_on_no_update_after_the_policy_it_samples_from():
    rounds = unrolled(4, 0, 1)
    for k in (1, 2, 3):
        upstream = {n.name for n in rounds.to_nodes(f"round_{k:03d}.rollout").nodes}
        assert f"round_{k - 1:03d}.update" not in upstream  # free to run while that update trains
        assert f"round_{k - 1:03d}.prefetch_next_rollout" in upstream
        assert k < 2 or f"round_{k - 2:03d}.update" in upstream  # but no further ahead than one round
        # the frozen copy is taken before the update changes the policy in place
        assert f"round_{k - 1:03d}.prefetch_next_rollout" in {n.name for n in rounds.to_nodes(f"round_{k - 1:03d}.update").nodes}
    synchronous = unrolled(4, 0, 0)
    assert f"round_000.update" in {n.name for n in synchronous.to_nodes("round_001.rollout").nodes}


def test_a_rounds_validation_runs_ahead_but_never_across_a_checkpoint_nor_in_the_last_round():
    assert deferred_validations(3, 0, 0) == [False] * 3  # synchronous rounds validate in their update
    assert deferred_validations(3, 0, 1) == [True, True, False]
    # round 2 writes a checkpoint, so rounds 1 and 2 have their stats on disk before it
    assert deferred_validations(5, 3, 1) == [True, False, False, True, False]
    assert deferred_validations(4, 2, 1) == [False] * 4


def _upstream(rounds, node):
    return {n.name for n in rounds.to_nodes(node).nodes}


def test_a_validation_ahead_reads_the_policy_its_round_wrote_before_the_next_update_trains_it():
    rounds = unrolled(5, 3, 1)
    validation = rounds.only_nodes("round_001.prefetch_next_rollout")  # round 0's, behind round 2's rollout
    assert set(validation.all_outputs()) == {"round_002.prefetched", "round_000.validation"}
    assert validation.nodes[0].inputs[0] == "round_000.next_policy"  # the weights round 0's update wrote
    assert "round_001.prefetch_next_rollout" in _upstream(rounds, "round_001.update")  # copied before it trains
    # round 0's stats come after round 1's update and round 2's verification, and before round 2's checkpoint
    assert {"round_001.update", "round_002.verify"} <= _upstream(rounds, "round_000.finish_round")
    assert "round_000.finish_round" in _upstream(rounds, "round_002.update")
    # the last round validates the one before it in a node of its own, before its own update
    assert "round_004.validate_previous_ahead" in _upstream(rounds, "round_004.update")
    assert set(rounds.only_nodes("round_003.finish_round").all_outputs()) == {"round_003.stats", "round_003.mlflow_metrics"}


def test_asynchronous_rounds_need_an_engine_in_a_process_of_its_own_and_a_staleness_of_one():
    with pytest.raises(ConfigError, match="rollout.background=true"):
        RLShape.from_parameters({"rl": {"max_staleness": 1}})
    with pytest.raises(ConfigError, match="0 or 1"):
        RLShape.from_parameters({"rl": {"max_staleness": 2}, "rollout": {"background": True}})
    assert RLShape.from_parameters({"rl": {"max_staleness": 1}, "rollout": {"background": True}}).max_staleness == 1


def _params(rounds: int, checkpoint_every: int) -> dict:
    params = merged(copy.deepcopy(TINY_PARAMS), ASYNC)
    params["rl"].update(rounds=rounds, checkpoint_every=checkpoint_every)
    return params


def _versions(project) -> list[int]:
    """The policy version each round's rollouts were sampled from."""
    return [int(round_table(project / f"data/07_model_output/scored/round_{k:03d}.parquet")["policy_version"].iloc[0])
            for k in range(len(json.loads((project / HISTORY).read_text())))]


class NodeOrder:
    """The names of the nodes a run ran, in order."""

    def __init__(self) -> None:
        self.names: list[str] = []

    @hook_impl
    def before_node_run(self, node) -> None:
        self.names.append(node.name)


@pytest.mark.slow
def test_an_asynchronous_run_trains_on_rollouts_one_version_behind_and_reruns_to_the_same_bytes(before_rl, tmp_path):
    first, second = (shutil.copytree(before_rl, tmp_path / name) for name in ("first", "second"))
    order = NodeOrder()
    for project in (first, second):
        run_pipeline(project, _params(3, 0), pipeline="rl", hooks=(order,) if project == first else ())
    names = order.names
    # the round loop starts round k+1's rollout ahead, then trains round k, then collects that rollout
    for k in (0, 1):
        assert (names.index(f"round_{k:03d}.prefetch_next_rollout") < names.index(f"round_{k:03d}.update")
                < names.index(f"round_{k + 1:03d}.rollout"))
    assert names.index("round_000.finish_round") > names.index("round_001.update")  # its validation, one round late
    history = json.loads((first / HISTORY).read_text())
    assert [h["staleness"] for h in history] == [0, 1, 1]
    versions = _versions(first)
    assert [v - versions[0] for v in versions] == [0, 0, 1]  # round 1 sampled from round 0's policy
    # nothing depends on how the rollout ahead and the update interleaved
    assert (first / HISTORY).read_bytes() == (second / HISTORY).read_bytes()


@pytest.mark.slow
def test_a_killed_asynchronous_run_resumes_with_the_staleness_of_a_whole_one(before_rl, tmp_path):
    # 5 rounds, a checkpoint after round 2: rounds 0 and 3 validate ahead, on either side of the checkpoint
    params = _params(5, 3)
    reference, project = (shutil.copytree(before_rl, tmp_path / name) for name in ("uninterrupted", "killed"))
    run_pipeline(reference, params, pipeline="rl")
    history = json.loads((reference / HISTORY).read_text())
    assert [h["staleness"] for h in history] == [0, 1, 1, 0, 1]
    assert all(0.0 <= h["val_greedy_accuracy"] <= 1.0 for h in history)

    _kill_once_written(project, params, project / "data/06_models/checkpoints/round_002/optimizer.pt", "--pipeline=rl")
    assert not (project / HISTORY).exists(), "the run finished before it was killed"
    assert all((project / f"data/08_reporting/rounds/round_{k:03d}.json").exists() for k in range(2))  # before round 2 trains
    resumed = _kedro_cli(project, {**params, "rl": {**params["rl"], "resume_from": 3}}, "--pipeline=rl", "--from-nodes=round.rollout")
    assert resumed.wait(timeout=600) == 0, _log_tail(project)
    assert (project / HISTORY).read_bytes() == (reference / HISTORY).read_bytes()
