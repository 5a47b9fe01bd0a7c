"""The tables of a round: episodes -> `rollouts` -> `scored` -> update samples and round metrics.

A `rollouts` row is one episode (trajectory): the task and sample, the text and token ids of
its prompt and of everything after it, the loss mask (1 on the policy's tokens) and sampling
log-probs aligned with `completion_ids`, the turns (action, observation, reward, finish reason
and token counts of each), the summed step counters (`info`), how it ended, what decides its
reward: a verdict already given (`verdict`: the environment's, or the verify station's when
dynamic sampling scored the group) or the answer the verify station judges (`answer`), and what
a failed environment call said (`error`). `scored` adds the reward columns. The columns hold
lists and dicts; `round_batch.py` types them as nested Arrow columns on disk.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Sequence

import pandas as pd

from rlvr_factory.domains.base import Task
from rlvr_factory.rollout.episode import Episode
from rlvr_factory.training.grpo import Sample
from rlvr_factory.verifiers.score import Score, declared_components

EXCLUDED_STATUS = "infra_error"  # an infrastructure failure is never scored as a wrong answer
COUNTED = ("tool_calls", "tool_errors")  # step counters every multi-turn round reports, 0 when none happened


def _turns(episode: Episode) -> list[dict[str, Any]]:
    return [
        {"action": t.action, "observation": t.observation, "reward": float(t.reward), "finish_reason": t.finish_reason,
         "action_tokens": len(t.action_ids), "observation_tokens": len(t.observation_ids)}
        for t in episode.turns
    ]


def rollouts_frame(episodes: Sequence[Episode], tasks: Sequence[Task], round_index: int, policy_version: int) -> pd.DataFrame:
    """The `rollouts` table of a round's episodes (`task_index` points into `tasks`)."""
    task = [tasks[e.task_index] for e in episodes]
    return pd.DataFrame({
        "round": round_index,
        "task_id": [t.task_id for t in task],
        "domain": [t.domain for t in task],
        "sample_index": [e.sample_index for e in episodes],
        "prompt": [t.prompt for t in task],
        "completion": [e.text for e in episodes],
        "prompt_tokens": [len(e.prompt_ids) for e in episodes],
        "completion_tokens": [e.policy_tokens for e in episodes],
        "finish_reason": [e.finish_reason for e in episodes],
        "policy_version": policy_version,
        "prompt_ids": [e.prompt_ids for e in episodes],
        "completion_ids": [e.completion_ids for e in episodes],
        "loss_mask": [e.loss_mask for e in episodes],
        "logprobs": [e.logprobs for e in episodes],
        "num_turns": [len(e.turns) for e in episodes],
        "turns": [_turns(e) for e in episodes],
        "turn_prompt_ids": [[t.context_ids for t in e.turns] if e.per_turn else [] for e in episodes],
        "info": [dict(sorted(e.info.items())) for e in episodes],
        "out_of_budget": [e.out_of_budget for e in episodes],
        "answer": [e.answer for e in episodes],
        "verdict": [asdict(e.score) if e.score is not None else None for e in episodes],
        "error": [e.error for e in episodes],
    })


def verdicts(rollouts: pd.DataFrame) -> list[Score | None]:
    """Each row's verdict already given, or None where the verify station judges its `answer`."""
    return [Score(**v) if isinstance(v, dict) else None for v in rollouts["verdict"]]


def scored_frame(rollouts: pd.DataFrame, scores: Sequence[Score]) -> pd.DataFrame:
    """The `scored` table: the rollouts with each episode's reward, correctness, breakdown (the verdict's
    and the episode's step counters) and status (no timings: a rerun writes the same bytes)."""
    infos = list(rollouts["info"]) if "info" in rollouts else [{}] * len(scores)
    return rollouts.assign(
        reward=[s.reward for s in scores],
        correct=[s.correct for s in scores],
        reward_breakdown=[dict(sorted({**s.breakdown, **info}.items())) for s, info in zip(scores, infos)],
        status=[s.status for s in scores],
    )


def usable_rows(scored: pd.DataFrame) -> pd.DataFrame:
    """The rows whose verdict counts: every status but `infra_error`."""
    return scored[scored["status"] != EXCLUDED_STATUS]


def _row_samples(r: Any) -> list[Sample]:
    """One episode's update samples: the whole trajectory, or one per turn (per-turn layout)."""
    truncated = r.finish_reason == "length"
    components = declared_components(getattr(r, "reward_breakdown", None) or {})
    if not hasattr(r, "turns"):  # a table from before trajectories: one single-turn sample
        return [Sample(str(r.task_id), list(r.prompt_ids), list(r.completion_ids), float(r.reward), str(r.domain), truncated,
                       components=components)]
    turns = r.turns
    rewards = [float(t["reward"]) for t in turns]
    token_turns = [i for i, t in enumerate(turns) for _ in range(t["action_tokens"] + t["observation_tokens"])]
    completion = list(r.completion_ids)
    logprobs = [float(x) for x in r.logprobs] if hasattr(r, "logprobs") else None
    if len(r.turn_prompt_ids) == 0:
        return [Sample(str(r.task_id), list(r.prompt_ids), completion, float(r.reward), str(r.domain), truncated,
                       list(r.loss_mask), token_turns, rewards, components=components, sampling_logprobs=logprobs)]
    episode, samples, at = f"{r.task_id}#{r.sample_index}", [], 0
    for i, (turn, context) in enumerate(zip(turns, r.turn_prompt_ids)):
        span = slice(at, at + turn["action_tokens"])
        at += turn["action_tokens"]
        samples.append(Sample(str(r.task_id), list(context), completion[span], float(r.reward), str(r.domain), truncated,
                              turn_rewards=[sum(rewards[i:])], episode=episode, components=components,
                              sampling_logprobs=logprobs[span] if logprobs is not None else None))
    return samples


def samples_from_scored(scored: pd.DataFrame) -> list[Sample]:
    """Update samples from the usable rows (infrastructure failures are left out of the loss)."""
    return [s for r in usable_rows(scored).itertuples(index=False) for s in _row_samples(r)]


def _summary(rows: pd.DataFrame) -> dict[str, float]:
    return {
        "reward_mean": float(rows["reward"].mean()) if len(rows) else 0.0,
        "pass_rate": float(rows["correct"].mean()) if len(rows) else 0.0,
        "completion_tokens_mean": float(rows["completion_tokens"].mean()) if len(rows) else 0.0,
    }


def episode_metrics(rows: pd.DataFrame, max_turns: int) -> dict[str, float]:
    """Multi-turn round metrics over episodes: turns and step counters per episode (`<counter>_per_episode`),
    the share ended by a budget, and per number of turns used the share of episodes and their pass rate."""
    if not len(rows):
        return {}
    infos = pd.DataFrame(list(rows["info"]), index=rows.index).fillna(0.0)
    metrics = {
        "turns_per_episode": float(rows["num_turns"].mean()),
        "ended_by_budget_fraction": float(rows["out_of_budget"].mean()),
        **{f"{key}_per_episode": float(infos[key].sum() / len(rows)) if key in infos else 0.0
           for key in sorted(set(COUNTED) | set(infos.columns))},
    }
    for turns in range(1, max_turns + 1):
        used = rows[rows["num_turns"] == turns]
        metrics[f"episodes_fraction/turns_{turns}"] = len(used) / len(rows)
        if len(used):
            metrics[f"pass_rate/turns_{turns}"] = float(used["correct"].mean())
    return metrics


def round_metrics(scored: pd.DataFrame, max_turns: int = 1) -> dict[str, float]:
    """Reward mean, pass rate, completion length and truncation over the usable rows, counts of
    verifier failures and groups without a reward spread, the first three per domain
    (`<domain>.reward_mean` ...), and for multi-turn runs (`max_turns > 1`) `episode_metrics`."""
    usable = usable_rows(scored)
    by_status = scored["status"].value_counts()
    spread = usable.groupby("task_id")["reward"].agg(lambda r: r.max() - r.min())
    metrics = {
        **_summary(usable),
        "truncated_fraction": float((usable["finish_reason"] == "length").mean()) if len(usable) else 0.0,
        "infra_errors": int(by_status.get(EXCLUDED_STATUS, 0)),
        "timeouts": int(by_status.get("timeout", 0)),
        "zero_variance_groups": int((spread == 0).sum()),
    }
    if max_turns > 1:
        metrics.update(episode_metrics(usable, max_turns))
    for domain, rows in usable.groupby("domain", sort=True):
        metrics.update({f"{domain}.{k}": v for k, v in _summary(rows).items()})
    return metrics


def observed_pass_rates(scored: pd.DataFrame) -> dict[str, float]:
    """Each task's fraction of correct samples this round (usable rows only)."""
    return usable_rows(scored).groupby("task_id")["correct"].mean().astype(float).to_dict()
