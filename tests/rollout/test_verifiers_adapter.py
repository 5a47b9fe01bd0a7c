"""The verifiers adapter: a `verifiers` v1 environment (examples/verifiers/sums, in its own venv) runs through
`vf-eval` against the policy endpoint; its traces are token-exact against the engine's samples, and the
update trains on them. Skips without the verifiers venv (`bash scripts/install_verifiers.sh`), unless
RLVR_REQUIRE_VERIFIERS is set (CI sets it), where it fails."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from rlvr_factory.rollout.endpoint import Endpoint, EndpointConfig
from rlvr_factory.rollout.hf import TransformersEngine
from rlvr_factory.rollout.verifiers_adapter import (
    VerifiersRunError, VerifiersSettings, run_verifiers, samples, token_mismatch,
)
from rlvr_factory.training.grpo import UpdateConfig, rl_update
from tests.conftest import make_scripted_policy
from tests.verifiers_env import half_right_policy, sums_answers, verifiers_venv

VENV = verifiers_venv()
TASKS = 4


def answer_logprob(policy, context: list[int], answer: str) -> float:
    ids = policy.tokenizer(answer)["input_ids"] + [policy.tokenizer.eos_token_id]
    x = torch.tensor([context + ids])
    with torch.no_grad():
        logits = policy.model(x).logits[0, len(context) - 1 : -1]
    return float(F.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids).unsqueeze(-1)).sum())


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    answer = sums_answers()[0]
    policy = half_right_policy(answer)
    tokenizer_dir = tmp_path_factory.mktemp("tokenizer")
    policy.tokenizer.save_pretrained(tokenizer_dir)
    settings = VerifiersSettings("sums", venv=str(VENV), num_tasks=TASKS, rollouts_per_task=8, max_tokens=6,
                                 temperature=1.0)
    endpoint = Endpoint(TransformersEngine(policy), policy.tokenizer, EndpointConfig(model_name="tiny"))
    with endpoint:
        rollouts = run_verifiers(endpoint, settings, tokenizer_dir, tmp_path_factory.mktemp("vf"))
    return policy, answer, endpoint, rollouts


def test_every_trace_is_token_exact_against_the_engines_samples(run):
    policy, answer, endpoint, rollouts = run
    assert len(rollouts) == TASKS * 8
    assert [r.error for r in rollouts] == [None] * len(rollouts)
    calls = {c.session: c for c in endpoint.recorder.calls}
    assert {r.trace_id for r in rollouts} == set(calls)  # one session per trace, each trace's calls its own
    for r in rollouts:
        call = calls[r.trace_id]
        assert r.episode.prompt_ids == call.prompt_ids
        assert r.episode.completion_ids == call.completion_ids and r.episode.logprobs == call.logprobs


def test_the_reward_is_the_environments_own_verdict_on_what_was_sampled(run):
    policy, answer, endpoint, rollouts = run
    answers = sums_answers()
    for r in rollouts:
        reply = policy.tokenizer.decode(r.episode.completion_ids, skip_special_tokens=True).strip()
        assert r.reward == float(reply == answers[r.task_index]), (reply, answers[r.task_index])
        assert r.rewards == {"exact": (r.reward, 1.0)}
    first = [r.reward for r in rollouts if r.task_index == 0]
    assert 0 < sum(first) < len(first)  # the task the policy half knows: both outcomes sampled


def test_the_update_trains_on_the_traces_toward_what_the_environment_rewards(run):
    """One update (Adam's first step, small, on the output layer) on the traces makes the rewarded answer likelier;
    the same traces with the rewards flipped make it less likely: the update follows verifiers' verdicts, however
    the round's samples fell."""
    import copy
    from dataclasses import replace

    policy, answer, endpoint, rollouts = run
    batch = samples(rollouts)
    assert len(batch) == len(rollouts)
    context = next(r.episode.prompt_ids for r in rollouts if r.task_index == 0)
    before = answer_logprob(policy, context, answer)
    config = UpdateConfig(lr=5e-3, warmup_steps=0, minibatch_size=len(batch))
    rewarded, flipped = copy.deepcopy(policy), copy.deepcopy(policy)
    for copied in (rewarded, flipped):  # the output layer alone: Adam's first step moves every trained weight by
        for name, weight in copied.model.named_parameters():  # about lr whatever its gradient, and the zeroed
            weight.requires_grad_(name.startswith("lm_head"))  # blocks would then stir the bigram table at random
    stats = rl_update(rewarded, batch, config)
    rl_update(flipped, [replace(s, reward=1.0 - s.reward) for s in batch], config)
    assert all(torch.isfinite(torch.tensor(list(stats.values()), dtype=torch.float64)))
    assert answer_logprob(flipped, context, answer) < before - 0.01 < before + 0.01 < answer_logprob(rewarded, context, answer)


def test_a_trace_whose_tokens_differ_from_the_sample_is_refused(run):
    _, _, _, rollouts = run
    import json

    r = rollouts[0]
    trace = {"nodes": [{"token_ids": list(r.episode.prompt_ids), "mask": [0] * len(r.episode.prompt_ids),
                        "logprobs": []},
                       {"parent": 0, "token_ids": list(r.episode.completion_ids), "mask": [1] * len(r.episode.completion_ids),
                        "logprobs": list(r.episode.logprobs)}]}
    assert token_mismatch(trace, r.episode) is None
    forged = json.loads(json.dumps(trace))
    forged["nodes"][1]["token_ids"][0] += 1
    assert "differ" in token_mismatch(forged, r.episode)
    shifted = json.loads(json.dumps(trace))
    shifted["nodes"][1]["logprobs"][0] += 0.5
    assert "log-probs differ" in token_mismatch(shifted, r.episode)


def test_a_missing_verifiers_install_says_how_to_install_it(tmp_path):
    policy = make_scripted_policy("1")
    with Endpoint(TransformersEngine(policy), policy.tokenizer) as endpoint:
        with pytest.raises(VerifiersRunError, match="install_verifiers.sh"):
            run_verifiers(endpoint, VerifiersSettings("sums", venv=str(tmp_path / "none")), tmp_path, tmp_path / "out")


def test_tasks_are_picked_by_their_position_in_the_taskset(tmp_path):
    answers = sums_answers(n=8)
    policy = half_right_policy(sums_answers()[0])
    policy.tokenizer.save_pretrained(tmp_path / "tokenizer")
    settings = VerifiersSettings("sums", venv=str(VENV), rollouts_per_task=1, max_tokens=2)
    with Endpoint(TransformersEngine(policy), policy.tokenizer) as endpoint:
        rollouts = run_verifiers(endpoint, settings, tmp_path / "tokenizer", tmp_path / "vf", task_indices=[5, 2])
    assert sorted(r.task_index for r in rollouts) == [2, 5]
    assert all(r.error is None for r in rollouts)
    assert {r.task_index: r.episode.prompt_ids for r in rollouts}.keys() == {2, 5}
    prompts = {r.task_index: policy.tokenizer.decode(r.episode.prompt_ids) for r in rollouts}
    rng = random.Random(0)
    operands = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in answers]
    assert all(f"{operands[i][0]}+{operands[i][1]}=" in prompts[i] for i in (2, 5))


def test_unreadable_or_non_finite_traces_are_error_rollouts_and_the_others_are_kept(run):
    """What vf-eval writes is third-party output: a trace whose fields are missing, of the wrong type or not finite
    is an error rollout naming why, never a crash and never trained on."""
    from rlvr_factory.rollout.verifiers_adapter import _rollout

    _, _, endpoint, rollouts = run
    decode = endpoint.server.decode
    good = {"id": rollouts[0].trace_id, "ok": True, "errors": [], "task": {"data": {"idx": rollouts[0].task_index}},
            "rewards": {"exact": {"score": 1.0, "weight": 1.0}}, "nodes": []}
    for broken, says in [({**good, "task": None}, "cannot be read"), ({**good, "rewards": {"exact": {"score": "x"}}},
                         "cannot be read"), ({**good, "rewards": {"exact": {"score": 10 ** 400}}}, "cannot be read"),
                         ({**good, "rewards": {"exact": {"score": float("nan")}}}, "not finite"), ([1, 2], "cannot be read")]:
        rollout = _rollout(broken, endpoint, decode)
        assert rollout.error is not None and says in rollout.error and rollout.episode is None, broken
        assert samples([rollout]) == []


def test_the_example_tasksets_reward_reads_one_stated_answer_and_no_hedge():
    """The sums taskset's reading of a reply, run in the verifiers venv where it is installed: the reply itself
    or its one boxed answer; two boxed answers (a hedge), an empty box, and a long or unbalanced reply pay nothing
    for the sum, and the reading stays linear on a 100k-character reply."""
    import json
    import subprocess

    replies = ["7", " 7 \n", "\\boxed{7}", "3+4=7\n\\boxed{7}", "\\boxed{7}\\boxed{8}", "\\boxed{8}\\boxed{7}",
               "\\boxed{}", "7 or 8", "\\boxed{7", "\\boxed{{7}}", "\\boxed{" * 50_000 + "7"]
    code = ("import json, sys; from sums.taskset import stated_answer; "
            "print(json.dumps([stated_answer(r) == '7' for r in json.load(sys.stdin)]))")
    done = subprocess.run([str(VENV / "bin" / "python"), "-c", code], input=json.dumps(replies), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [True, True, True, True, False, False, False, False, False, False, False]
