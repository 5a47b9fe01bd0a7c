"""`kedro run --pipeline=rlvr --env verifiers` at a tiny size: a `verifiers` v1 environment (examples/verifiers/sums,
in its own venv) drives the policy through `vf-eval` against the endpoint in every round and evaluation; SFT is
skipped (the run starts from a given model); the rounds train on token-exact traces with the environment's
rewards. Runs in the verifiers CI step (scripts/test_verifiers.sh); skips without the verifiers venv."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from rlvr_factory.domains.verifiers import VerifiersDomain
from rlvr_factory.models.policy import load_policy
from tests.pipelines.conftest import TINY_PARAMS, make_project, round_tables, run_pipeline
from tests.verifiers_env import half_right_policy, sums_answers, verifiers_venv

VENV = verifiers_venv()
pytestmark = pytest.mark.slow
SPLITS = {"train": 4, "validation": 2, "test": 2}
DATA = "data/envs/verifiers"


def first_train_position() -> int:
    domain = VerifiersDomain(splits=SPLITS)
    return next(domain.position(t) for t in domain.generate_tasks() if t.split == "train")


@pytest.fixture(scope="module")
def verifiers_run(tmp_path_factory):
    """The run, from a policy that writes the first train task's answer about half the time."""
    answers = sums_answers(n=8)
    root = tmp_path_factory.mktemp("verifiers_run")
    policy = half_right_policy(answers[first_train_position()])
    policy.model.save_pretrained(root / "start")
    policy.tokenizer.save_pretrained(root / "start")
    project = make_project(root / "project")
    runtime = copy.deepcopy(TINY_PARAMS)
    runtime["domain"] = {"splits": SPLITS, "venv": str(VENV), "env_args": ["--env.taskset.num-tasks", "8"]}
    runtime["model"]["name_or_path"] = str(root / "start")
    runtime["sft"]["num_examples"] = 0
    runtime["rl"].update(prompts_per_round=4, samples_per_prompt=8, sampling={"max_new_tokens": 6})
    runtime["rl"]["update"]["lr"] = 1e-3  # the scripted answer's logit moves visibly in two rounds (at 5e-3 the
    # whole-model update of the scripted bigram table diverges: the step KL overflows)
    runtime["evaluate"].update(validation_size=2, sampling={"max_new_tokens": 6})
    run_pipeline(project, runtime, env="verifiers")
    return project, root / "start", answers


def test_the_tasks_are_the_tasksets_positions(verifiers_run):
    project, _, _ = verifiers_run
    tasks = pd.read_parquet(project / DATA / "03_primary/tasks.parquet")
    assert tasks.groupby("split").size().to_dict() == {"test": 2, "train": 4, "validation": 2}
    assert sorted(json.loads(r)["index"] for r in tasks["reference"]) == list(range(8))


def test_sft_is_skipped_the_run_starts_from_the_given_model(verifiers_run):
    project, start, _ = verifiers_run
    given, sft = load_policy(str(start)), load_policy(str(project / DATA / "06_models/sft_policy"))
    for (name, a), b in zip(given.model.state_dict().items(), sft.model.state_dict().values()):
        assert torch.equal(a, b), name


def test_every_round_is_scored_by_the_environment_on_what_was_sampled(verifiers_run):
    project, _, answers = verifiers_run
    tasks = pd.read_parquet(project / DATA / "03_primary/tasks.parquet")
    position = {t: json.loads(r)["index"] for t, r in zip(tasks["task_id"], tasks["reference"])}
    scored = round_tables(project / DATA / "07_model_output/scored")
    assert set(scored["round"]) == {0, 1} and len(scored) == 2 * 4 * 8
    assert set(scored["status"]) == {"ok"}
    for row in scored.itertuples():
        assert row.reward == float(row.completion.strip() == answers[position[row.task_id]]), row.completion
        assert row.reward_breakdown["exact"] == row.reward
    assert 0 < scored["reward"].sum() < len(scored)


def test_round_zero_trains_on_the_tokens_and_log_probs_the_engine_sampled(verifiers_run):
    project, start, _ = verifiers_run
    policy = load_policy(str(start))
    rollouts = round_tables(project / DATA / "07_model_output/rollouts")
    first = rollouts[rollouts["round"] == 0]
    for row in first.itertuples():
        prompt, completion = list(row.prompt_ids), list(row.completion_ids)
        assert list(row.loss_mask) == [1] * len(completion)
        with torch.no_grad():
            logits = policy.model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1: -1]
        expected = F.log_softmax(logits.double(), -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(torch.tensor(list(row.logprobs), dtype=torch.float64), expected, atol=1e-4)


def test_the_rounds_make_the_rewarded_answer_likelier(verifiers_run):
    """The pipeline's update follows the environment's verdicts: the answer it rewards on the first train task
    (which the start policy writes about half the time) is likelier after the rounds."""
    project, start, answers = verifiers_run
    rollouts = round_tables(project / DATA / "07_model_output/rollouts")
    answer = answers[first_train_position()]
    context = list(rollouts[rollouts["prompt"] == f"sums task {first_train_position()}"]["prompt_ids"].iloc[0])

    def answer_logprob(path) -> float:
        policy = load_policy(str(path))
        ids = policy.tokenizer(answer)["input_ids"] + [policy.tokenizer.eos_token_id]
        with torch.no_grad():
            logits = policy.model(torch.tensor([context + ids])).logits[0, len(context) - 1: -1]
        return float(F.log_softmax(logits, -1).gather(-1, torch.tensor(ids).unsqueeze(-1)).sum())

    # two rounds at lr 1e-3 moved it by +0.0096 here
    assert answer_logprob(project / DATA / "06_models/rl_policy") > answer_logprob(start) + 0.002


def test_the_evaluation_runs_the_environment_on_the_test_split(verifiers_run):
    project, _, _ = verifiers_run
    report = json.loads((project / DATA / "08_reporting/metrics.json").read_text())
    for stage in ("sft", "rl"):
        assert report[stage]["num_tasks"] == 2
        assert 0.0 <= report[stage]["greedy_accuracy"] <= 1.0
