"""Verify a batch of completions of one domain through a worker pool with hard time limits."""

from __future__ import annotations

from typing import Any, Sequence

from rlvr_factory.domains.base import Domain
from rlvr_factory.verifiers.pool import VerifierPool
from rlvr_factory.verifiers.score import Score


def verify_batch(
    domain: Domain, completions: Sequence[str], references: Sequence[dict[str, Any]], verify: dict[str, Any]
) -> tuple[list[Score], dict[str, int]]:
    """Scores for each (completion, reference) pair, in order, and the pool's counters.

    `verify` holds the pool's settings: `workers`, `timeout_seconds`, `max_input_chars`.
    """
    pairs = [(c, domain.gold(r)) for c, r in zip(completions, references, strict=True)]
    pool = VerifierPool(
        domain.verifier, workers=verify["workers"], timeout=verify["timeout_seconds"],
        max_input_chars=verify["max_input_chars"],
    )
    try:  # not `with`: that starts the workers up front, and most batches never need them
        return pool.score_many(pairs), pool.stats
    finally:
        pool.close()
