"""Kedro hooks: shape the unrolled RL loop from the run's parameters."""

from __future__ import annotations

from kedro.framework.hooks import hook_impl
from kedro.framework.project import pipelines

from rlvr_factory import pipeline_registry


class RLShapeHook:
    """Rebuild the pipelines to this run's `rl.rounds`, checkpoint interval and KL setting.

    Kedro pipelines are static DAGs and `register_pipelines` cannot see `--params`, so the
    loop's shape is read from the merged configuration (runtime overrides included) as
    soon as the context exists, and the pipeline registry is reloaded.
    """

    @hook_impl
    def after_context_created(self, context) -> None:
        rl = context.config_loader["parameters"]["rl"]
        pipeline_registry.set_rl_shape(
            int(rl["rounds"]), int(rl["checkpoint_every"]), float(rl["update"]["kl_coef"]) > 0
        )
        pipelines.configure(pipeline_registry.__name__)
