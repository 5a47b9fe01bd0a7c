"""The project's pipelines: each stage alone, and `rlvr`, the whole chain (the default).

The RL pipeline declares one round, which `kedro run`'s round loop repeats `rl.rounds` times
(`pipelines/rl/loop.py`); whether its updates read a KL reference model comes from the run's
configuration: the parameters of the config loader the session made (its `--env` and `--params`
included; `kedro run` and `kedro viz` alike), or, outside a session (`kedro registry describe`), the
project's configuration for `$KEDRO_ENV`.
"""

from __future__ import annotations

import os
from pathlib import Path

from kedro.framework.project import settings
from kedro.pipeline import Pipeline
from kedro.utils import find_kedro_project

from rlvr_factory.config_loader import ConfigLoader
from rlvr_factory.pipelines import base_model, curate, evaluate, flywheel, preference, report, reward_model, rl, sft
from rlvr_factory.pipelines.rl.pipeline import RLShape


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
    """Map pipeline names to pipelines (the RL round declared once; `kedro run` repeats it)."""
    shape = RLShape.from_parameters(run_parameters())
    stages = {
        "curate": curate.create_pipeline(),
        "base_model": base_model.create_pipeline(),
        "sft": sft.create_pipeline(),
        "rl": rl.create_pipeline(shape.with_reference),
        "evaluate": evaluate.create_pipeline(),
        "report": report.create_pipeline(),
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
