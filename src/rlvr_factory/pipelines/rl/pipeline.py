"""The RL loop unrolled: one namespaced rollout -> verify -> update block per round."""

import warnings
from functools import partial, update_wrapper

from kedro.pipeline import Node, Pipeline, pipeline

from rlvr_factory.pipelines.rl.nodes import (
    initial_policy,
    rollout,
    summarize_rounds,
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


def round_pipeline(round_index: int, with_reference: bool) -> Pipeline:
    """The nodes of one round, reading `policy` (and, after round 0, `previous_pass_rates`)
    and writing `next_policy` and `pass_rates`."""
    reference = ["reference_policy"] if with_reference else []
    previous = ["previous_pass_rates"] if round_index > 0 else []
    return Pipeline(
        [
            Node(_for_round(rollout, round_index),
                 ["policy", "train_tasks", "params:rl", "params:domain", "params:verify", "params:rollout", *previous],
                 ["rollouts", "rollout_stats"], name="rollout"),
            Node(verify, ["rollouts", "train_tasks", "params:domain", "params:verify"], ["scored", "verify_stats"],
                 name="verify"),
            Node(track_pass_rates, ["scored", "params:rl", *previous], "pass_rates", name="track_pass_rates"),
            Node(
                _for_round(update, round_index),
                ["policy", "scored", "validation_tasks", "rollout_stats", "verify_stats", "pass_rates",
                 "params:domain", "params:verify", "params:rl", "params:evaluate", "params:rollout", *reference],
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


def create_pipeline(rounds: int, checkpoint_every: int = 0, with_reference: bool = False) -> Pipeline:
    """`rounds` rounds from `sft_policy` to `rl_policy`, then the per-round summary.

    Every `checkpoint_every` rounds the policy (with its optimizer state) is written to disk
    instead of passed in memory, so a killed run resumes with
    `kedro run --from-nodes=round_NNN.rollout` from the round after the last checkpoint.
    With `with_reference`, the SFT policy, read from disk frozen (`reference_policy`), feeds the KL term
    of every update, in a resumed run as in a whole one.
    Round 0 starts from `rl_initial_policy` (the SFT policy, with LoRA adapters when
    `model.lora.enabled`); each round's pass rates (`round_NNN.pass_rates`) feed the next
    round's prompt choice.
    """
    names = [f"round_{k:03d}" for k in range(rounds)]
    shared = {"train_tasks", "validation_tasks"} | ({"reference_policy"} if with_reference else set())
    blocks = Pipeline([Node(initial_policy, ["sft_policy", "params:model"], "rl_initial_policy", name="initial_policy")])
    for k, name in enumerate(names):
        source = "rl_initial_policy" if k == 0 else _output_name(k - 1, rounds, checkpoint_every)
        previous = {"previous_pass_rates": f"{names[k - 1]}.pass_rates"} if k > 0 else {}
        blocks += pipeline(
            round_pipeline(k, with_reference), namespace=name,
            inputs={"policy": source, **previous, **{i: i for i in shared}},
            outputs={"next_policy": _output_name(k, rounds, checkpoint_every)}, parameters=PARAMETERS,
        )
    return blocks + Pipeline([Node(summarize_rounds, [f"{n}.stats" for n in names], "round_history", name="summarize_rounds")])
