"""Verify a batch of completions of one domain through a verifier pool on the task scheduler.

One pool per verifier configuration lives for the whole process: its workers start when a
symbolic check is first needed and then serve every later batch (rollouts of each round,
validation, evaluation), and its cache spans the run. The pools close at exit.

The `verify` parameters are a `VerifyConfig`: `workers`, `timeout_seconds`, `max_input_chars`, and
`scheduler` (`backend`: local|ray, `retry`, `ray`: {address, num_cpus}, ...; see
`rlvr_factory.scheduler.create_scheduler`).
"""

from __future__ import annotations

import atexit
import json
import pickle
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from rlvr_factory import distributed
from rlvr_factory.domains.base import Domain
from rlvr_factory.scheduler import SchedulerConfig
from rlvr_factory.schema import Block, PositiveFloat, PositiveInt, to_dict
from rlvr_factory.verifiers.pool import Verifier, VerifierPool
from rlvr_factory.verifiers.score import Score

@dataclass(frozen=True)
class VerifyConfig(Block):
    workers: PositiveInt = 2  # scheduler workers (started only when a symbolic check is needed)
    timeout_seconds: PositiveFloat = 5.0  # wall-clock limit of one check; overruns score 0, status timeout
    max_input_chars: PositiveInt = 100000  # longer completions score 0 with status error, unchecked
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)  # where the checks run


_pools: dict[tuple[bytes, int, float, int, str], VerifierPool] = {}
_BATCHES = threading.RLock()  # one verify_batch at a time in this process


def shared_pool(verifier: Verifier, verify: VerifyConfig) -> VerifierPool:
    """The process's pool for this verifier and `verify` settings, created on first use."""
    key = (
        pickle.dumps(verifier), verify.workers, verify.timeout_seconds, verify.max_input_chars,
        json.dumps(to_dict(verify.scheduler), sort_keys=True),
    )
    if key not in _pools:
        _pools[key] = VerifierPool(
            verifier, workers=verify.workers, timeout=verify.timeout_seconds,
            max_input_chars=verify.max_input_chars, scheduler=verify.scheduler,
        )
    return _pools[key]


@atexit.register
def close_pools() -> None:
    """Stop every shared pool's workers."""
    while _pools:
        _pools.popitem()[1].close()


def verify_batch(
    domain: Domain, completions: Sequence[str], references: Sequence[dict[str, Any]], verify: VerifyConfig
) -> tuple[list[Score], dict[str, float]]:
    """Scores for each (completion, reference) pair, in order, and this batch's operational stats:
    the pool's counters and, as `scheduler_<metric>`, the scheduler's over the batch (jobs per
    second, retries, timeouts, infra failures, peak queue depth and in-flight jobs, utilisation).

    A domain whose reward has several components scores them itself (`domain.verify_batch`).
    Batches from several threads (a rollout running ahead of the update, asynchronous rounds) take turns."""
    with _BATCHES:
        own = getattr(domain, "verify_batch", None)
        if callable(own):
            return own(completions, references, verify)
        pool = shared_pool(domain.verifier, verify)
        before, window_start = pool.stats, pool.scheduler.metrics(reset_peaks=True)
        scores = pool.score_many([(c, domain.gold(r)) for c, r in zip(completions, references, strict=True)])
        window = pool.scheduler.metrics().since(window_start)
    return scores, {
        **{k: v - before[k] for k, v in pool.stats.items()},
        **{f"scheduler_{k}": v for k, v in window.items()},
    }


def judge(
    domain: Domain, verdicts: Sequence[Score | None], answers: Sequence[str | None],
    references: Sequence[dict[str, Any]], verify: VerifyConfig,
) -> tuple[list[Score], dict[str, float]]:
    """Each finished episode's verdict: its environment's own, or (where that is None) the domain's
    verifier's on the episode's answer, those checked in one `verify_batch`; and that batch's stats."""
    pending = [i for i, v in enumerate(verdicts) if v is None]
    scores, stats = verify_batch(domain, [answers[i] or "" for i in pending], [references[i] for i in pending], verify)
    by_index = dict(zip(pending, scores, strict=True))
    return [by_index.get(i, v) for i, v in enumerate(verdicts)], stats


def judge_sharded(
    domain: Domain, verdicts: Sequence[Score | None], answers: Sequence[str | None],
    references: Sequence[dict[str, Any]], verify: VerifyConfig,
) -> tuple[list[Score], dict[str, float]]:
    """`judge`, each data-parallel rank judging its share of the episodes: every episode's verdict, on
    every rank, and the stats of this rank's share (with one process, `judge` itself)."""
    stats: dict[str, float] = {}

    def share(rows: Sequence[int]) -> list[Score]:
        scores, share_stats = judge(domain, [verdicts[i] for i in rows], [answers[i] for i in rows],
                                    [references[i] for i in rows], verify)
        stats.update(share_stats)
        return scores

    return distributed.map_sharded(share, range(len(verdicts))), stats
