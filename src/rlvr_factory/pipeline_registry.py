"""The project's pipelines: each stage alone, and `rlvr`, the whole chain (the default)."""

from __future__ import annotations

from kedro.pipeline import Pipeline

from rlvr_factory.pipelines import base_model, curate, evaluate, preference, report, reward_model, rl, sft

# The shape of the unrolled RL loop, set from the run's parameters by `RLShapeHook`; the
# defaults serve only when no run configuration is at hand (e.g. `kedro registry list`).
_rl_shape = {"rounds": 2, "checkpoint_every": 0, "with_reference": False}


def set_rl_shape(rounds: int, checkpoint_every: int, with_reference: bool) -> None:
    """How many rounds the `rl` pipeline unrolls, how often it checkpoints, and whether it
    loads a KL reference model."""
    if rounds < 1:
        raise ValueError(f"rl.rounds must be at least 1, got {rounds}")
    if checkpoint_every < 0:
        raise ValueError(f"rl.checkpoint_every must be >= 0 (0 disables), got {checkpoint_every}")
    _rl_shape.update(rounds=rounds, checkpoint_every=checkpoint_every, with_reference=with_reference)


def register_pipelines() -> dict[str, Pipeline]:
    """Map pipeline names to pipelines."""
    stages = {
        "curate": curate.create_pipeline(),
        "base_model": base_model.create_pipeline(),
        "sft": sft.create_pipeline(),
        "rl": rl.create_pipeline(**_rl_shape),
        "evaluate": evaluate.create_pipeline(),
        "report": report.create_pipeline(_rl_shape["rounds"]),
    }
    stages["overoptimisation"] = reward_model.create_overoptimisation_pipeline()
    stages["rlvr"] = sum(stages.values(), Pipeline([]))
    stages["__default__"] = stages["rlvr"]
    # RLHF and DPO on preference pairs, each from scratch (curate, base model, SFT reused when cached).
    stages["preference_data"] = curate.create_preference_pipeline()
    upstream = stages["curate"] + stages["base_model"] + stages["sft"] + stages["preference_data"]
    stages["reward_model"] = upstream + reward_model.create_pipeline()
    stages["preference"] = upstream + preference.create_pipeline()
    return stages
