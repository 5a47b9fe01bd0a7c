"""RL rounds: rollout -> verify -> update, each a node; the round loop runs them once per round."""

from __future__ import annotations

import copy
import logging
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import wraps
from dataclasses import dataclass, replace

import pandas as pd

from rlvr_factory import distributed
from rlvr_factory.domain_report import without_domain_curves
from rlvr_factory.domains import DomainConfig, Task, get_domain, references_of, tasks_from_frame
from rlvr_factory.evaluation import greedy_solved
from rlvr_factory.models.lora import with_lora
from rlvr_factory.models.policy import Policy, freeze
from rlvr_factory.overoptimisation import component_stats
from rlvr_factory.parameters import EvaluateConfig, ModelConfig, RLConfig
from rlvr_factory.rl.curriculum import prompt_order, update_pass_rates
from rlvr_factory.round_files import each_round
from rlvr_factory.rollout.agent_loop import RolloutConfig, make_engine, push_weights, sample_episodes
from rlvr_factory.rollout.background import rollout_collected, rollout_started_ahead, running_ahead, sharing_cores
from rlvr_factory.rollout.dynamic import draw_groups
from rlvr_factory.training.grpo import rl_update
from rlvr_factory.training.domain_levels import level_prompt_order, level_stats, track_domain_levels
from rlvr_factory.training.lm import lr_factor, seed_everything
from rlvr_factory.training.rounds import (
    EXCLUDED_STATUS, observed_pass_rates, rollouts_frame, round_metrics, samples_from_scored, scored_frame, verdicts,
)
from rlvr_factory.verification import VerifyConfig, judge_sharded

log = logging.getLogger(__name__)
# Operational stats (wall-clock timings, the verifier pool's counters, which depend on what the
# process verified before, the engine's token counts) go to MLflow but not into the round's stats
# on disk, so a rerun of the same commit and configuration writes the same bytes.
OPERATIONAL_KEYS = ("rollout_seconds", "rollout_wait_seconds", "rollout_ahead_seconds", "update_seconds",
                    "update_threads", "policy_version",
                    "eval_seconds", "tokens_per_second", "env_seconds", "env_steps_per_second")
OPERATIONAL_PREFIX = ("verify_", "engine_")


def round_seed(rl: RLConfig, round_index: int) -> int:
    """The seed of one round, derived from `rl.seed` so every round samples afresh."""
    return rl.seed * 100_003 + round_index


def round_lr(rl: RLConfig, round_index: int) -> float:
    """`rl.update.lr`, decayed over the rounds by `rl.lr_schedule` (cosine, linear or constant)."""
    return rl.update.lr * lr_factor(rl.lr_schedule, round_index, 0, rl.rounds - 1)


def initial_policy(sft_policy: Policy, model: ModelConfig) -> Policy:
    """The policy round 0 trains: the SFT policy, with LoRA adapters when `model.lora.enabled`."""
    distributed.broadcast_parameters(sft_policy.model)  # data-parallel ranks start from rank 0's weights
    return Policy(with_lora(sft_policy.model, model.lora), sft_policy.tokenizer, sft_policy.version,
                  sft_policy.optimizer_state)


@dataclass
class Prefetched:
    """A round's rollout, started by the previous round before its update (asynchronous rounds)."""

    round_index: int
    future: Future
    started: float
    behaviour: Policy | None = None  # the frozen copy it samples from (the next round's validation reads it too)


_AHEAD = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-rollout-ahead")


def frozen_copy(policy: Policy) -> Policy:
    """A copy of the policy that no update changes: what a rollout running beside the update samples from."""
    return Policy(freeze(copy.deepcopy(policy.model)), policy.tokenizer, policy.version)


def prefetch_rollout(
    policy: Policy, train_tasks: pd.DataFrame, rl: RLConfig, domain: DomainConfig, verify: VerifyConfig,
    rollout_params: RolloutConfig, pass_rates: pd.DataFrame, domain_levels: pd.DataFrame, *, round_index: int,
) -> Prefetched:
    """Start round `round_index`'s rollout in a background thread, from a frozen copy of `policy` (the
    policy the previous round is about to update) and the curriculum state after the previous round.

    It samples through the engine's worker process (`rollout.background`), so it runs while the update
    trains; the round's `rollout` node collects it. The result is the same as the same rollout run
    after the update on that copy: nothing in it depends on timing.
    """
    behaviour = frozen_copy(policy)
    rollout_started_ahead()  # the update that follows trains on the cores this rollout leaves (sharing_cores)
    future = _AHEAD.submit(_ahead(rollout), behaviour, train_tasks, rl, domain, verify, rollout_params, pass_rates,
                           domain_levels, round_index=round_index)
    return Prefetched(round_index, future, time.perf_counter(), behaviour)


def _ahead(func):
    """`func` (a rollout or a validation the background thread runs), marked as running ahead of its round:
    the worker samples it on `rollout.background_threads`."""
    @wraps(func)
    def run(*args, **kwargs):
        with running_ahead():
            return func(*args, **kwargs)
    return run


def collect_rollout(prefetched: Prefetched, *, round_index: int) -> tuple[pd.DataFrame, dict]:
    """The rollout the previous round started (asynchronous rounds), waited for; the stats add how long
    this round waited for it (`rollout_wait_seconds`: 0 when sampling took no longer than the update)."""
    if prefetched.round_index != round_index:
        raise ValueError(f"round {round_index} was handed the rollout of round {prefetched.round_index}")
    start = time.perf_counter()
    try:
        frame, stats = prefetched.future.result()
    finally:
        rollout_collected()
    return frame, {**stats, "rollout_wait_seconds": time.perf_counter() - start,
                   "rollout_ahead_seconds": time.perf_counter() - prefetched.started}


def _prompt_order(
    tasks: list, rl: RLConfig, seed: int, pass_rates: pd.DataFrame | None, domain_levels: pd.DataFrame | None
) -> list[int]:
    """Which train prompts the round draws, in order: a seeded sample, the curriculum's order, or the
    per-domain curriculum's (each domain at its level, weighted by its learning signal)."""
    rng = random.Random(seed)
    curriculum = rl.curriculum
    rates = dict(zip(pass_rates["task_id"], pass_rates["pass_rate"])) if pass_rates is not None else {}
    if curriculum.levels.enabled:
        return level_prompt_order(tasks, rates, domain_levels, curriculum, rng)
    if not curriculum.enabled:
        wanted = len(tasks) if rl.dynamic_sampling.enabled else rl.prompts_per_round
        return rng.sample(range(len(tasks)), wanted)
    return prompt_order(
        [rates.get(t.task_id) for t in tasks], [t.difficulty for t in tasks], rng,
        curriculum.band, curriculum.band_fraction, curriculum.difficulty_weights,
    )


def rollout(
    policy: Policy, train_tasks: pd.DataFrame, rl: RLConfig, domain: DomainConfig, verify: VerifyConfig,
    rollout: RolloutConfig, pass_rates: pd.DataFrame | None = None, domain_levels: pd.DataFrame | None = None, *,
    round_index: int,
) -> tuple[pd.DataFrame, dict]:
    """Run `rl.samples_per_prompt` episodes on each of `rl.prompts_per_round` train tasks (the agent loop;
    `rollout.*` sets turns, context budget and environment execution).

    Prompts come in a seeded order, or the curriculum's when `rl.curriculum.enabled` (from
    the pass rates tracked up to the previous round). With `rl.dynamic_sampling.enabled`,
    groups whose rewards are all equal are dropped and more prompts drawn (DAPO). Data-parallel,
    each rank samples and scores its share of the prompts; every rank gets the whole round.
    """
    seed = round_seed(rl, round_index)
    tasks = tasks_from_frame(train_tasks)
    order = _prompt_order(tasks, rl, seed, pass_rates, domain_levels)
    env = get_domain(domain)
    if rollout.engine == "vllm" and distributed.world_size() > 1:
        make_engine(policy, rollout)  # every rank's engine, started together (a collective), before any rank samples

    def run(indices: list[int], draw_seed: int) -> tuple[list, dict]:
        return sample_episodes(policy, env, [tasks[i] for i in indices], rl.samples_per_prompt, rollout,
                               replace(rl.sampling, seed=draw_seed), desc=f"round {round_index} rollout")

    def score(indices: list[int], episodes: list) -> list[float]:
        scores, _ = judge_sharded(env, [e.score for e in episodes], [e.answer for e in episodes],
                                  [tasks[indices[e.task_index]].reference for e in episodes], verify)
        for episode, verdict in zip(episodes, scores):  # kept in the table: `verify` judges only the rest
            if episode.score is None and verdict.status != EXCLUDED_STATUS:  # an infra failure is tried again
                episode.score = verdict
        return [s.reward for s in scores]

    drawn = draw_groups(distributed.shard_run(run), order, rl.prompts_per_round, seed, score, rl.dynamic_sampling)
    frame = rollouts_frame(drawn.episodes, [tasks[i] for i in drawn.prompt_indices], round_index, policy.version)
    return frame, drawn.stats


def track_pass_rates(scored: pd.DataFrame, rl: RLConfig, previous: pd.DataFrame | None = None) -> pd.DataFrame:
    """Every task's online pass-rate estimate after this round (the curriculum's state, persisted
    per round so a resumed run continues with it)."""
    before = dict(zip(previous["task_id"], previous["pass_rate"])) if previous is not None else {}
    rates = update_pass_rates(before, observed_pass_rates(scored), rl.curriculum.pass_rate_ema)
    return pd.DataFrame({"task_id": sorted(rates), "pass_rate": [rates[t] for t in sorted(rates)]})


def track_levels(
    scored: pd.DataFrame, train_tasks: pd.DataFrame, rl: RLConfig, previous: pd.DataFrame | None = None, *,
    round_index: int,
) -> pd.DataFrame:
    """Each domain's curriculum level and online pass rate after this round, and its weight for the
    next (the per-round domain table, logged to MLflow; read by the next round's rollout)."""
    return track_domain_levels(scored, tasks_from_frame(train_tasks), rl.curriculum, previous, round_index)


def verify(
    rollouts: pd.DataFrame, train_tasks: pd.DataFrame, domain: DomainConfig, verify: VerifyConfig,
) -> tuple[pd.DataFrame, dict]:
    """The `scored` table: each episode's verdict, the one it already has (its environment's, or the
    pool's when dynamic sampling scored its group in the rollout) or (for the answers left to it) the
    domain's verifier's through the pool, in one batch.

    The stats (operational, for MLflow) carry the batch's verification time, the pool's counters
    and the scheduler's metrics over the batch (`verify_scheduler_*`: jobs per
    second, retries, timeouts, infra failures, peak queue depth and in-flight, utilisation); a
    check that failed for infrastructure reasons on every attempt has status `infra_error`.
    Data-parallel, each rank verifies its share of the rows (the pool stats are its own share's).
    """
    start = time.perf_counter()
    scores, pool_stats = judge_sharded(
        get_domain(domain), verdicts(rollouts), list(rollouts["answer"]), references_of(train_tasks, rollouts["task_id"]),
        verify,
    )
    seconds = time.perf_counter() - start
    return scored_frame(rollouts, scores), {"verify_seconds": seconds, **{f"verify_{k}": v for k, v in pool_stats.items()}}


def update(
    policy: Policy, scored: pd.DataFrame, validation_tasks: pd.DataFrame, rollout_stats: dict,
    verify_stats: dict, pass_rates: pd.DataFrame, domain_levels: pd.DataFrame, domain: DomainConfig, verify: VerifyConfig,
    rl: RLConfig, evaluate: EvaluateConfig, rollout: RolloutConfig, reference: Policy | None = None, *,
    round_index: int, validate: bool = True,
) -> tuple[Policy, dict, dict] | tuple[Policy, dict]:
    """One policy-gradient update on the round's scored rollouts, then the round's held-out accuracy.

    Samples whose verification hit an infrastructure failure are left out of the loss
    and counted. `pass_rates` (the curriculum's state after this round) is summarised in the
    stats. Returns the updated policy, the round's stats (without operational ones: timings and
    pool counters), and all of them as an MLflow metric history entry (step = round).

    With `validate=False` (asynchronous rounds whose validation runs ahead, in the background worker:
    `validate_ahead`), it returns the policy and all the round's stats but the validation's, which
    `finish_round` adds.
    """
    seed = round_seed(rl, round_index)
    seed_everything(seed)
    staleness = policy.version - int(scored["policy_version"].min()) if len(scored) else 0
    if staleness > rl.max_staleness:
        raise ValueError(
            f"round {round_index}: the rollouts come from policy version {int(scored['policy_version'].min())}, "
            f"{staleness} updates behind the policy version {policy.version} being trained, over "
            f"rl.max_staleness={rl.max_staleness}"
        )
    samples = samples_from_scored(scored)
    if not samples:
        raise ValueError(
            f"round {round_index}: all {len(scored)} verifications failed with infra_error; nothing to train on. "
            "Fix the verifier infrastructure and resume from the last checkpoint."
        )
    start = time.perf_counter()
    # the behaviour policy is older than the trained one with asynchronous rounds: correct for it (TIS)
    config = replace(rl.update, lr=round_lr(rl, round_index), seed=seed,
                     engine_is_correction=rl.update.engine_is_correction or rl.max_staleness > 0)
    episodes = rollout
    # beside a rollout running ahead, on the cores it leaves; else on all (a rule of the round's wiring, not of timing)
    with sharing_cores(episodes.background_threads) as trainer_threads:
        stats = rl_update(policy, samples, config, reference.model if reference else None)
    if rl.checkpoint_every and (round_index + 1) % rl.checkpoint_every == 0:  # this round's policy goes to disk
        policy.optimizer_state = distributed.whole_optimizer_state(policy.optimizer_state)
    update_seconds = time.perf_counter() - start
    if rl.max_staleness > 0:
        # the next round's rollout may be sampling right now, on the engine: it syncs the weights it samples
        # from itself, and this round's validation runs on the trained policy in this process
        episodes = replace(episodes, engine="transformers", background=False)
        stats["engine_weight_sync_seconds"] = 0.0
    else:
        stats["engine_weight_sync_seconds"] = push_weights(policy, episodes)
    band = rl.curriculum.band
    stats.update(
        round=round_index,
        lr=config.lr,
        **({"staleness": staleness} if rl.max_staleness > 0 else {}),
        **round_metrics(scored, episodes.max_turns),
        **component_stats(scored),  # proxy vs gold when the reward is learned (overoptimisation.py)
        **level_stats(domain_levels),
        tracked_tasks=len(pass_rates),
        tracked_in_band_fraction=float(pass_rates["pass_rate"].between(*band).mean()) if len(pass_rates) else 0.0,
        update_seconds=update_seconds,
        update_threads=trainer_threads,
        policy_version=policy.version,
        **rollout_stats,
        **verify_stats,
    )
    here, ahead = _validation_split(validation_tasks, evaluate, rl if not validate else None)
    start = time.perf_counter()
    with sharing_cores(episodes.background_threads):
        solved = _solved(policy, here, domain, verify, evaluate, episodes)
    if not validate:  # the rest (`ahead`) the worker validates: finish_round adds these two
        return policy, {**stats, SOLVED_HERE: solved, SECONDS_HERE: time.perf_counter() - start}
    return policy, *finish_round(
        stats, {"val_greedy_accuracy": solved / len(here), "eval_seconds": time.perf_counter() - start}, domain_levels,
        rl)


# The part of a round's validation its update ran itself, beside the worker validating the rest (`finish_round`).
SOLVED_HERE, SECONDS_HERE = "_val_solved_in_update", "_val_seconds_in_update"


def _validation_split(
    validation_tasks: pd.DataFrame, evaluate: EvaluateConfig, rl: RLConfig | None,
) -> tuple[list[Task], list[Task]]:
    """The first `evaluate.validation_size` validation tasks: those the update validates and those the
    background worker validates ahead (asynchronous rounds, `rl` given: the last `rl.validation_ahead_share`
    of them; else none)."""
    tasks = tasks_from_frame(validation_tasks)[: evaluate.validation_size]
    if not tasks:
        raise ValueError("the validation split is empty: nothing to validate the rounds on")
    here = len(tasks) - (round(rl.validation_ahead_share * len(tasks)) if rl is not None else 0)
    return tasks[:here], tasks[here:]


def _solved(policy: Policy, tasks: list[Task], domain: DomainConfig, verify: VerifyConfig, evaluate: EvaluateConfig,
            episodes: RolloutConfig) -> int:
    """How many of `tasks` the policy's greedy episode solves."""
    return greedy_solved(policy, tasks, get_domain(domain), verify, evaluate.sampling, episodes)


@dataclass
class ValidationAhead:
    """A round's validation, running in the background thread after the next rollout ahead (asynchronous rounds)."""

    round_index: int
    future: Future  # (tasks solved, seconds)
    policy_version: int  # of the weights it validates: finish_round checks they are the ones the round's update wrote
    tasks: int  # the round's validation tasks, those its update validated included


def validate_ahead(
    policy: Policy, validation_tasks: pd.DataFrame, domain: DomainConfig, verify: VerifyConfig, evaluate: EvaluateConfig,
    rollout: RolloutConfig, rl: RLConfig, prefetched: Prefetched | None = None, *, round_index: int,
) -> ValidationAhead:
    """Start round `round_index`'s validation, of `policy` (the policy that round's update wrote, which the
    round after it starts from), in the background thread, behind the rollout running ahead.

    Asynchronous rounds: with staleness 1 the next rollout ahead samples from these very weights, so the
    worker validates them right after it samples, from the same frozen copy (`prefetched.behaviour`, else a
    copy of its own), while the round after trains in this process. The result is the one `update` would
    have computed on that policy: greedy decoding of the same weights on the same tasks and threads.
    The worker takes the last `rl.validation_ahead_share` of the tasks; the round's update validated the
    others right after it trained, on the cores the worker leaves, so neither side waits long for the other.
    """
    frozen = prefetched.behaviour if prefetched is not None and prefetched.behaviour is not None else frozen_copy(policy)
    rollout_started_ahead()  # pending like a rollout ahead: the update beside it trains on the cores it leaves
    here, ahead = _validation_split(validation_tasks, evaluate, rl)
    future = _AHEAD.submit(_timed(_ahead(_solved)), frozen, ahead, domain, verify, evaluate, rollout)
    return ValidationAhead(round_index, future, frozen.version, len(here) + len(ahead))


def prefetch_and_validate_ahead(
    policy: Policy, train_tasks: pd.DataFrame, rl: RLConfig, domain: DomainConfig, verify: VerifyConfig,
    rollout_params: RolloutConfig, pass_rates: pd.DataFrame, domain_levels: pd.DataFrame,
    validation_tasks: pd.DataFrame, evaluate: EvaluateConfig, *, round_index: int,
) -> tuple[Prefetched, ValidationAhead]:
    """`prefetch_rollout` for round `round_index`, then `validate_ahead` for round `round_index - 2` behind it,
    from the same frozen copy, in one node (so the update that follows is the next node to run)."""
    prefetched = prefetch_rollout(policy, train_tasks, rl, domain, verify, rollout_params, pass_rates, domain_levels,
                                  round_index=round_index)
    return prefetched, validate_ahead(policy, validation_tasks, domain, verify, evaluate, rollout_params, rl,
                                      prefetched, round_index=round_index - 2)


def _timed(func):
    """`func` returning its result and the seconds it took."""
    @wraps(func)
    def run(*args, **kwargs):
        start = time.perf_counter()
        return func(*args, **kwargs), time.perf_counter() - start
    return run


def finish_round(
    stats: dict, validation: dict | ValidationAhead, domain_levels: pd.DataFrame, rl: RLConfig, *_after: object,
) -> tuple[dict, dict]:
    """The round's stats with its validation (`val_greedy_accuracy`, `eval_seconds`), as `update` returns them:
    without operational ones, and all of them as an MLflow metric history entry (step = round).

    `validation` is the computed one, or a `ValidationAhead` waited for here (`_after`: ordering inputs, so
    the round after this one has trained before this node waits)."""
    if isinstance(validation, ValidationAhead):
        if validation.round_index != stats["round"]:
            raise ValueError(f"round {stats['round']} was handed the validation of round {validation.round_index}")
        if validation.policy_version != stats["policy_version"]:
            raise ValueError(f"round {stats['round']}'s validation ran on policy version {validation.policy_version}, "
                             f"not the version {stats['policy_version']} its update wrote")
        try:
            solved, seconds = validation.future.result()
        finally:
            rollout_collected()
        stats = dict(stats)
        validation = {"val_greedy_accuracy": (stats.pop(SOLVED_HERE) + solved) / validation.tasks,
                      "eval_seconds": stats.pop(SECONDS_HERE) + seconds}
    stats = _with_validation(stats, validation)
    curves = without_domain_curves(stats, set(domain_levels["domain"]), rl.domain_curves_max)
    history = {k: {"value": float(v), "step": stats["round"]} for k, v in curves.items() if k != "round"}
    return _reproducible(stats), history


def _with_validation(stats: dict, validation: dict) -> dict:
    """`stats` with the validation's keys where a validating `update` puts them (the accuracy before
    `update_seconds`, its seconds after `update_threads`), so round stats keep their bytes either way."""
    out: dict = {}
    for key, value in stats.items():
        if key == "update_seconds":
            out["val_greedy_accuracy"] = validation["val_greedy_accuracy"]
        out[key] = value
        if key == "update_threads":
            out["eval_seconds"] = validation["eval_seconds"]
    return {**out, **validation}


def _reproducible(stats: dict) -> dict:
    """The stats without operational ones, which differ from run to run of the same configuration."""
    return {k: v for k, v in stats.items() if k not in OPERATIONAL_KEYS and not k.startswith(OPERATIONAL_PREFIX)}


def summarize_rounds(round_stats: dict, rl: RLConfig) -> list[dict]:
    """All `rl.rounds` rounds' stats (the per-round files) in order, without operational stats (so reruns
    compare byte for byte)."""
    return [_reproducible(s) for s in each_round(round_stats, rl.rounds, "round stats")]
