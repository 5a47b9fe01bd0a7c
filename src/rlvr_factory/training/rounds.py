"""From a round's scored rollouts (the `scored` table) to update samples and round metrics."""

from __future__ import annotations

import json

import pandas as pd

from rlvr_factory.training.grpo import Sample
from rlvr_factory.verifiers.score import declared_components

EXCLUDED_STATUS = "infra_error"  # an infrastructure failure is never scored as a wrong answer


def usable_rows(scored: pd.DataFrame) -> pd.DataFrame:
    """The rows whose verdict counts: every status but `infra_error`."""
    return scored[scored["status"] != EXCLUDED_STATUS]


def samples_from_scored(scored: pd.DataFrame) -> list[Sample]:
    """Update samples from the usable rows (infrastructure failures are left out of the loss)."""
    return [
        Sample(str(r.task_id), list(r.prompt_ids), list(r.completion_ids), float(r.reward), str(r.domain),
               r.finish_reason == "length", declared_components(json.loads(r.reward_breakdown)))
        for r in usable_rows(scored).itertuples(index=False)
    ]


def _summary(rows: pd.DataFrame) -> dict[str, float]:
    return {
        "reward_mean": float(rows["reward"].mean()) if len(rows) else 0.0,
        "pass_rate": float(rows["correct"].mean()) if len(rows) else 0.0,
        "completion_tokens_mean": float(rows["completion_tokens"].mean()) if len(rows) else 0.0,
    }


def round_metrics(scored: pd.DataFrame) -> dict[str, float]:
    """Reward mean, pass rate, completion length and truncation over the usable rows, counts of
    verifier failures and groups without a reward spread, and the first three per domain
    (`<domain>.reward_mean` ...)."""
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
    for domain, rows in usable.groupby("domain", sort=True):
        metrics.update({f"{domain}.{k}": v for k, v in _summary(rows).items()})
    return metrics


def observed_pass_rates(scored: pd.DataFrame) -> dict[str, float]:
    """Each task's fraction of correct samples this round (usable rows only)."""
    return usable_rows(scored).groupby("task_id")["correct"].mean().astype(float).to_dict()
