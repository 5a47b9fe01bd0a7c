"""RL on trajectories: the update trains on the policy's tokens exactly as sampled, and on nothing else."""

import pandas as pd
import pytest
import torch

from rlvr_factory.datasets import RoundTableDataset
from rlvr_factory.domains import ArithmeticDomain, Task
from rlvr_factory.rollout.agent_loop import RolloutConfig, chat_format, environments_of, run_episodes
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.training.rounds import rollouts_frame, samples_from_scored, scored_frame
from rlvr_factory.verifiers.score import Score
from tests.rollout.policies import PROMPTS, calculator_user

pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad=True:UserWarning")

TASKS = [Task(f"t{i}", "arithmetic", p, {"answer": "42"}, 1, "train", "test") for i, p in enumerate(PROMPTS)]
CALCULATOR = ArithmeticDomain(levels={1: {"digits": 2, "operands": 2, "ops": "+"}}, splits={}, tool={"enabled": True})
CONFIG = RolloutConfig(max_turns=3)


def scored_round(policy, rewards=None, tmp_path=None) -> tuple[list, pd.DataFrame]:
    """Sampled tool episodes of the three prompts, through the rollouts and scored tables (and parquet)."""
    episodes, _ = run_episodes(TransformersEngine(policy), chat_format(policy.tokenizer, CONFIG), TASKS, 2,
                               environments_of(CALCULATOR), CONFIG, SamplingConfig(max_new_tokens=24, seed=3))
    rollouts = rollouts_frame(episodes, TASKS, 0, 0)
    if tmp_path is not None:
        RoundTableDataset(str(tmp_path / "rollouts.parquet")).save(rollouts)
        rollouts = RoundTableDataset(str(tmp_path / "rollouts.parquet")).load()
    rewards = rewards or [float(i % 2) for i in range(len(episodes))]
    return episodes, scored_frame(rollouts, [Score(r, r > 0) for r in rewards])


def test_the_update_trains_on_exactly_the_tokens_the_engine_sampled(tmp_path):
    policy = calculator_user()
    episodes, scored = scored_round(policy, tmp_path=tmp_path)
    seen = []
    hook = policy.model.register_forward_pre_hook(lambda module, args, kwargs: seen.append(kwargs["input_ids"].clone()),
                                                  with_kwargs=True)
    rl_update(policy, samples_from_scored(scored), UpdateConfig(minibatch_size=64))
    hook.remove()
    (ids,) = seen  # one minibatch, its rows shuffled
    pad = policy.tokenizer.pad_token_id
    trained = sorted(tuple(t for t in row if t != pad) for row in ids.tolist())
    assert trained == sorted(tuple(e.prompt_ids + e.completion_ids) for e in episodes)
    for e in episodes:
        policy_tokens = [t for t, m in zip(e.completion_ids, e.loss_mask) if m]
        assert policy_tokens == [t for turn in e.turns for t in turn.action_ids]
    assert any(len(e.turns) > 1 for e in episodes)


def test_the_gradient_on_observation_tokens_is_exactly_zero():
    policy = calculator_user()
    episodes, scored = scored_round(policy)
    grads = []

    def keep_grad(module, args, output):
        output.register_hook(lambda g: grads.append(g.clone()))

    hook = policy.model.model.norm.register_forward_hook(keep_grad)  # the hidden states the output layer reads
    seen = []
    inputs = policy.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw["input_ids"].clone()), with_kwargs=True)
    rl_update(policy, samples_from_scored(scored), UpdateConfig(minibatch_size=64))
    hook.remove()
    inputs.remove()
    ids, (grad,) = seen, grads  # grad: (batch, time, hidden), d loss / d final hidden state; the one at t predicts token t + 1
    by_sequence = {tuple(e.prompt_ids + e.completion_ids): e for e in episodes}
    pad = policy.tokenizer.pad_token_id
    observation_positions = 0
    for row, tokens in enumerate(ids[0].tolist()):
        e = by_sequence[tuple(t for t in tokens if t != pad)]
        mask = [0] * len(e.prompt_ids) + e.loss_mask + [0] * (len(tokens) - len(e.prompt_ids) - len(e.loss_mask))
        predicts_policy = [t - 1 for t in range(1, len(mask)) if mask[t]]
        predicts_other = [t - 1 for t in range(1, len(mask)) if not mask[t]]
        assert torch.count_nonzero(grad[row, predicts_other]) == 0
        assert torch.count_nonzero(grad[row, predicts_policy]) > 0
        observation_positions += sum(len(turn.observation_ids) for turn in e.turns)
    assert observation_positions > 0


def sample(group, reward, episode=None, turns=None, rewards=None, completion=(5, 6, 7)):
    return Sample(group, [1, 2], list(completion), reward, episode=episode, token_turns=turns, turn_rewards=rewards)


def test_samples_of_one_episode_share_its_advantage_and_count_once_in_the_group():
    from rlvr_factory.training.grpo import _episode_advantages

    samples = [sample("g", 1.0, "a"), sample("g", 1.0, "a"), sample("g", 1.0, "a"), sample("g", 0.0, "b")]
    advantages = _episode_advantages(samples, torch.tensor([s.reward for s in samples]), "grpo")
    # two episodes, rewards 1 and 0: +-1/sqrt(1/2) after the group's normalisation, not skewed by a's three samples
    assert advantages.tolist() == pytest.approx([0.7071, 0.7071, 0.7071, -0.7071], abs=1e-4)


def test_turn_rewards_add_each_turns_return_to_its_tokens_only():
    from rlvr_factory.training.grpo import _turn_returns

    s = Sample("g", [1, 2], [5, 6, 7, 8, 9], 1.0, loss_mask=[1, 0, 1, 1, 0], token_turns=[0, 0, 1, 1, 1],
               turn_rewards=[0.5, 2.0])
    returns = _turn_returns([s], 8, weight=0.1)
    assert returns[0].tolist() == pytest.approx([0, 0, 0.25, 0.25, 0.2, 0.2, 0.2, 0])


def test_per_turn_samples_come_from_the_rendered_contexts():
    row = {"task_id": "t", "sample_index": 0, "domain": "d", "reward": 1.0, "status": "ok", "finish_reason": "done",
           "prompt_ids": [1, 2], "completion_ids": [5, 6, 7], "loss_mask": [1, 1, 1], "correct": True,
           "turns": [{"action_tokens": 2, "observation_tokens": 0, "reward": 0.5},
                     {"action_tokens": 1, "observation_tokens": 0, "reward": 1.0}],
           "turn_prompt_ids": [[1, 2], [1, 2, 9, 9]]}
    first, second = samples_from_scored(pd.DataFrame([row]))
    assert (first.prompt_ids, first.completion_ids, first.turn_rewards) == ([1, 2], [5, 6], [1.5])
    assert (second.prompt_ids, second.completion_ids, second.turn_rewards) == ([1, 2, 9, 9], [7], [1.0])
    assert first.episode == second.episode == "t#0"
