"""A killed run resumes from its last checkpoint to the same result as an uninterrupted run, with each
RL option on: the KL term (its reference policy), LoRA adapters, dynamic sampling (and the curriculum:
`test_rlvr_pipeline.test_a_killed_run_resumes_from_its_last_checkpoint_to_the_same_result`).

The stages before RL run once; each option then runs the `rl` pipeline uninterrupted in one copy of
that project, and in another copy as a `kedro run` killed after its first checkpoint and resumed
with `--from-nodes=round.rollout --params=rl.resume_from=1`. Both must end with the same round history and the same final policy.
"""

from __future__ import annotations

import copy
import shutil

import pytest
import torch
from kedro.framework.hooks import hook_impl
from transformers import AutoModelForCausalLM

from tests.pipelines.conftest import TINY_PARAMS, make_project, run_pipeline
from tests.pipelines.test_rl_options import merged
from tests.pipelines.test_rlvr_pipeline import _kedro_cli, _kill_once_written, _log_tail

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning")]

OPTIONS = {
    "kl": {"rl": {"update": {"kl_coef": 0.1, "entropy_coef": 0.1}}},
    "lora": {"model": {"lora": {"enabled": True, "r": 4}}, "rl": {"update": {"lr": 5e-3}}},
    "dynamic_sampling": {"rl": {"dynamic_sampling": {"enabled": True, "max_extra_draws": 2, "min_draw": 2}}},
}
ROUNDS = {"rounds": 2, "checkpoint_every": 1}


@pytest.fixture(scope="module")
def before_rl(tmp_path_factory):
    """A project whose curate, base-model and SFT stages have run."""
    project = make_project(tmp_path_factory.mktemp("before_rl"))
    for stage in ("curate", "base_model", "sft"):
        run_pipeline(project, TINY_PARAMS, pipeline=stage)
    return project


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_a_killed_run_resumes_to_the_result_of_an_uninterrupted_one(before_rl, tmp_path, option):
    params = merged(copy.deepcopy(TINY_PARAMS), OPTIONS[option])
    params["rl"].update(ROUNDS)
    reference, project = (shutil.copytree(before_rl, tmp_path / name) for name in ("uninterrupted", "killed"))
    run_pipeline(reference, params, pipeline="rl")

    _kill_once_written(project, params, project / "data/06_models/checkpoints/round_000/optimizer.pt", "--pipeline=rl")
    assert not (project / "data/08_reporting/round_history.json").exists(), "the run finished before it was killed"

    resumed = _kedro_cli(project, {**params, "rl": {**params["rl"], "resume_from": 1}}, "--pipeline=rl", "--from-nodes=round.rollout")
    assert resumed.wait(timeout=600) == 0, _log_tail(project)
    history = "data/08_reporting/round_history.json"
    assert (project / history).read_bytes() == (reference / history).read_bytes()
    final = [AutoModelForCausalLM.from_pretrained(p / "data/06_models/rl_policy").state_dict() for p in (project, reference)]
    assert final[0].keys() == final[1].keys() and all(torch.equal(final[0][k], final[1][k]) for k in final[0])




class SaveOrder:
    """The datasets a run saves, in the order it saves them."""

    def __init__(self) -> None:
        self.saved: list[str] = []

    @hook_impl
    def after_dataset_saved(self, dataset_name: str, data, node) -> None:
        self.saved.append(dataset_name)


def test_a_rounds_stats_are_saved_before_its_checkpoint(before_rl, tmp_path):
    """A run killed the moment a checkpoint is on disk still has that round's stats, which the run
    resumed after the checkpoint reads (a kill between the two made the resume fail)."""
    params = copy.deepcopy(TINY_PARAMS)
    params["rl"].update({"rounds": 3, "checkpoint_every": 1})
    project = shutil.copytree(before_rl, tmp_path / "project")
    order = SaveOrder()
    run_pipeline(project, params, pipeline="rl", hooks=(order,))
    for k in (0, 1):  # round 2 is the last: it writes the final policy
        assert order.saved.index(f"round_{k:03d}.stats") < order.saved.index(f"round_{k:03d}.checkpoint"), order.saved
