"""The agent loop: batched turns, token-exact trajectories, every way an episode can end."""

from dataclasses import replace

import pytest

from rlvr_factory.domains import ArithmeticDomain, Task
from rlvr_factory.rollout.agent_loop import (
    MultiTurnConfig, RolloutConfig, chat_format, environments_of, run_episodes, sample_episodes,
)
from rlvr_factory.rollout.chat import ChatFormat, Message, TemplateError
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.rollout.hf import TransformersEngine, generate
from rlvr_factory.rollout.steps import ExecutorConfig
from tests.rollout.envs import (
    EchoEnvironment, FailsOnPrompt, FlakyStart, GradesEachAttempt, KeepsModuleState, ThirdPartyKeepsModuleState,
)
from tests.rollout.policies import PROMPTS, calculator_user, tool_spammer
from tests.rollout.templates import STRIPS_THINKING, tokenizer_with

TASKS = [Task(f"t{i}", "arithmetic", p, {"answer": "42"}, 1, "test", "test") for i, p in enumerate(PROMPTS)]
GREEDY = SamplingConfig(max_new_tokens=24, temperature=0.0)
CALCULATOR = ArithmeticDomain(levels={1: {"digits": 2, "operands": 2, "ops": "+"}}, splits={},
                              tool={"enabled": True, "max_tool_calls": 2})
MULTI = RolloutConfig(max_turns=4)


class RecordingEngine(TransformersEngine):
    """The transformers engine, keeping every generation it returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.returned = []

    def generate(self, requests, config):
        generations, stats = super().generate(requests, config)
        self.returned.append(generations)
        return generations, stats


def run(policy, make_env, config=MULTI, sampling=GREEDY, tasks=TASKS, samples=1, engine=None):
    engine = engine or TransformersEngine(policy, reuse_kv=config.reuse_kv)
    return run_episodes(engine, chat_format(policy.tokenizer, config), tasks, samples, make_env, config, sampling)


def test_single_turn_episodes_are_the_completions_generate_samples(tiny_policy):
    sampling = SamplingConfig(max_new_tokens=6, seed=3)
    completions, _ = generate(tiny_policy, PROMPTS, 2, sampling)
    episodes, _ = sample_episodes(tiny_policy, CALCULATOR.__class__(levels={1: {"digits": 1, "operands": 2, "ops": "+"}},
                                                                   splits={}), TASKS, 2, RolloutConfig(), sampling)
    assert [(e.task_index, e.sample_index) for e in episodes] == [(c.prompt_index, c.sample_index) for c in completions]
    assert [e.completion_ids for e in episodes] == [c.completion_ids for c in completions]
    assert all(len(e.turns) == 1 and e.finish_reason in ("done", "length") for e in episodes)
    assert [e.answer for e in episodes] == [c.text for c in completions]  # left to the verify station


def test_a_tool_episode_is_the_sampled_actions_and_the_encoded_observations_appended():
    policy = calculator_user()
    engine = RecordingEngine(policy)
    episodes, _ = run(policy, environments_of(CALCULATOR), engine=engine)
    chat = ChatFormat(policy.tokenizer)
    for k, episode in enumerate(episodes):
        assert [t.action for t in episode.turns] == [f"<calc>{PROMPTS[k][8:]}</calc>", "\\boxed{42}"]
        assert episode.turns[0].observation == "<result>42</result>"
        assert episode.finish_reason == "done" and episode.answer == "\\boxed{42}" and episode.info == {
            "tool_calls": 1.0, "tool_errors": 0.0}
        # the policy's tokens are exactly what the engine returned, turn by turn
        assert [t.action_ids for t in episode.turns] == [turn[k].token_ids for turn in engine.returned]
        assert [t.logprobs for t in episode.turns] == [turn[k].logprobs for turn in engine.returned]
        first = episode.turns[0]
        assert first.observation_ids == chat.observation_ids(first.observation)
        assert episode.completion_ids == first.action_ids + first.observation_ids + episode.turns[1].action_ids
        assert episode.loss_mask == [1] * len(first.action_ids) + [0] * len(first.observation_ids) + [1] * len(
            episode.turns[1].action_ids)
        # and the whole episode is what the chat template renders for its history
        messages = [Message("user", PROMPTS[k]), Message("assistant", first.action), Message("tool", first.observation),
                    Message("assistant", episode.turns[1].action)]
        assert episode.prompt_ids + episode.completion_ids == chat.render(messages, add_generation_prompt=False)[:-1]


def test_kv_reuse_gives_the_same_episodes_and_computes_only_the_new_tokens():
    policy = calculator_user()
    with_reuse, reused = run(policy, environments_of(CALCULATOR))
    without, recomputed = run(policy, environments_of(CALCULATOR), config=replace(MULTI, reuse_kv=False))
    assert [e.completion_ids for e in with_reuse] == [e.completion_ids for e in without]
    assert reused["engine_prefill_tokens_turn_0"] == recomputed["engine_prefill_tokens_turn_0"]
    # turn 1 computes the last sampled token and the observation, not the history again
    new = sum(1 + len(e.turns[0].observation_ids) for e in with_reuse)
    assert reused["engine_prefill_tokens_turn_1"] <= new < recomputed["engine_prefill_tokens_turn_1"]
    assert recomputed["engine_prefill_tokens_turn_1"] == sum(len(e.prompt_ids) + len(e.turns[0].action_ids)
                                                             + len(e.turns[0].observation_ids) for e in without)
    assert reused["engine_cached_tokens"] > 0 and recomputed["engine_cached_tokens"] == 0


def test_sampled_multi_turn_episodes_are_the_same_with_and_without_kv_reuse():
    policy = calculator_user()
    sampling = SamplingConfig(max_new_tokens=24, seed=7)
    first, _ = run(policy, environments_of(CALCULATOR), sampling=sampling, samples=3)
    again, _ = run(policy, environments_of(CALCULATOR), sampling=sampling, samples=3)
    recomputed, _ = run(policy, environments_of(CALCULATOR), config=replace(MULTI, reuse_kv=False), sampling=sampling, samples=3)
    assert [e.completion_ids for e in first] == [e.completion_ids for e in again]
    assert [e.completion_ids for e in first] == [e.completion_ids for e in recomputed]


def test_a_model_that_never_stops_calling_tools_ends_by_the_tool_budget():
    episodes, _ = run(tool_spammer(), environments_of(CALCULATOR), config=RolloutConfig(max_turns=10))
    for e in episodes:
        assert e.finish_reason == "max_tool_calls" and e.out_of_budget
        assert len(e.turns) == 3 and e.info["tool_calls"] == 2.0  # the third call ends it
        assert e.score.reward == 0.0 and e.answer is None


def test_the_turn_budget_ends_an_episode_unjudged():
    episodes, _ = run(tool_spammer(), environments_of(CALCULATOR), config=RolloutConfig(max_turns=2))
    for e in episodes:
        assert e.finish_reason == "max_turns" and e.out_of_budget and len(e.turns) == 2
        assert e.score.reward == 0.0 and e.score.breakdown == {"unfinished": 1.0} and e.answer is None


def test_out_of_turns_an_episode_keeps_the_environments_verdict_on_its_last_attempt():
    episodes, _ = run(calculator_user(), lambda task: GradesEachAttempt(turns=5), config=RolloutConfig(max_turns=2))
    for e in episodes:
        assert e.finish_reason == "max_turns" and e.out_of_budget and len(e.turns) == 2
        assert e.score.reward == pytest.approx(0.2)  # the second attempt's grade, not "unfinished"


def test_the_context_budget_ends_an_episode_before_a_turn_that_would_not_fit():
    policy = tool_spammer()
    episodes, _ = run(policy, environments_of(CALCULATOR), config=RolloutConfig(max_turns=10, max_context_tokens=80))
    for e in episodes:
        assert e.finish_reason == "context_budget" and e.out_of_budget
        assert len(e.context_ids) + GREEDY.max_new_tokens > 80
        assert len(e.prompt_ids) + GREEDY.max_new_tokens <= 80  # it got at least one turn
    (first, *_), _ = run(policy, environments_of(CALCULATOR), config=RolloutConfig(max_turns=10, max_context_tokens=10))
    assert first.finish_reason == "context_budget" and first.turns == []


def test_the_auto_budget_is_the_policys_positions_and_a_budget_below_the_prompts_is_reported(tiny_policy, caplog, monkeypatch):
    from rlvr_factory.rollout import agent_loop

    positions = tiny_policy.model.config.max_position_embeddings
    assert RolloutConfig().context_budget(positions) == positions  # the default follows the model
    assert RolloutConfig(max_context_tokens=64).context_budget(positions) == 64
    assert RolloutConfig(max_context_tokens=None).context_budget(positions) is None
    for bad in (0, -3, "256", 1.5):
        with pytest.raises(ValueError, match="max_context_tokens"):
            RolloutConfig(max_context_tokens=bad)
    domain = ArithmeticDomain(levels={1: {"digits": 1, "operands": 2, "ops": "+"}}, splits={})
    sampling = SamplingConfig(max_new_tokens=6, seed=0)
    monkeypatch.setattr(agent_loop, "_warned_budgets", set())
    with caplog.at_level("WARNING", logger=agent_loop.__name__):
        fitting, _ = sample_episodes(tiny_policy, domain, TASKS, 2, RolloutConfig(), sampling)
        assert all(e.turns for e in fitting) and "before their first turn" not in caplog.text
        tiny_policy.model.config.max_position_embeddings = 12  # shorter than every prompt: sample_episodes reads it
        for _ in range(2):
            cut, _ = sample_episodes(tiny_policy, domain, TASKS, 2, RolloutConfig(), sampling)
    assert all(e.finish_reason == "context_budget" and not e.turns and e.completion_ids == [] for e in cut)
    warnings = [r.getMessage() for r in caplog.records if "before their first turn" in r.getMessage()]
    assert len(warnings) == 1  # once per budget, not once per round
    assert f"(12) ends {2 * len(TASKS)} of {2 * len(TASKS)} episodes" in warnings[0]


def test_an_action_that_floods_the_token_budget_ends_with_length(tiny_policy):
    episodes, _ = run(tiny_policy, lambda task: EchoEnvironment(turns=5), sampling=SamplingConfig(max_new_tokens=3, seed=0))
    assert {e.finish_reason for e in episodes} == {"length"} and all(e.out_of_budget for e in episodes)


def test_observations_and_per_turn_rewards_are_recorded():
    episodes, _ = run(calculator_user(), lambda task: EchoEnvironment(turns=2), config=RolloutConfig(max_turns=3))
    for e in episodes:
        assert e.finish_reason == "done" and e.score.reward == 1.0
        assert [t.reward for t in e.turns] == [1.0, 1.0] and e.info == {"echoes": 2.0}
        assert e.turns[0].observation == f"<result>{len(e.turns[0].action)}</result>"


def test_an_environment_that_raises_ends_its_own_episode_only(tiny_policy):
    tasks = TASKS + [Task("boom", "arithmetic", "Compute boom", {"answer": "1"}, 1, "test", "test")]
    episodes, _ = run(tiny_policy, lambda task: FailsOnPrompt(turns=1), tasks=tasks, sampling=SamplingConfig(max_new_tokens=2))
    assert [e.finish_reason for e in episodes[:-1]] != ["error"] * 3
    assert episodes[-1].finish_reason == "error" and episodes[-1].score.status == "error"


def test_an_environment_that_cannot_start_is_retried_then_an_infra_error(tiny_policy, tmp_path):
    tasks = TASKS[:2] + [Task("dead", "arithmetic", "Compute dead", {"answer": "1"}, 1, "test", "test")]
    episodes, _ = run(tiny_policy, lambda task: FlakyStart(str(tmp_path)), tasks=tasks, sampling=SamplingConfig(max_new_tokens=2))
    assert [e.finish_reason != "infra_error" for e in episodes] == [True, True, False]
    assert episodes[-1].score.status == "infra_error" and episodes[-1].turns == []


SCHEDULED = ExecutorConfig(executor="scheduler", workers=2, timeout_seconds=5.0)


def test_scheduled_steps_give_the_same_episodes_as_inline_ones():
    policy = calculator_user()
    inline, _ = run(policy, environments_of(CALCULATOR))
    scheduled, stats = run(policy, environments_of(CALCULATOR), config=replace(MULTI, environment=SCHEDULED))
    assert [(e.completion_ids, e.finish_reason, e.info) for e in inline] == [
        (e.completion_ids, e.finish_reason, e.info) for e in scheduled]
    assert stats["env_seconds"] > 0


def test_a_scheduled_step_that_hangs_or_raises_ends_only_its_episode(tiny_policy, tmp_path):
    tasks = TASKS[:1] + [Task(n, "arithmetic", f"Compute {n}", {"answer": "1"}, 1, "test", "test") for n in ("hang", "boom")]
    config = RolloutConfig(max_turns=1, environment=replace(SCHEDULED, timeout_seconds=1.0))
    episodes, _ = run(tiny_policy, lambda task: FailsOnPrompt(turns=1), config=config, tasks=tasks,
                      sampling=SamplingConfig(max_new_tokens=2))
    assert [e.score.status for e in episodes] == ["ok", "timeout", "error"]
    scheduled_starts, _ = run(tiny_policy, lambda task: FlakyStart(str(tmp_path)), config=config, tasks=TASKS[:2],
                              sampling=SamplingConfig(max_new_tokens=2))
    assert [e.score.status for e in scheduled_starts] == ["ok", "ok"]  # retried after the first failed start
    assert all(len(e.turns) == 1 for e in scheduled_starts)


def test_a_template_that_is_not_append_only_fails_a_multi_turn_run_before_any_generation(tiny_policy):
    tiny_policy.tokenizer = tokenizer_with(STRIPS_THINKING, name="strips-thinking")
    with pytest.raises(TemplateError, match="strips-thinking.*not append-only"):
        run(tiny_policy, lambda task: EchoEnvironment(turns=2))
    run(tiny_policy, lambda task: EchoEnvironment(turns=2), config=RolloutConfig(max_turns=1))  # single-turn: no check


def test_per_turn_samples_render_each_turn_as_the_template_renders_the_history():
    policy = calculator_user()
    policy.tokenizer = tokenizer_with(STRIPS_THINKING)  # the same vocabulary, another template
    config = RolloutConfig(max_turns=3, multi_turn=MultiTurnConfig(non_append_only="per_turn_samples"))
    episodes, _ = run(policy, lambda task: EchoEnvironment(turns=3), config=config)
    chat = ChatFormat(policy.tokenizer)
    for e in episodes:
        assert len(e.turns) == 3
        assert e.per_turn and e.completion_ids == [t for turn in e.turns for t in turn.action_ids]
        history = [Message("user", PROMPTS[e.task_index])]
        for turn in e.turns:
            assert turn.context_ids == chat.render(history)
            history += [Message("assistant", turn.action), Message("tool", turn.observation)]


def test_a_third_party_environments_calls_are_isolated_so_state_left_in_its_module_reaches_no_other_call():
    from rlvr_factory.conformance import play
    from rlvr_factory.rollout.steps import Executor

    tasks = [Task(f"t{i}", "arithmetic", f"prompt {i}", {}, 1, "train", "test") for i in range(2)]
    said = {}
    for kind, isolate in ((ThirdPartyKeepsModuleState, True), (ThirdPartyKeepsModuleState, False),
                          (KeepsModuleState, True)):
        with Executor(replace(SCHEDULED, workers=1, isolate_calls=isolate)) as executor:
            records = [play(executor, lambda task: kind(), task, ["a", "b"]) for task in tasks]
        said[kind.__name__, isolate] = [step[1] for record in records for step in record[1:]]
    assert said["ThirdPartyKeepsModuleState", True] == ["episodes seen in this process: 0"] * 4  # the reset's too
    carried = [f"episodes seen in this process: {n}" for n in (1, 1, 2, 2)]
    assert said["ThirdPartyKeepsModuleState", False] == said["KeepsModuleState", True] == carried  # ours stay warm
