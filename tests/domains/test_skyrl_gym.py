"""SkyRL-Gym's environments through the gym-style adapter (domains/gym_text.py): rows of a local data set in
SkyRL's format as tasks, single- and multi-turn episodes scored by the environment, executing ones refused."""

from __future__ import annotations

import json

import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.curation import curate
from rlvr_factory.parameters import TaskDecontaminationConfig

pytest.importorskip("skyrl_gym", reason="SkyRL-Gym is not installed: pip install -e '.[skyrl-gym]'")


def gsm8k_rows(answers):
    return [{"data_source": "gsm8k", "env_class": "gsm8k",
             "prompt": [{"role": "user", "content": f"What is {a} + 0? End with '#### ANSWER'."}],
             "reward_spec": {"method": "rule", "ground_truth": str(a)}} for a in answers]


@pytest.fixture
def data(tmp_path):
    paths = {}
    for split, answers in (("train", [11, 12, 13]), ("test", [21, 22])):
        path = tmp_path / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in gsm8k_rows(answers)))
        paths[split] = str(path)
    return paths


def play(domain, task, actions):
    env = domain.environment()
    env.reset(task)
    steps = []
    for action in actions:
        steps.append(env.step(action))
        if steps[-1].done:
            break
    return steps


def test_rows_become_tasks_whose_prompt_is_the_environments_first_observation(data):
    domain = get_domain({"name": "skyrl_gym", "data": data})
    tasks = domain.generate_tasks()
    assert [t.split for t in tasks] == ["train"] * 3 + ["test"] * 2
    assert tasks[0].prompt == "What is 11 + 0? End with '#### ANSWER'."
    assert len({t.reference["seed"] for t in tasks}) == 5  # numbered across the splits


def test_the_environment_scores_the_answer(data):
    domain = get_domain({"name": "skyrl_gym", "data": data})
    task = domain.generate_tasks()[0]
    (right,) = play(domain, task, ["11 + 0 = 11\n#### 11"])
    (wrong,) = play(domain, task, ["#### 12"])
    assert right.done and right.score.correct and right.score.reward == 1.0
    assert wrong.done and not wrong.score.correct and wrong.score.reward == 0.0


def test_a_multi_turn_environment_answers_with_its_observation_and_rewards_each_turn(data, tmp_path):
    path = tmp_path / "multi.jsonl"
    path.write_text("".join(json.dumps({**r, "env_class": "gsm8k_multi_turn"}) + "\n" for r in gsm8k_rows([7])))
    domain = get_domain({"name": "skyrl_gym", "env_id": "gsm8k_multi_turn", "data": {"train": str(path)},
                         "max_turns": 3})
    steps = play(domain, domain.generate_tasks()[0], ["#### 6", "#### 7"])
    assert not steps[0].done and "####" in steps[0].observation and 0 < steps[0].reward < 1  # the format's share
    assert steps[1].done and steps[1].score.correct


def test_a_bad_row_is_quarantined_with_the_reason_and_the_rest_are_kept(data, tmp_path):
    path = tmp_path / "bad.jsonl"
    rows = gsm8k_rows([1, 2]) + [{"prompt": "", "reward_spec": {"ground_truth": "3"}},
                                 {**gsm8k_rows([4])[0], "env_class": "aime"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    domain = get_domain({"name": "skyrl_gym", "data": {"train": str(path)}})
    curated = curate(domain.rows(), domain, decontamination=TaskDecontaminationConfig(), validation_from_train=0,
                     default_difficulty=1, seed=0)
    assert len(curated.tasks) == 2
    reasons = [q["reason"] for q in curated.quarantined]
    assert len(reasons) == 3 and any("prompt" in r for r in reasons) and any("env_class 'aime'" in r for r in reasons)


@pytest.mark.parametrize("env_id", ["lcb", "text2sql"])
def test_environments_that_run_model_output_outside_the_sandbox_are_refused(env_id, data):
    with pytest.raises(ValueError, match="outside the sandbox; it is refused"):
        get_domain({"name": "skyrl_gym", "env_id": env_id, "data": data})
