"""The RL round, declared once: rollout -> verify -> update, and how round k's copy of it is wired.

The registered `rl` pipeline holds one round (namespace `round`, the template `kedro viz` shows); the
round loop (`loop.RoundLoopRunner`, `kedro run`'s runner) repeats it, asking `round_block` for round k's
nodes, namespaced `round_NNN`, whose datasets the catalog's `{round}.*` patterns persist per round.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from functools import partial, update_wrapper, wraps

from kedro.pipeline import Node, Pipeline, pipeline

from rlvr_factory.parameters import RLConfig
from rlvr_factory.round_files import ROUND, round_name
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.schema import ConfigError, parse

from rlvr_factory.pipelines.rl.nodes import (
    collect_rollout,
    finish_round,
    initial_policy,
    prefetch_and_validate_ahead,
    prefetch_rollout,
    rollout,
    summarize_rounds,
    track_levels,
    track_pass_rates,
    update,
    validate_ahead,
    verify,
)

PARAMETERS = {"params:domain", "params:verify", "params:rl", "params:evaluate", "params:rollout"}

# Rounds hand their policy and stats to the next block by namespaced names (`round_000.stats`);
# Kedro warns about any dotted name outside a namespace, which here is the point.
warnings.filterwarnings("ignore", message="One or more dataset names contain '.'")
# Asynchronous rounds interleave them on purpose (a round's stats are finished in the next round, its
# rollout collected in the previous one's); a namespace here names a round's nodes, never a unit to deploy.
warnings.filterwarnings("ignore", message=r"Namespace '.*' is interrupted by nodes")


def _for_round(func, round_index: int):
    return update_wrapper(partial(func, round_index=round_index), func)


def _policy_last(func):
    """`func` returning (policy, stats, metrics), as (stats, metrics, policy).

    Kedro saves a node's outputs one after the other in their order; the round's stats and metrics go
    first, so a run killed right after a checkpoint is written still has that round's stats on disk
    (a resumed run starting after the checkpoint reads them)."""
    def run(*args, **kwargs):
        policy, *rest = func(*args, **kwargs)
        return (*rest, policy)
    return update_wrapper(run, func)


def _after(func, count: int = 1):
    """`func`, taking `count` more inputs, last, that it ignores: the node waits for them (ordering edges)."""
    def run(*args, **kwargs):
        return func(*args[:-count], **kwargs) if count else func(*args, **kwargs)
    return update_wrapper(run, func)


@dataclass(frozen=True)
class RoundPlan:
    """How one round runs beside its neighbours (asynchronous rounds; all False: a synchronous round).

    * `stale`: the round's rollout collects what the previous round started (`prefetched`) instead of
      sampling from `policy`;
    * `prefetch`: the round starts the next round's rollout (`prefetched_out`) from a frozen copy of its
      `policy`, after its own verification and before its update, which then trains while it samples;
    * `validates_previous`: the round starts the previous round's validation (`validation_out`) on its
      `policy`, the one the previous update wrote, in the background worker behind its rollout ahead,
      before its own update trains that policy in place;
    * `deferred`: the round's update leaves its validation to the next round, and `finish_round` waits
      for it (`validation`) and writes the round's stats after the next round's update (`next_trained`);
    * `later_verified`: `finish_round` also waits for the verification of the round after next
      (`later_verify_stats`), which runs while the worker validates;
    * `finishes_earlier`: the round's update waits for the stats of the round two back (`earlier_stats`),
      so every earlier round's stats are on disk before this round's checkpoint.
    """

    stale: bool = False
    prefetch: bool = False
    validates_previous: bool = False
    deferred: bool = False
    later_verified: bool = False
    finishes_earlier: bool = False

    @property
    def nodes(self) -> int:
        """How many nodes the round has (`round_pipeline`): five, one to start work ahead, one to finish late."""
        return 5 + (self.prefetch or self.validates_previous) + self.deferred


def round_plans(rounds: int, checkpoint_every: int = 0, max_staleness: int = 0) -> list[RoundPlan]:
    """Every round's `RoundPlan`, from `behaviour_rounds` and `deferred_validations`."""
    behaviour = behaviour_rounds(rounds, checkpoint_every, max_staleness)
    if any(b < k - 1 for k, b in enumerate(behaviour)):
        raise ValueError(f"rl.max_staleness={max_staleness}: asynchronous rounds run one rollout ahead (1 at most)")
    stale = [b < k for k, b in enumerate(behaviour)]
    deferred = deferred_validations(rounds, checkpoint_every, max_staleness)
    return [RoundPlan(stale=stale[k], prefetch=k + 1 < rounds and stale[k + 1],
                      validates_previous=k > 0 and deferred[k - 1], deferred=deferred[k],
                      later_verified=deferred[k] and k + 2 < rounds, finishes_earlier=k >= 2 and deferred[k - 2])
            for k in range(rounds)]


def round_pipeline(round_index: int, with_reference: bool, plan: RoundPlan = RoundPlan()) -> Pipeline:
    """The nodes of one round, reading `policy` (and, after round 0, `previous_pass_rates` and
    `previous_domain_levels`) and writing `next_policy`, `pass_rates`, `domain_levels`, `stats` and
    `mlflow_metrics`; `plan` says what it reads from and leaves to its neighbours (`RoundPlan`).
    """
    stale, prefetch, deferred = plan.stale, plan.prefetch, plan.deferred
    validates_previous, later_verified, finishes_earlier = plan.validates_previous, plan.later_verified, plan.finishes_earlier
    reference = ["reference_policy"] if with_reference else []
    previous = ["previous_pass_rates"] if round_index > 0 else []
    previous_levels = ["previous_domain_levels"] if round_index > 0 else []
    sampling = ["train_tasks", "params:rl", "params:domain", "params:verify", "params:rollout"]
    if stale:
        first = Node(_for_round(collect_rollout, round_index), ["prefetched"], ["rollouts", "rollout_stats"], name="rollout")
    else:
        first = Node(_for_round(rollout, round_index), ["policy", *sampling, *previous, *previous_levels],
                     ["rollouts", "rollout_stats"], name="rollout")
    ahead_inputs = ["policy", *sampling, "pass_rates", "domain_levels"]
    if prefetch and validates_previous:  # one node, the validation behind the rollout ahead on the worker's one thread
        ahead = [Node(_for_round(prefetch_and_validate_ahead, round_index + 1),
                      [*ahead_inputs, "validation_tasks", "params:evaluate"], ["prefetched_out", "validation_out"],
                      name="prefetch_next_rollout")]
    elif prefetch:
        ahead = [Node(_for_round(prefetch_rollout, round_index + 1), ahead_inputs, "prefetched_out",
                      name="prefetch_next_rollout")]
    elif validates_previous:
        ahead = [Node(_for_round(validate_ahead, round_index - 1),
                      ["policy", "validation_tasks", "params:domain", "params:verify", "params:evaluate", "params:rollout",
                       "params:rl"], "validation_out", name="validate_previous_ahead")]
    else:
        ahead = []
    # the frozen copies are taken before this update trains the policy in place
    waits = ((["prefetched_out"] if prefetch else []) + (["validation_out"] if validates_previous else [])
             + (["earlier_stats"] if finishes_earlier else []))
    finish = [Node(finish_round, ["unvalidated", "validation", "domain_levels", "params:rl", "next_trained",
                                  *(["later_verify_stats"] if later_verified else [])],
                   ["stats", "mlflow_metrics"], name="finish_round")] if deferred else []
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
                _policy_last(_after(update_wrapper(partial(update, round_index=round_index, validate=not deferred),
                                                   update), len(waits))),
                ["policy", "scored", "validation_tasks", "rollout_stats", "verify_stats", "pass_rates", "domain_levels",
                 "params:domain", "params:verify", "params:rl", "params:evaluate", "params:rollout", *reference, *waits],
                ["unvalidated", "next_policy"] if deferred else ["stats", "mlflow_metrics", "next_policy"],
                name="update",
            ),
            *finish,
        ]
    )


def _output_name(k: int, rounds: int, checkpoint_every: int) -> str:
    """Where round k's policy goes: the final policy, a checkpoint on disk, or memory."""
    if k == rounds - 1:
        return "rl_policy"
    if _checkpointed(k, checkpoint_every):
        return f"{round_name(k)}.checkpoint"
    return f"{round_name(k)}.next_policy"


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


def _checkpointed(k: int, checkpoint_every: int) -> bool:
    """Whether round k's policy goes to disk (a resumed run starts after it)."""
    return bool(checkpoint_every) and (k + 1) % checkpoint_every == 0


def deferred_validations(rounds: int, checkpoint_every: int, max_staleness: int) -> list[bool]:
    """For each round k, whether its validation runs ahead, in the background worker during round k+1's
    update (asynchronous rounds): every round but the last, and but those whose stats a resumed run
    needs whole: a round that writes a checkpoint, or the one before it (its stats would be written
    after the checkpoint, so a run killed in between would resume without them)."""
    return [max_staleness > 0 and k + 1 < rounds and not _checkpointed(k, checkpoint_every)
            and not _checkpointed(k + 1, checkpoint_every) for k in range(rounds)]


@dataclass(frozen=True)
class RLShape:
    """What shapes the round loop: how many rounds, how often the policy goes to disk, whether a KL
    reference model is loaded, how far rollouts run ahead, and the round a resumed run starts at."""

    rounds: int
    checkpoint_every: int
    with_reference: bool
    max_staleness: int = 0
    resume_from: int = 0

    @classmethod
    def from_parameters(cls, parameters: dict) -> RLShape:
        """The shape `rl.rounds`, `rl.checkpoint_every`, `rl.update.kl_coef`, `rl.max_staleness` and
        `rl.resume_from` ask for (checked: `ConfigError`)."""
        rl = parse(RLConfig, parameters.get("rl"), "rl")
        if rl.max_staleness > 1:
            raise ConfigError("rl.max_staleness", f"asynchronous rounds run one rollout ahead of the update: 0 or 1, "
                              f"got {rl.max_staleness}")
        if rl.max_staleness:
            rollout = RolloutConfig.from_params(parameters.get("rollout"))
            if not rollout.background:
                raise ConfigError("rl.max_staleness", "asynchronous rounds overlap sampling with the update only when "
                                  "the engine samples in a process of its own: set rollout.background=true (the "
                                  "transformers engine in a worker process; rollout.engine=vllm is not supported yet)")
        if rl.resume_from and (rl.resume_from >= rl.rounds or not _checkpointed(rl.resume_from - 1, rl.checkpoint_every)):
            raise ConfigError("rl.resume_from", f"a run resumes at a round right after a checkpoint (rounds "
                              f"{rl.checkpoint_every or '-'}, {2 * rl.checkpoint_every or '-'}, ... below rl.rounds="
                              f"{rl.rounds}, every rl.checkpoint_every={rl.checkpoint_every}), got {rl.resume_from}")
        return cls(rl.rounds, rl.checkpoint_every, rl.update.kl_coef > 0, rl.max_staleness, rl.resume_from)

    def plans(self) -> list[RoundPlan]:
        """Every round's `RoundPlan`."""
        return round_plans(self.rounds, self.checkpoint_every, self.max_staleness)


SHARED = ("train_tasks", "validation_tasks")


def round_block(k: int, shape: RLShape, plans: list[RoundPlan]) -> Pipeline:
    """Round k's nodes, namespaced `round_NNN`, wired to its neighbours: it starts from the policy round k-1
    left (`rl_initial_policy` for round 0; a checkpoint on disk after a checkpointed round) and that round's
    pass rates and domain levels, and leaves its policy to round k+1 (`rl_policy` after the last round).
    Asynchronous rounds (`RoundPlan`) also read from and leave to the rounds one and two away."""
    names = {j: round_name(j) for j in range(k - 2, k + 3)}
    name, plan = names[k], plans[k]
    previous = {"previous_pass_rates": f"{names[k - 1]}.pass_rates",
                "previous_domain_levels": f"{names[k - 1]}.domain_levels"} if k > 0 else {}
    # the next round's update: its stats before validation if it defers it too, else its stats
    next_trained = (f"{names[k + 1]}.unvalidated" if plans[k + 1].deferred else f"{names[k + 1]}.stats"
                    ) if plan.deferred else None
    shared = SHARED + (("reference_policy",) if shape.with_reference else ())
    return pipeline(
        round_pipeline(k, shape.with_reference, plan), namespace=name,
        inputs={"policy": "rl_initial_policy" if k == 0 else _output_name(k - 1, shape.rounds, shape.checkpoint_every),
                **previous, **{i: i for i in shared},
                **({"prefetched": f"{name}.prefetched"} if plan.stale else {}),
                **({"validation": f"{name}.validation", "next_trained": next_trained} if plan.deferred else {}),
                **({"later_verify_stats": f"{names[k + 2]}.verify_stats"} if plan.later_verified else {}),
                **({"earlier_stats": f"{names[k - 2]}.stats"} if plan.finishes_earlier else {})},
        outputs={"next_policy": _output_name(k, shape.rounds, shape.checkpoint_every),
                 **({"prefetched_out": f"{names[k + 1]}.prefetched"} if plan.prefetch else {}),
                 **({"validation_out": f"{names[k - 1]}.validation"} if plan.validates_previous else {})},
        parameters=PARAMETERS,
    )


def _declared_only(func):
    """`func` as the declared round shows it: the round loop runs round k's copy (`round_block`), never this."""
    @wraps(func)
    def refuse(*args, **kwargs):
        raise RuntimeError(
            f"{func.__name__}: the RL round is declared once and repeated by the round loop; run it with `kedro run` "
            "(its default runner) or session.run(runner=RoundLoopRunner()) "
            "(rlvr_factory.pipelines.rl.loop), not with Kedro's SequentialRunner")
    return refuse


def create_pipeline(with_reference: bool = False) -> Pipeline:
    """The SFT policy to `rl_policy` through `rl.rounds` rounds, then the per-round summary.

    The round is declared once (namespace `round`: rollout -> verify -> track_pass_rates, track_levels ->
    update), reading `rl_initial_policy` and writing `rl_policy`, `round.stats` and the rest; the round loop
    (`loop.RoundLoopRunner`) runs round k as `round_NNN` (`round_block`). Every `rl.checkpoint_every` rounds
    the policy (with its optimizer state) is written to disk instead of passed in memory, so a killed run
    resumes with `kedro run --from-nodes=round.rollout --params=rl.resume_from=N` at the round after the last
    checkpoint. With `with_reference`, the SFT policy, read from disk frozen (`reference_policy`), feeds the KL
    term of every update. Round 0 starts from `rl_initial_policy` (the SFT policy, with LoRA adapters when
    `model.lora.enabled`); each round's pass rates and domain levels feed the next round's prompt choice.

    With `max_staleness: 1` (asynchronous rounds), round k's rollout samples from a frozen copy of the
    policy round k - 1 started from (`behaviour_rounds`): round k - 1 starts it (`prefetch_next_rollout`, in
    a background thread driving the engine's worker process) before its own update, so the two overlap.
    The round after a checkpoint samples from the checkpoint itself, so a resumed run is the same as a whole
    one. Round k's validation reads the weights round k+2's rollout samples from, so the worker runs it right
    after that rollout, beside round k+1's update (`deferred_validations`).
    """
    declared = round_pipeline(0, with_reference, RoundPlan())
    declared = Pipeline([n._copy(func=_declared_only(n.func)) for n in declared.nodes])
    shared = SHARED + (("reference_policy",) if with_reference else ())
    return Pipeline([
        Node(initial_policy, ["sft_policy", "params:model"], "rl_initial_policy", name="initial_policy"),
        pipeline(declared, namespace=ROUND, inputs={"policy": "rl_initial_policy", **{i: i for i in shared}},
                 outputs={"next_policy": "rl_policy"}, parameters=PARAMETERS),
        Node(summarize_rounds, [f"{ROUND}.stats", "params:rl"], "round_history", name="summarize_rounds"),
    ])
