"""The project's pipelines: each stage alone, and `rlvr`, the whole chain (the default).

The RL loop is unrolled into `rl.rounds` namespaced rounds, so the pipelines are built from
the run's configuration: the parameters of the config loader the session made (its `--env`
and `--params` included; `kedro run` and `kedro viz` alike), or, outside a session
(`kedro registry describe`), the project's configuration for `$KEDRO_ENV`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kedro.framework.project import settings
from kedro.pipeline import Pipeline
from kedro.utils import find_kedro_project

from rlvr_factory.config_loader import ConfigLoader
from rlvr_factory.parameters import RLConfig
from rlvr_factory.pipelines import base_model, curate, evaluate, flywheel, preference, report, reward_model, rl, sft
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.schema import ConfigError, parse


@dataclass(frozen=True)
class RLShape:
    """What shapes the unrolled RL loop: how many rounds, how often the policy goes to disk,
    and whether a KL reference model is loaded."""

    rounds: int
    checkpoint_every: int
    with_reference: bool
    max_staleness: int = 0

    @classmethod
    def from_parameters(cls, parameters: dict) -> RLShape:
        """The shape `rl.rounds`, `rl.checkpoint_every`, `rl.update.kl_coef` and `rl.max_staleness` ask for
        (checked: `ConfigError`)."""
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
        return cls(rl.rounds, rl.checkpoint_every, rl.update.kl_coef > 0, rl.max_staleness)


def run_parameters() -> dict:
    """The parameters of this process's run: those of the latest project config loader (a
    session makes one with its environment and runtime parameters), else the project's own."""
    loader = ConfigLoader.latest
    if loader is None:
        root = find_kedro_project(Path.cwd()) or Path.cwd()
        loader = ConfigLoader(
            str(root / settings.CONF_SOURCE), env=os.environ.get("KEDRO_ENV"), **settings.CONFIG_LOADER_ARGS
        )
    return loader["parameters"]


def register_pipelines() -> dict[str, Pipeline]:
    """Map pipeline names to pipelines, the RL loop unrolled to the run's `rl.rounds`."""
    shape = RLShape.from_parameters(run_parameters())
    stages = {
        "curate": curate.create_pipeline(),
        "base_model": base_model.create_pipeline(),
        "sft": sft.create_pipeline(),
        "rl": rl.create_pipeline(shape.rounds, shape.checkpoint_every, shape.with_reference, shape.max_staleness),
        "evaluate": evaluate.create_pipeline(),
        "report": report.create_pipeline(shape.rounds),
    }
    stages["overoptimisation"] = reward_model.create_overoptimisation_pipeline()
    stages["rlvr"] = Pipeline(list(stages.values()))  # joined once (`+` checks the whole at each step)
    stages["__default__"] = stages["rlvr"]
    # RLHF and DPO on preference pairs, each from scratch (curate, base model, SFT reused when cached).
    stages["preference_data"] = curate.create_preference_pipeline()
    upstream = stages["curate"] + stages["base_model"] + stages["sft"] + stages["preference_data"]
    stages["reward_model"] = upstream + reward_model.create_pipeline()
    stages["preference"] = upstream + preference.create_pipeline()
    stages["flywheel"] = flywheel.create_pipeline()  # after a run, not part of it: the next run curates its pool
    return stages
