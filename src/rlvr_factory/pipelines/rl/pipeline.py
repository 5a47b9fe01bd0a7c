"""The RL loop unrolled: one namespaced rollout -> verify -> update block per round."""

import warnings
from functools import partial, update_wrapper

from kedro.pipeline import Node, Pipeline, pipeline

from rlvr_factory.pipelines.rl.nodes import (
    collect_rollout,
    initial_policy,
    prefetch_rollout,
    rollout,
    summarize_rounds,
    track_levels,
    track_pass_rates,
    update,
    verify,
)

PARAMETERS = {"params:domain", "params:verify", "params:rl", "params:evaluate", "params:rollout"}

# Rounds hand their policy and stats to the next block by namespaced names (`round_000.stats`);
# Kedro warns about any dotted name outside a namespace, which here is the point.
warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")


def _for_round(func, round_index: int):
    return update_wrapper(partial(func, round_index=round_index), func)


def _after(func):
    """`func`, taking one more input, last, that it ignores: the node waits for it (an ordering edge)."""
    def run(*args, **kwargs):
        return func(*args[:-1], **kwargs)
    return update_wrapper(run, func)


def round_pipeline(round_index: int, with_reference: bool, stale: bool = False, prefetch: bool = False) -> Pipeline:
    """The nodes of one round, reading `policy` (and, after round 0, `previous_pass_rates` and
    `previous_domain_levels`) and writing `next_policy`, `pass_rates` and `domain_levels`.

    Asynchronous rounds: with `prefetch`, the round starts the next round's rollout (`prefetched_out`)
    from a frozen copy of its `policy`, after its own verification and before its update, which then
    trains while the next rollout samples; with `stale`, the round's rollout collects what the
    previous round started (`prefetched`) instead of sampling from `policy`.
    """
    reference = ["reference_policy"] if with_reference else []
    previous = ["previous_pass_rates"] if round_index > 0 else []
    previous_levels = ["previous_domain_levels"] if round_index > 0 else []
    sampling = ["train_tasks", "params:rl", "params:domain", "params:verify", "params:rollout"]
    if stale:
        first = Node(_for_round(collect_rollout, round_index), ["prefetched"], ["rollouts", "rollout_stats"], name="rollout")
    else:
        first = Node(_for_round(rollout, round_index), ["policy", *sampling, *previous, *previous_levels],
                     ["rollouts", "rollout_stats"], name="rollout")
    ahead = [Node(_for_round(prefetch_rollout, round_index + 1), ["policy", *sampling, "pass_rates", "domain_levels"],
                  "prefetched_out", name="prefetch_next_rollout")] if prefetch else []
    return Pipeline(
        [
            first,
            Node(verify, ["rollouts", "train_tasks", "params:domain", "params:verify"], ["scored", "verify_stats"],
                 name="verify"),
            Node(track_pass_rates, ["scored", "params:rl", *previous], "pass_rates", name="track_pass_rates"),
            Node(_for_round(track_levels, round_index), ["scored", "train_tasks", "params:rl", *previous_levels],
                 "domain_levels", name="track_levels"),
            *ahead,
            Node(
                _after(_for_round(update, round_index)) if prefetch else _for_round(update, round_index),
                ["policy", "scored", "validation_tasks", "rollout_stats", "verify_stats", "pass_rates", "domain_levels",
                 "params:domain", "params:verify", "params:rl", "params:evaluate", "params:rollout", *reference,
                 *(["prefetched_out"] if prefetch else [])],  # the next rollout's frozen copy is taken before this update trains in place
                ["next_policy", "stats", "mlflow_metrics"],
                name="update",
            ),
        ]
    )


def _output_name(k: int, rounds: int, checkpoint_every: int) -> str:
    """Where round k's policy goes: the final policy, a checkpoint on disk, or memory."""
    if k == rounds - 1:
        return "rl_policy"
    if checkpoint_every and (k + 1) % checkpoint_every == 0:
        return f"round_{k:03d}.checkpoint"
    return f"round_{k:03d}.next_policy"


def behaviour_rounds(rounds: int, checkpoint_every: int, max_staleness: int) -> list[int]:
    """For each round k, the round whose policy its rollout samples from: k - max_staleness, but never
    before the latest checkpoint's round (a resumed run starts from a checkpoint, so the rounds after it
    see the same staleness in a whole run as in a resumed one) nor before round 0."""
    barrier = 0
    behaviour = []
    for k in range(rounds):
        if k > 0 and checkpoint_every and k % checkpoint_every == 0:
            barrier = k  # round k starts from the checkpoint written after round k - 1
        behaviour.append(max(k - max_staleness, barrier))
    return behaviour


def create_pipeline(rounds: int, checkpoint_every: int = 0, with_reference: bool = False, max_staleness: int = 0) -> Pipeline:
    """`rounds` rounds from `sft_policy` to `rl_policy`, then the per-round summary.

    Every `checkpoint_every` rounds the policy (with its optimizer state) is written to disk
    instead of passed in memory, so a killed run resumes with
    `kedro run --from-nodes=round_NNN.rollout` from the round after the last checkpoint.
    With `with_reference`, the SFT policy, read from disk frozen (`reference_policy`), feeds the KL term
    of every update, in a resumed run as in a whole one.
    Round 0 starts from `rl_initial_policy` (the SFT policy, with LoRA adapters when
    `model.lora.enabled`); each round's pass rates (`round_NNN.pass_rates`) feed the next
    round's prompt choice.

    With `max_staleness: 1` (asynchronous rounds), round k's rollout samples from a frozen copy of the
    policy round k - 1 started from (`behaviour_rounds`) and depends on no update after it: round k - 1
    starts it (`prefetch_next_rollout`, in a background thread driving the engine's worker process) before
    its own update, so the two overlap under Kedro's sequential runner. The round after a checkpoint
    samples from the checkpoint itself, so a resumed run is the same as a whole one.
    """
    names = [f"round_{k:03d}" for k in range(rounds)]
    behaviour = behaviour_rounds(rounds, checkpoint_every, max_staleness)
    stale = [b < k for k, b in enumerate(behaviour)]
    if any(b < k - 1 for k, b in enumerate(behaviour)):
        raise ValueError(f"rl.max_staleness={max_staleness}: asynchronous rounds run one rollout ahead (1 at most)")
    shared = {"train_tasks", "validation_tasks"} | ({"reference_policy"} if with_reference else set())
    blocks = Pipeline([Node(initial_policy, ["sft_policy", "params:model"], "rl_initial_policy", name="initial_policy")])
    for k, name in enumerate(names):
        source = "rl_initial_policy" if k == 0 else _output_name(k - 1, rounds, checkpoint_every)
        previous = {"previous_pass_rates": f"{names[k - 1]}.pass_rates",
                    "previous_domain_levels": f"{names[k - 1]}.domain_levels"} if k > 0 else {}
        prefetch = k + 1 < rounds and stale[k + 1]
        blocks += pipeline(
            round_pipeline(k, with_reference, stale[k], prefetch), namespace=name,
            inputs={"policy": source, **previous, **{i: i for i in shared},
                    **({"prefetched": f"{name}.prefetched"} if stale[k] else {})},
            outputs={"next_policy": _output_name(k, rounds, checkpoint_every),
                     **({"prefetched_out": f"{names[k + 1]}.prefetched"} if prefetch else {})},
            parameters=PARAMETERS,
        )
    return blocks + Pipeline([Node(summarize_rounds, [f"{n}.stats" for n in names], "round_history", name="summarize_rounds")])
