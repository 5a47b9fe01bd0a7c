"""RL rounds: rollout -> verify -> update, each a node; the pipeline unrolls them per round."""

from __future__ import annotations

import json
import logging
import random
import time

import pandas as pd

from rlvr_factory.domains import get_domain, tasks_from_frame
from rlvr_factory.evaluation import greedy_accuracy
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.hf import SamplingConfig, generate
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from rlvr_factory.training.lm import lr_factor, seed_everything
from rlvr_factory.verification import verify_batch

log = logging.getLogger(__name__)
# Operational stats (wall-clock timings, the verifier pool's counters, which depend on what the
# process verified before) go to MLflow but not into the reproducible round history.
OPERATIONAL_KEYS = ("rollout_seconds", "update_seconds", "eval_seconds", "tokens_per_second")
OPERATIONAL_PREFIX = "verify_"


def round_seed(rl: dict, round_index: int) -> int:
    """The seed of one round, derived from `rl.seed` so every round samples afresh."""
    return rl["seed"] * 100_003 + round_index


def round_lr(rl: dict, round_index: int) -> float:
    """`rl.update.lr`, decayed over the rounds by `rl.lr_schedule` (cosine, linear or constant)."""
    return rl["update"]["lr"] * lr_factor(rl["lr_schedule"], round_index, 0, rl["rounds"] - 1)


def reference_model(sft_policy: Policy) -> Policy:
    """The frozen reference for the KL term: the SFT policy, loaded once for all rounds."""
    sft_policy.model.requires_grad_(False)
    return sft_policy


def rollout(policy: Policy, train_tasks: pd.DataFrame, rl: dict, round_index: int) -> tuple[pd.DataFrame, dict]:
    """Sample `rl.samples_per_prompt` completions for each of `rl.prompts_per_round` train prompts."""
    seed = round_seed(rl, round_index)
    tasks = random.Random(seed).sample(tasks_from_frame(train_tasks), rl["prompts_per_round"])
    completions, timing = generate(
        policy, [t.prompt for t in tasks], rl["samples_per_prompt"],
        SamplingConfig(**rl["sampling"], seed=seed), desc=f"round {round_index} rollout",
    )
    frame = pd.DataFrame(
        {
            "round": round_index,
            "task_id": [tasks[c.prompt_index].task_id for c in completions],
            "sample_index": [c.sample_index for c in completions],
            "prompt": [tasks[c.prompt_index].prompt for c in completions],
            "completion": [c.text for c in completions],
            "prompt_tokens": [len(c.prompt_ids) for c in completions],
            "completion_tokens": [len(c.completion_ids) for c in completions],
            "finish_reason": [c.finish_reason for c in completions],
            "policy_version": policy.version,
            "prompt_ids": [c.prompt_ids for c in completions],
            "completion_ids": [c.completion_ids for c in completions],
        }
    )
    return frame, {"rollout_seconds": timing["seconds"], "tokens_per_second": timing["tokens_per_second"]}


def verify(rollouts: pd.DataFrame, train_tasks: pd.DataFrame, domain: dict, verify: dict) -> tuple[pd.DataFrame, dict]:
    """Score every completion with the domain's verifier through the pool (the `scored` table).

    `verify_ms` is the batch's verification time shared out per completion. The stats carry the
    pool's counters and the scheduler's metrics over the batch (`verify_scheduler_*`: jobs per
    second, retries, timeouts, infra failures, peak queue depth and in-flight, utilisation); a
    check that failed for infrastructure reasons on every attempt has status `infra_error`.
    """
    references = dict(zip(train_tasks["task_id"], train_tasks["reference"].map(json.loads)))
    start = time.perf_counter()
    scores, pool_stats = verify_batch(
        get_domain(domain), list(rollouts["completion"]), [references[t] for t in rollouts["task_id"]], verify
    )
    seconds = time.perf_counter() - start
    scored = rollouts.assign(
        reward=[s.reward for s in scores],
        correct=[s.correct for s in scores],
        reward_breakdown=[json.dumps(s.breakdown, sort_keys=True) for s in scores],
        status=[s.status for s in scores],
        verify_ms=1000 * seconds / max(1, len(scores)),
    )
    return scored, {"verify_seconds": seconds, **{f"verify_{k}": v for k, v in pool_stats.items()}}


def update(
    policy: Policy, scored: pd.DataFrame, validation_tasks: pd.DataFrame, rollout_stats: dict,
    verify_stats: dict, domain: dict, verify: dict, rl: dict, evaluate: dict, reference: Policy | None = None, *,
    round_index: int,
) -> tuple[Policy, dict, dict]:
    """One GRPO update on the round's scored rollouts, then the round's held-out accuracy.

    Samples whose verification hit an infrastructure failure are left out of the loss
    and counted. Returns the updated policy, the round's stats, and those stats as an
    MLflow metric history entry (step = round).
    """
    seed = round_seed(rl, round_index)
    seed_everything(seed)
    usable = scored[scored["status"] != "infra_error"]
    samples = [
        Sample(r.task_id, list(r.prompt_ids), list(r.completion_ids), float(r.reward))
        for r in usable.itertuples(index=False)
    ]
    start = time.perf_counter()
    config = UpdateConfig(**{**rl["update"], "lr": round_lr(rl, round_index)}, seed=seed)
    stats = rl_update(policy, samples, config, reference.model if reference else None)
    update_seconds = time.perf_counter() - start
    start = time.perf_counter()
    val_tasks = tasks_from_frame(validation_tasks)[: evaluate["validation_size"]]
    val_accuracy = greedy_accuracy(
        policy, val_tasks, get_domain(domain), verify, SamplingConfig(**evaluate["sampling"])
    )
    by_status = scored["status"].value_counts()
    stats.update(
        round=round_index,
        lr=config.lr,
        reward_mean=float(scored["reward"].mean()),
        pass_rate=float(scored["correct"].mean()),
        completion_tokens_mean=float(scored["completion_tokens"].mean()),
        truncated_fraction=float((scored["finish_reason"] == "length").mean()),
        infra_errors=int(by_status.get("infra_error", 0)),
        timeouts=int(by_status.get("timeout", 0)),
        val_greedy_accuracy=val_accuracy,
        update_seconds=update_seconds,
        eval_seconds=time.perf_counter() - start,
        **rollout_stats,
        **verify_stats,
    )
    log.info(
        "round %d: reward %.3f, pass rate %.3f, val greedy acc %.3f, entropy %.3f",
        round_index, stats["reward_mean"], stats["pass_rate"], val_accuracy, stats["entropy"],
    )
    history = {k: {"value": float(v), "step": round_index} for k, v in stats.items() if k != "round"}
    return policy, stats, history


def summarize_rounds(*round_stats: dict) -> list[dict]:
    """All rounds' stats in order, without operational stats (so reruns compare byte for byte)."""
    return [
        {k: v for k, v in s.items() if k not in OPERATIONAL_KEYS and not k.startswith(OPERATIONAL_PREFIX)}
        for s in sorted(round_stats, key=lambda s: s["round"])
    ]
