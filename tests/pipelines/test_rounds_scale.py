"""Building the unrolled RL loop costs about the same per round at any length (`benchmarks/rounds_scale.py` has the
table): a round's block is made alone and the blocks are joined once, not added one at a time."""

from __future__ import annotations

import time

from rlvr_factory.pipelines.rl.pipeline import create_pipeline

ROUNDS = 300
BOUND_S = 15.0  # adding 200 blocks one at a time took 19.5 s on the 2-core machine; joined once, 0.2 s


def test_a_long_run_s_pipeline_is_built_in_seconds_with_every_round_wired():
    started = time.monotonic()
    rounds = create_pipeline(ROUNDS, checkpoint_every=50, with_reference=True, max_staleness=1)
    took = time.monotonic() - started
    assert took < BOUND_S, f"{ROUNDS} rounds took {took:.1f} s to build"
    names = {n.name for n in rounds.nodes}
    assert {f"round_{k:03d}.update" for k in range(ROUNDS)} <= names
    assert "summarize_rounds" in names and "initial_policy" in names
    last = rounds.to_nodes(f"round_{ROUNDS - 1:03d}.update")  # the last update depends on every round before it
    assert {f"round_{k:03d}.update" for k in range(ROUNDS - 1)} <= {n.name for n in last.nodes}
