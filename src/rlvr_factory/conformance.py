"""The environment conformance kit: what every environment must do to train here, checked on real episodes.

`check_environment(domain, tasks)` runs the domain's environments in a scheduler worker, as a run does
(`rollout.environment.executor: scheduler`), and returns one `Check` per property; `rlvr check-env`
prints them (docs/environments.md, "The conformance kit"). The properties:

- `first_observation`: `reset` gives the task's prompt (what SFT and evaluation show), the same on a fresh
  environment.
- `repeats`: a scripted episode (the domain's demonstration, then plausible answers) repeats exactly in a
  fresh worker: observations, turn rewards, `done` and the verdict.
- `no_carried_state`: the same episode, played in the worker right after another task's, is the one it is
  alone (an environment that keeps state between episodes, in itself or in its module, fails).
- `bad_actions`: hostile actions (empty, 100 000 characters, NUL and control characters, a lone surrogate,
  code that would create a canary file if anything ran it) each end as a step or an `error` episode with
  a message; none hangs (`timeout`), none is an infrastructure failure, and the canary never appears.
- `finite_rewards`: every turn reward and verdict seen is a finite number.
- `tokens`: a tiny model, practised for seconds on the scripted episodes, plays the tasks through the agent
  loop (several turns, its actions mostly the script's), and what the update trains on
  is exactly what was sampled: each turn's action tokens are where the loss mask is 1, each turn continues
  the prompt and every token before it (nothing re-tokenized), the log-probs are the sampler's.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from rlvr_factory.domains.base import Domain, Environment, Step, Task, environment_for, member
from rlvr_factory.rollout.chat import ChatFormat
from rlvr_factory.rollout.engine import Engine, EngineStats, Generation, Request, SamplingConfig
from rlvr_factory.rollout.steps import Executor, ExecutorConfig, Failed

GENERIC_ACTIONS = ("[10]", "42", "\\boxed{1}", "#### 1", "DONE")  # after the demonstration's actions
Record = list[tuple[str, Any, float, bool, Any]]  # per call: (method, observation or failure, reward, done, verdict)


@dataclass(frozen=True)
class Check:
    """One property: whether it held, and what was seen when it did not (or what was measured)."""

    name: str
    passed: bool
    detail: str


def hostile_actions(canary: Path) -> dict[str, str]:
    """Actions an environment must survive, by name; the `code` one creates `canary` if anything runs it."""
    code = (f"__import__('pathlib').Path({str(canary)!r}).touch()\n$(touch {canary})\n`touch {canary}`\n"
            f"```python\nopen({str(canary)!r}, 'w').write('ran')\n```\n\\boxed{{__import__('os').system('touch {canary}')}}")
    return {"empty": "", "long": "9" * 100_000, "control": "\x00\x01\x1b[2J\x7f", "surrogate": "[1] \udcff",
            "code": code, "number": "[" + "9" * 5000 + "]"}


def script(domain: Domain, task: Task, turns: int) -> list[str]:
    """The actions of a scripted episode: the domain's demonstration (a tool episode's actions, or the
    completion), then plausible answers, `turns` in all."""
    owner = member(domain, task.domain)
    actions: list[str] = []
    try:
        if callable(getattr(owner, "tool_demonstration", None)):
            actions = owner.tool_demonstration(task)[::2]
        else:
            actions = [owner.demonstration(task)]
    except Exception:  # noqa: BLE001 - a domain without demonstrations is still checked with the generic actions
        actions = []
    return (actions + list(GENERIC_ACTIONS) * turns)[:turns]


def _entry(method: str, result: Any) -> tuple[str, Any, float, bool, Any]:
    if isinstance(result, Failed):
        return method, result, 0.0, True, None
    if isinstance(result, Step):
        return method, result.observation, result.reward, result.done, result.score
    return method, result, 0.0, False, None


def play(executor: Executor, make_env: Callable[[Task], Environment], task: Task, actions: Sequence[str]) -> Record:
    """One episode through `executor`: every call's result, until done, a failure or the last action."""
    ((env, first),) = executor.run("reset", [make_env(task)], [task])
    record = [_entry("reset", first)]
    for action in actions:
        if record[-1][3]:
            break
        ((env, result),) = executor.run("step", [env], [action])
        record.append(_entry("step", result))
    return record


def _finite(record: Record) -> list[str]:
    bad = []
    for method, _, reward, _, score in record:
        rewards = [reward] + ([score.reward] if score is not None else [])
        if not all(isinstance(r, (int, float)) and math.isfinite(r) for r in rewards):
            bad.append(f"{method} gave reward {rewards}")
    return bad


def _first_difference(a: Record, b: Record) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if repr(x) != repr(y):
            return f"call {i} ({x[0]}): {str(x[1:])[:160]} vs {str(y[1:])[:160]}"
    return f"{len(a)} calls vs {len(b)}"


def check_environment(
    domain: Domain, tasks: Sequence[Task], turns: int = 4, timeout_seconds: float = 30.0, tokens: bool = True,
) -> list[Check]:
    """Every property of the module docstring on `tasks` (the first two play each other's neighbours: each
    alone in a fresh worker, then each after the other's episode), `turns` actions per episode, each call
    under `timeout_seconds`; `tokens` (unless false) with a tiny model practised on the scripted episodes."""
    if len(tasks) < 2:
        raise ValueError("the conformance kit needs at least 2 tasks (one episode runs after another's)")
    # plain workers, whose memory outlives a call: the kit finds state an environment keeps in its module, which a
    # run's isolated calls (`isolate_calls`) would hide
    config = ExecutorConfig(executor="scheduler", workers=1, timeout_seconds=timeout_seconds,
                            retry=replace(ExecutorConfig().retry, max_attempts=1), isolate_calls=False)
    make_env = lambda task: environment_for(member(domain, task.domain))  # noqa: E731
    scripts = [script(domain, t, turns) for t in tasks[:2]]
    checks, seen = [], []
    with Executor(config) as first, Executor(config) as second, Executor(config) as third:
        alone = [play(first, make_env, tasks[0], scripts[0]), play(second, make_env, tasks[1], scripts[1])]
        after = [play(second, make_env, tasks[0], scripts[0]), play(first, make_env, tasks[1], scripts[1])]
        fresh = [play(third, make_env, tasks[0], scripts[0])]
        seen += alone + after + fresh
        checks.append(_first_observation(tasks, alone, fresh))
        checks.append(_compare("repeats", "in a fresh worker", alone[:1], fresh))
        checks.append(_compare("no_carried_state", "after another task's episode in the same worker", alone, after))
        bad, records = _bad_actions(first, make_env, tasks[0], timeout_seconds)
        seen += records
        checks.append(bad)
    problems = [p for record in seen for p in _finite(record)]
    checks.append(Check("finite_rewards", not problems, "; ".join(problems[:3]) or f"{len(seen)} episodes"))
    if tokens:
        engine, chat = practised_engine([t.prompt for t in tasks[:2]], scripted_episodes(alone, scripts))
        checks.append(check_tokens(domain, tasks, engine, chat, turns, config))
    return checks


def _first_observation(tasks: Sequence[Task], alone: list[Record], fresh: list[Record]) -> Check:
    problems = []
    for task, record in zip(tasks, alone):
        observation = record[0][1]
        if isinstance(observation, Failed):
            problems.append(f"{task.task_id}: reset failed ({observation.status}): {observation.message[:200]}")
        elif observation != task.prompt:
            problems.append(f"{task.task_id}: reset gave {observation[:80]!r}, the task's prompt is {task.prompt[:80]!r}")
    if not problems and repr(fresh[0][0]) != repr(alone[0][0]):
        problems.append(f"{tasks[0].task_id}: a fresh environment's first observation differs")
    return Check("first_observation", not problems, "; ".join(problems) or f"{len(tasks)} tasks")


def _compare(name: str, where: str, expected: list[Record], got: list[Record]) -> Check:
    """Records compared by their repr: a NaN reward equals itself (`finite_rewards` reports it)."""
    for a, b in zip(expected, got):
        if repr(a) != repr(b):
            return Check(name, False, f"the episode differs {where}: {_first_difference(a, b)}")
    return Check(name, True, f"{len(expected)} episode(s), {sum(len(r) for r in expected)} calls")


def _bad_actions(executor: Executor, make_env: Callable[[Task], Environment], task: Task,
                 timeout_seconds: float) -> tuple[Check, list[Record]]:
    with tempfile.TemporaryDirectory(prefix="rlvr-canary-") as folder:
        canary = Path(folder) / "ran"
        problems, records, slowest = [], [], 0.0
        for name, action in hostile_actions(canary).items():
            start = time.perf_counter()
            record = play(executor, make_env, task, [action])
            slowest = max(slowest, time.perf_counter() - start)
            records.append(record)
            outcome = record[-1][1]
            if isinstance(outcome, Failed) and (outcome.status != "error" or not outcome.message):
                problems.append(f"{name}: {outcome.status} {outcome.message[:120]}")
        if canary.exists():
            problems.append("the code action ran: the canary file was created")
    detail = "; ".join(problems) or f"{len(records)} actions, slowest episode {slowest:.2f} s (limit {timeout_seconds:g} s a call)"
    return Check("bad_actions", not problems, detail), records


class RecordingEngine:
    """An engine that keeps every context it was asked to continue and what it sampled, by request key."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.calls: dict[Any, list[tuple[list[int], Generation]]] = {}

    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> tuple[list[Generation], EngineStats]:
        generations, stats = self.engine.generate(requests, config)
        for request, generation in zip(requests, generations):
            self.calls.setdefault(request.key[1], []).append((list(request.context), generation))
        return generations, stats


def check_tokens(domain: Domain, tasks: Sequence[Task], engine: Engine, chat: ChatFormat, turns: int,
                 environment: ExecutorConfig) -> Check:
    """The `tokens` property on 2 sampled episodes of each task (see the module docstring)."""
    from rlvr_factory.rollout.agent_loop import RolloutConfig, environments_of, run_episodes

    recording = RecordingEngine(engine)
    config = RolloutConfig(max_turns=turns, max_context_tokens=None, environment=environment)
    episodes, _ = run_episodes(recording, chat, tasks, 2, environments_of(domain), config,
                               SamplingConfig(max_new_tokens=16, temperature=1.0, seed=0))
    problems = []
    for k, episode in enumerate(episodes):
        calls = recording.calls.get(k, [])
        sampled = [t for _, g in calls for t in g.token_ids]
        trained = [t for t, m in zip(episode.completion_ids, episode.loss_mask) if m == 1]
        if len(calls) != len(episode.turns) or trained != sampled:
            problems.append(f"episode {k}: the tokens trained are not the {len(sampled)} sampled")
        elif [x for _, g in calls for x in g.logprobs] != [x for x, m in zip(episode.logprobs, episode.loss_mask) if m]:
            problems.append(f"episode {k}: the log-probs trained are not the sampler's")
        else:
            problems += [f"episode {k} turn {t}: its context is not the prompt and the tokens before it"
                         for t, (context, _) in enumerate(calls)
                         if not episode.per_turn and context != episode.prompt_ids + _before(episode, t)]
    turns_played = sum(len(e.turns) for e in episodes)
    return Check("tokens", not problems, "; ".join(problems[:3]) or f"{len(episodes)} episodes, {turns_played} turns")


def _before(episode: Any, turn: int) -> list[int]:
    return [t for x in episode.turns[:turn] for t in x.action_ids + x.observation_ids]


def practised_engine(prompts: Sequence[str], episodes: Sequence[Sequence[str]], steps: int = 80,
                     max_positions: int = 4096) -> tuple[Engine, ChatFormat]:
    """A tiny Llama (byte tokenizer) fine-tuned for a few seconds on `episodes` ([action, observation, ...] after
    each prompt), so that its sampled actions end and episodes go on for several turns; and its chat format."""
    from rlvr_factory.models.policy import Policy
    from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
    from rlvr_factory.models.tokenizer import build_byte_tokenizer
    from rlvr_factory.rollout.hf import TransformersEngine
    from rlvr_factory.training.sft import SFTConfig, encode_demonstrations, supervised_train

    tokenizer = build_byte_tokenizer()
    config = replace(TinyModelConfig(), hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                     max_positions=max_positions)
    policy = Policy(build_tiny_model(config, len(tokenizer), tokenizer.pad_token_id, tokenizer.bos_token_id,
                                     tokenizer.eos_token_id, seed=0), tokenizer)
    examples = encode_demonstrations(tokenizer, prompts, episodes)
    supervised_train(policy, examples, SFTConfig(steps=steps, batch_size=4, lr=1e-2, warmup_steps=5), desc="check-env")
    return TransformersEngine(policy, desc="check-env"), ChatFormat(tokenizer, "tool")


def scripted_episodes(records: Sequence[Record], scripts: Sequence[Sequence[str]]) -> list[list[str]]:
    """Each scripted episode as turns [action, observation, ..., action]: what `practised_engine` learns."""
    episodes = []
    for record, actions in zip(records, scripts):
        observations = [r[1] for r in record[1:] if isinstance(r[1], str) and not r[3]]
        played = actions[: len(record) - 1]
        turns = [t for action, observation in zip(played, observations + [""]) for t in (action, observation)]
        episodes.append(turns[:-1] if turns else ["DONE"])
    return episodes


def table(checks: Sequence[Check]) -> str:
    """The checks as a table: property, pass or FAIL, detail."""
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{c.name:<{width}}  {'pass' if c.passed else 'FAIL'}  {c.detail}" for c in checks)
