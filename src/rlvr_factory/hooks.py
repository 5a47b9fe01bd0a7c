"""Kedro hooks: shape the unrolled RL loop from the run's parameters; link MLflow runs to their code and data."""

from __future__ import annotations

import mlflow
from kedro.framework.hooks import hook_impl
from kedro.framework.project import pipelines
from kedro_mlflow.framework.hooks.utils import _flatten_dict  # the same names kedro-mlflow gives node parameters
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

from rlvr_factory import pipeline_registry, tracking


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


class MlflowLineageHook:
    """Link every MLflow run to what reproduces it, and log all of the run's parameters.

    Tags (see `tracking.lineage_tags`): the git commit and dirty flag, the `dvc.lock` hash and,
    under DVC, the stage and experiment name (an experiment's runs are named `<exp>/<stage>`).
    Parameters: the whole merged configuration, flattened as kedro-mlflow names them
    (`rl.update.lr`), so a run of one DVC stage carries the same parameters as a whole `kedro run`.
    """

    def __init__(self) -> None:
        self._project_path = None
        self._params: dict = {}

    @hook_impl
    def after_context_created(self, context) -> None:
        self._project_path = context.project_path
        self._params = dict(context.params)

    @hook_impl(trylast=True)  # after kedro-mlflow's hook has started the run
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        if mlflow.active_run() is None or self._project_path is None:
            return
        tags = tracking.lineage_tags(self._project_path)
        if "dvc.exp_name" in tags:  # name the run after its experiment in the UI: `lr-high/rl`
            tags["mlflow.runName"] = f"{tags['dvc.exp_name']}/{mlflow.active_run().info.run_name}"
        mlflow.set_tags(tags)
        flat = _flatten_dict(self._params, recursive=True, sep=".")
        mlflow.log_params({k: v for k, v in flat.items() if len(str(v)) <= MAX_PARAM_VAL_LENGTH})
