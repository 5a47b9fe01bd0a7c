"""Verify a batch of completions of one domain through a worker pool with hard time limits.

One pool per verifier configuration lives for the whole process: its workers start when a
symbolic check is first needed and then serve every later batch (rollouts of each round,
validation, evaluation), and its cache spans the run. The pools close at exit.
"""

from __future__ import annotations

import atexit
import pickle
from typing import Any, Sequence

from rlvr_factory.domains.base import Domain
from rlvr_factory.verifiers.pool import Verifier, VerifierPool
from rlvr_factory.verifiers.score import Score

_pools: dict[tuple[bytes, int, float, int], VerifierPool] = {}


def shared_pool(verifier: Verifier, verify: dict[str, Any]) -> VerifierPool:
    """The process's pool for this verifier and `verify` settings (`workers`, `timeout_seconds`,
    `max_input_chars`), created on first use."""
    key = (pickle.dumps(verifier), verify["workers"], verify["timeout_seconds"], verify["max_input_chars"])
    if key not in _pools:
        _pools[key] = VerifierPool(
            verifier, workers=verify["workers"], timeout=verify["timeout_seconds"],
            max_input_chars=verify["max_input_chars"],
        )
    return _pools[key]


@atexit.register
def close_pools() -> None:
    """Stop every shared pool's workers."""
    while _pools:
        _pools.popitem()[1].close()


def verify_batch(
    domain: Domain, completions: Sequence[str], references: Sequence[dict[str, Any]], verify: dict[str, Any]
) -> tuple[list[Score], dict[str, int]]:
    """Scores for each (completion, reference) pair, in order, and this batch's pool counters."""
    pool = shared_pool(domain.verifier, verify)
    before = pool.stats
    scores = pool.score_many([(c, domain.gold(r)) for c, r in zip(completions, references, strict=True)])
    return scores, {k: v - before[k] for k, v in pool.stats.items()}
