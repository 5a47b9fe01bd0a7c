"""The agent loop: a batch of episodes, all active ones advancing one turn per batched generate call.

    task ─► env.reset ─► [ engine.generate (all active episodes) ─► env.step (each) ] × turns ─► episode

Each turn the engine continues every active episode's context (its own token ids, so the
policy's tokens are never re-tokenized); the environments step on the decoded actions; each
observation is encoded on its own and appended. An episode ends when its environment says
`done`, when an action runs out of tokens (`length`), at `max_turns`, when the next turn
would not fit `max_context_tokens` (`context_budget`; `auto`, the default, is the policy's own
positions), or when an environment call fails
(`error`, `timeout`, `infra_error`; that episode only). An episode the loop cut short before
its environment said `done` is not judged: reward 0, breakdown `unfinished`. A single-turn
domain is a one-turn episode through the same code.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Literal, Mapping, Sequence

from rlvr_factory.domains.base import Domain, Environment, Step, Task, environment_for, member
from rlvr_factory.domains.verifiers import VerifiersDomain
from rlvr_factory.models.policy import Policy, max_positions
from rlvr_factory.rollout.chat import NON_APPEND_ONLY, ChatFormat, Message
from rlvr_factory.rollout.engine import Engine, EngineStats, Request, SamplingConfig
from rlvr_factory.rollout.episode import LOOP_BUDGETS, Episode, Turn
from rlvr_factory.rollout.hf import TransformersEngine
from rlvr_factory.rollout.steps import Executor, ExecutorConfig, Failed
from rlvr_factory.rollout.background import shared_background_engine
from rlvr_factory.rollout.vllm_engine import VllmSettings, shared_engine
from rlvr_factory.schema import Block, parse
from rlvr_factory.verifiers.score import Score

log = logging.getLogger(__name__)
UNFINISHED = Score(reward=0.0, correct=False, breakdown={"unfinished": 1.0})
ENGINES = ("transformers", "vllm")
BUDGET_WARNING_SHARE = 0.05  # warn when the context budget ends more than this share of a batch's episodes before their first turn
_warned_budgets: set[int] = set()


@dataclass(frozen=True)
class MultiTurnConfig:
    observation_role: str = "tool"  # the chat role observations are rendered as
    non_append_only: str = "error"  # a chat template that is not append-only: error | per_turn_samples

    def __post_init__(self) -> None:
        if self.non_append_only not in NON_APPEND_ONLY:
            raise ValueError(f"rollout.multi_turn.non_append_only must be one of {NON_APPEND_ONLY}, got {self.non_append_only!r}")


@dataclass(frozen=True)
class RolloutConfig(Block):
    max_turns: int = 1  # actions per episode at most; also the environment's own budget (a domain taking max_turns is given it)
    max_context_tokens: int | Literal["auto"] | None = "auto"  # an episode ends before a turn that could exceed this many tokens; auto: the policy's positions (max_position_embeddings); null: no limit
    reuse_kv: bool = True  # continue each episode from its KV cache instead of recomputing its history
    engine: str = "transformers"  # transformers (`generate`) | vllm (one engine per run, weights pushed every round)
    background: bool = False  # engine transformers: sample in a worker process of its own, so asynchronous rounds (rl.max_staleness) overlap sampling with the update
    background_threads: int = 1  # torch threads of that worker for a rollout running ahead of its round (the update beside it trains on the other cores); any other sampling on it uses every core
    vllm: VllmSettings = field(default_factory=VllmSettings)  # engine: vllm only (docs/engines.md)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)  # how observations enter the chat
    environment: ExecutorConfig = field(default_factory=ExecutorConfig)  # where environment calls run

    def __post_init__(self) -> None:
        super().__post_init__()  # nested blocks given as mappings (Kedro's typed parameters)
        if self.engine not in ENGINES:
            raise ValueError(f"rollout.engine must be one of {ENGINES}, got {self.engine!r}")
        if self.background_threads < 1:
            raise ValueError(f"rollout.background_threads must be at least 1, got {self.background_threads}")
        if self.background and self.engine != "transformers":
            raise ValueError("rollout.background runs the transformers engine in a worker process; vLLM already "
                             "samples in a process of its own: leave it false with rollout.engine=vllm")
        if self.max_turns < 1:
            raise ValueError(f"rollout.max_turns must be at least 1, got {self.max_turns}")
        if self.max_context_tokens not in (None, "auto") and (
                not isinstance(self.max_context_tokens, int) or self.max_context_tokens < 1):
            raise ValueError(f"rollout.max_context_tokens must be a positive int, auto or null, got {self.max_context_tokens!r}")

    def context_budget(self, positions: int | None) -> int | None:
        """The token budget of an episode: `max_context_tokens`, or with `auto` the model's `positions`
        (None, no limit, when the model names none)."""
        return positions if self.max_context_tokens == "auto" else self.max_context_tokens

    @classmethod
    def from_params(cls, params: Mapping[str, Any] | None) -> RolloutConfig:
        """The `rollout` parameter block; unknown keys and wrong values are refused (`schema.parse`)."""
        return parse(cls, params, "rollout")


def defer_to_verifier(answer: str, reference: dict[str, Any]) -> None:
    """The scorer episodes run with: no verdict now; the verify station judges the answer in one batch."""
    return None


def environments_of(domain: Domain) -> Callable[[Task], Environment]:
    """A fresh environment for a task, from the domain that owns it (a mix's member), judged by the verify station."""
    return lambda task: environment_for(member(domain, task.domain), scorer=defer_to_verifier)


def chat_format(tokenizer: Any, config: RolloutConfig) -> ChatFormat:
    """How the run's episodes become token ids under `tokenizer`'s chat template."""
    return ChatFormat(tokenizer, config.multi_turn.observation_role)


def turn_seed(seed: int, turn: int) -> int:
    """The sampling seed of one turn (the first turn's is `seed` itself)."""
    return seed + turn * 1_000_003


def episode_layout(chat: ChatFormat, config: RolloutConfig) -> bool:
    """Whether episodes use the per-turn layout; checks that a multi-turn run's chat template is append-only."""
    if config.max_turns == 1:
        return False
    try:
        chat.check_append_only()
    except ValueError:
        if config.multi_turn.non_append_only == "per_turn_samples":
            return True
        raise
    return False


def run_episodes(
    engine: Engine, chat: ChatFormat, tasks: Sequence[Task], samples: int, make_env: Callable[[Task], Environment],
    config: RolloutConfig, sampling: SamplingConfig, positions: int | None = None,
) -> tuple[list[Episode], dict[str, float]]:
    """`samples` episodes of each task (task-major order) and the loop's stats: `rollout_seconds`,
    `tokens_per_second`, `env_seconds`, `env_steps` (environment steps) and `env_steps_per_second`, and the engine's counts (`engine_seconds`, `engine_new_tokens`,
    `engine_prefill_tokens` and `engine_cached_tokens`, also per turn as `engine_prefill_tokens_turn_<t>`,
    and `engine_cache_hit_rate`, the share of context tokens a cache held). `positions` (the model's) is the
    context budget when `config.max_context_tokens` is `auto`."""
    start = time.perf_counter()
    budget = config.context_budget(positions)
    per_turn = episode_layout(chat, config)
    jobs = [(i, s) for i in range(len(tasks)) for s in range(samples)]
    episodes = [Episode(i, s, [], per_turn=per_turn) for i, s in jobs]
    histories: list[list[Message] | None] = [None] * len(jobs)  # per-turn layout: each episode's messages
    nonce = object()  # engine cache keys of this batch of episodes
    stats: dict[str, float] = defaultdict(float)
    with Executor(config.environment) as executor:
        envs = _start(executor, [make_env(tasks[i]) for i, _ in jobs], tasks, episodes, histories, chat)
        for turn in range(config.max_turns):
            contexts = {k: _context(e, chat, histories[k]) for k, e in enumerate(episodes) if not e.finished}
            for k, context in list(contexts.items()):
                if budget is not None and len(context) + sampling.max_new_tokens > budget:
                    _finish(episodes[k], "context_budget", UNFINISHED, out_of_budget=True)
                    del contexts[k]
            if turn == 0:
                _warn_if_budget_ends_episodes(episodes, budget, sampling.max_new_tokens)
            if not contexts:
                break
            generations, engine_stats = engine.generate(
                [Request(c, (nonce, k)) for k, c in contexts.items()], replace(sampling, seed=turn_seed(sampling.seed, turn))
            )
            _count(stats, engine_stats, turn)
            actions = [chat.tokenizer.decode(g.token_ids, skip_special_tokens=True) for g in generations]
            stepped = executor.run("step", [envs[k] for k in contexts], actions)
            stats["env_steps"] += len(contexts)
            for (k, context), g, action, (env, result) in zip(contexts.items(), generations, actions, stepped):
                envs[k] = env
                episodes[k].turns.append(Turn(action, g.token_ids, g.logprobs, g.finish_reason,
                                              context_ids=context if per_turn else None))
                _advance(episodes[k], result, chat, histories[k], last_turn=turn + 1 == config.max_turns)
        stats["env_seconds"] = executor.seconds
    _log_failures(episodes)
    context_tokens = stats["engine_prefill_tokens"] + stats["engine_cached_tokens"]
    stats.update(rollout_seconds=time.perf_counter() - start,
                 tokens_per_second=stats["engine_new_tokens"] / max(stats["engine_seconds"], 1e-9),
                 env_steps_per_second=stats["env_steps"] / max(stats["env_seconds"], 1e-9),
                 engine_cache_hit_rate=stats["engine_cached_tokens"] / max(context_tokens, 1))
    return episodes, dict(stats)


def _warn_if_budget_ends_episodes(episodes: list[Episode], budget: int | None, max_new_tokens: int) -> None:
    """Say so (once per budget) when the context budget ends a noticeable share of the episodes before their
    first turn: they get an empty completion and reward 0 whatever the model knows, so a budget set below
    the prompts (or a model too short for them) silently removes those tasks from training and evaluation."""
    cut = [e for e in episodes if e.finish_reason == "context_budget" and not e.turns]
    if budget is None or budget in _warned_budgets or len(cut) <= BUDGET_WARNING_SHARE * len(episodes):
        return
    _warned_budgets.add(budget)
    longest = max(len(e.prompt_ids) for e in cut)
    log.warning("rollout.max_context_tokens (%d) ends %d of %d episodes before their first turn (prompt + "
                "max_new_tokens %d > %d; the longest prompt has %d tokens): they score 0 with an empty completion. "
                "Raise rollout.max_context_tokens (auto: the model's positions), shorten the prompts "
                "(domain.max_prompt_chars) or lower max_new_tokens", budget, len(cut), len(episodes),
                max_new_tokens, budget, longest)


def _start(
    executor: Executor, envs: list[Environment], tasks: Sequence[Task], episodes: list[Episode],
    histories: list[list[Message] | None], chat: ChatFormat,
) -> list[Environment]:
    """Reset every environment; each episode's prompt ids are its first observation rendered as a user message."""
    prompts: dict[str, list[int]] = {}
    started = executor.run("reset", envs, [tasks[e.task_index] for e in episodes])
    for k, (env, first) in enumerate(started):
        envs[k] = env
        if isinstance(first, Failed):
            _fail(episodes[k], first)
            continue
        if first not in prompts:
            prompts[first] = chat.prompt_ids(first)
        episodes[k].prompt_ids = prompts[first]
        if episodes[k].per_turn:
            histories[k] = [Message("user", first)]
    return envs


def _count(stats: dict[str, float], engine: EngineStats, turn: int) -> None:
    stats["engine_seconds"] += engine.seconds
    stats["engine_new_tokens"] += engine.new_tokens
    stats["engine_prefill_tokens"] += engine.prefill_tokens
    stats["engine_cached_tokens"] += engine.cached_tokens
    stats[f"engine_prefill_tokens_turn_{turn}"] = float(engine.prefill_tokens)


def _context(episode: Episode, chat: ChatFormat, history: list[Message] | None) -> list[int]:
    """The tokens the next action continues: appended (append-only layout) or rendered by the template (per-turn)."""
    return episode.context_ids if history is None else chat.render(history)


def _advance(episode: Episode, result: Step | Failed, chat: ChatFormat, history: list[Message] | None, last_turn: bool) -> None:
    """Record one step's result on the episode's last turn; end the episode when it should end."""
    turn = episode.turns[-1]
    if isinstance(result, Failed):
        _fail(episode, result)
        return
    turn.reward = float(result.reward)
    for key, value in result.info.items():
        episode.info[key] = episode.info.get(key, 0.0) + float(value)
    truncated = turn.finish_reason == "length"
    if result.done:
        reason = "length" if truncated else (result.finish_reason or "done")
        _finish(episode, reason, result.score, out_of_budget=truncated or result.out_of_budget)
        if result.score is None:
            episode.answer = turn.action
    elif truncated or last_turn:  # out of tokens or turns: the environment's verdict on the last action if it gave one
        reason = "length" if truncated else "max_turns"  # (e.g. CAD grades every attempt), else unfinished
        _finish(episode, reason, result.score if result.score is not None else UNFINISHED, out_of_budget=True)
    else:
        turn.observation = result.observation
        if history is None:
            turn.observation_ids = chat.observation_ids(result.observation)
        else:
            history += [Message("assistant", turn.action), Message(chat.observation_role, result.observation)]


def _fail(episode: Episode, failure: Failed) -> None:
    _finish(episode, failure.status, Score(0.0, False, status=failure.status, message=failure.message))
    episode.error = failure.message


def _log_failures(episodes: Sequence[Episode]) -> None:
    failed = [e for e in episodes if e.error is not None]
    if failed:
        log.warning("%d of %d episodes ended by a failed environment call, e.g. %s", len(failed), len(episodes),
                    failed[0].error)


def _finish(episode: Episode, reason: str, score: Score | None, out_of_budget: bool = False) -> None:
    episode.finish_reason = reason
    episode.score = score
    episode.out_of_budget = out_of_budget or reason in LOOP_BUDGETS


def sample_episodes(
    policy: Policy, domain: Domain, tasks: Sequence[Task], samples: int, config: RolloutConfig,
    sampling: SamplingConfig, desc: str = "rollout",
) -> tuple[list[Episode], dict[str, float]]:
    """`run_episodes` with `rollout.engine` on `policy`, in the domain's environments; a `verifiers` environment
    drives the engine itself, through `vf-eval` against the policy's endpoint (`verifiers_episodes`)."""
    engine = make_engine(policy, config, desc)
    if isinstance(domain, VerifiersDomain):
        from rlvr_factory.rollout.verifiers_adapter import verifiers_episodes  # the endpoint's web stack, when used

        return verifiers_episodes(engine, policy.tokenizer, domain, tasks, samples, sampling)
    return run_episodes(engine, chat_format(policy.tokenizer, config), tasks, samples, environments_of(domain),
                        config, sampling, positions=max_positions(policy.model.config))


def make_engine(policy: Policy, config: RolloutConfig, desc: str = "rollout") -> Engine:
    """The engine `rollout.engine` names, holding the policy's current weights: a transformers engine on the
    policy itself (or its worker process, `rollout.background`), or the run's vLLM engine (started on first use, the weights pushed when they changed)."""
    if config.engine == "vllm":
        engine = shared_engine(policy, config.vllm)
        engine.sync(policy)
        return engine
    if config.background:
        return shared_background_engine(policy, config.background_threads, config.reuse_kv).bound(policy)
    return TransformersEngine(policy, reuse_kv=config.reuse_kv, desc=desc)


def push_weights(policy: Policy, config: RolloutConfig) -> float:
    """Push the policy's weights into the run's vLLM engine (or background worker) right after an update; the
    seconds it took (0 with the in-process transformers engine, which samples from the policy itself)."""
    if config.engine == "vllm":
        return shared_engine(policy, config.vllm).sync(policy)
    if config.background:
        return shared_background_engine(policy, config.background_threads, config.reuse_kv).sync(policy)
    return 0.0
