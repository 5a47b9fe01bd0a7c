"""The round loop's cost does not grow with the run (`benchmarks/rounds_scale.py` has the table): the registered
pipeline is one round at any `rl.rounds`, and round k's nodes are made when round k runs."""

from __future__ import annotations

import time

from rlvr_factory.pipelines.rl.pipeline import RLShape, create_pipeline, round_block

ROUNDS = 5000


def test_the_registered_rl_pipeline_is_one_round_whatever_the_run_s_length():
    names = [n.name for n in create_pipeline(with_reference=True).nodes]
    assert names == ["initial_policy", "round.rollout", "round.verify", "round.track_levels", "round.track_pass_rates",
                     "round.update", "summarize_rounds"]


def test_a_late_round_is_made_as_fast_as_an_early_one_and_wired_to_its_neighbours():
    shape = RLShape(ROUNDS, checkpoint_every=50, with_reference=True, max_staleness=1)
    plans = shape.plans()

    def seconds(k: int) -> float:
        started = time.perf_counter()
        for _ in range(20):
            round_block(k, shape, plans)
        return time.perf_counter() - started

    early, late = min(seconds(3) for _ in range(3)), min(seconds(ROUNDS - 3) for _ in range(3))
    assert late < 3 * early, f"round {ROUNDS - 3}'s nodes took {late / early:.1f}x as long to make as round 3's"
    block = round_block(ROUNDS - 2, shape, plans)  # reads round 4997's policy, leaves rl_policy's input to 4999
    assert "round_4997.next_policy" in block.inputs() and "round_4998.next_policy" in block.outputs()
    assert round_block(ROUNDS - 1, shape, plans).outputs() >= {"rl_policy", "round_4999.stats"}
    assert "round_049.checkpoint" in round_block(49, shape, plans).outputs()  # every 50 rounds to disk
