"""The round loop's cost does not grow with the run (`benchmarks/rounds_scale.py` has the table): the registered
pipeline is one round at any `rl.rounds`, round k's nodes are made when round k runs, and a long run killed
after a checkpoint resumes to the same result."""

from __future__ import annotations

import copy
import json
import shutil
import time

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr_factory.pipelines.rl.pipeline import RLShape, create_pipeline, round_block
from tests.pipelines.conftest import TINY_PARAMS, make_project, run_pipeline
from tests.pipelines.test_rl_options import merged
from tests.pipelines.test_rlvr_pipeline import _kedro_cli, _kill_once_written, _log_tail

ROUNDS = 5000


def test_the_registered_rl_pipeline_is_one_round_whatever_the_run_s_length():
    names = [n.name for n in create_pipeline(with_reference=True).nodes]
    assert names == ["initial_policy", "round.rollout", "round.verify", "round.track_levels", "round.track_pass_rates",
                     "round.update", "summarize_rounds"]


def test_a_late_round_is_made_as_fast_as_an_early_one_and_wired_to_its_neighbours():
    shape = RLShape(ROUNDS, checkpoint_every=50, with_reference=True, max_staleness=1)
    plans = shape.plans()

    def seconds(k: int) -> float:
        started = time.perf_counter()
        for _ in range(20):
            round_block(k, shape, plans)
        return time.perf_counter() - started

    early, late = min(seconds(3) for _ in range(3)), min(seconds(ROUNDS - 3) for _ in range(3))
    assert late < 3 * early, f"round {ROUNDS - 3}'s nodes took {late / early:.1f}x as long to make as round 3's"
    block = round_block(ROUNDS - 2, shape, plans)  # reads round 4997's policy, leaves rl_policy's input to 4999
    assert "round_4997.next_policy" in block.inputs() and "round_4998.next_policy" in block.outputs()
    assert round_block(ROUNDS - 1, shape, plans).outputs() >= {"rl_policy", "round_4999.stats"}
    assert "round_049.checkpoint" in round_block(49, shape, plans).outputs()  # every 50 rounds to disk


# A long run at the suite's size: the test suite's tiny model, one prompt x two samples a round, a checkpoint every
# 40 rounds; killed once round 79's checkpoint is on disk (benchmarks/rounds_scale.py runs thousands of rounds).
LONG = {"rl": {"rounds": 120, "checkpoint_every": 40, "prompts_per_round": 1, "samples_per_prompt": 2,
               "update": {"minibatch_size": 2}},
        "evaluate": {"k": 2, "validation_size": 2}, "curate": {"audit": {"enabled": False}}}


@pytest.mark.slow
def test_a_120_round_run_killed_after_a_checkpoint_resumes_to_the_metrics_of_an_uninterrupted_one(tmp_path):
    params = merged(copy.deepcopy(TINY_PARAMS), LONG)
    before = make_project(tmp_path / "before_rl")
    for stage in ("curate", "base_model", "sft"):
        run_pipeline(before, params, pipeline=stage)
    reference, project = (shutil.copytree(before, tmp_path / name) for name in ("uninterrupted", "killed"))
    run_pipeline(reference, params, pipeline="rl")

    _kill_once_written(project, params, project / "data/06_models/checkpoints/round_079/optimizer.pt", "--pipeline=rl")
    assert not (project / "data/08_reporting/rounds/round_119.json").exists(), "the run finished before it was killed"
    resumed = _kedro_cli(project, merged(copy.deepcopy(params), {"rl": {"resume_from": 80}}), "--pipeline=rl",
                         "--from-nodes=round.rollout")
    assert resumed.wait(timeout=600) == 0, _log_tail(project)
    history = "data/08_reporting/round_history.json"
    assert len(json.loads((reference / history).read_text())) == 120
    assert (project / history).read_bytes() == (reference / history).read_bytes()
    final = [AutoModelForCausalLM.from_pretrained(p / "data/06_models/rl_policy").state_dict() for p in (project, reference)]
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0])


@pytest.mark.parametrize("from_nodes, runtime, message", [
    (["round.verify"], {}, "keeps only part of the RL round"),  # a filter that would run half of every round
    (["round.rollout"], {}, "round 0 starts from the policy initial_policy makes"),  # resuming needs rl.resume_from
])
def test_the_round_loop_refuses_a_run_it_cannot_run_whole(tmp_path, from_nodes, runtime, message):
    project = make_project(tmp_path)
    with pytest.raises(ValueError, match=message):
        run_pipeline(project, merged(copy.deepcopy(TINY_PARAMS), runtime), pipeline="rl", from_nodes=from_nodes)
