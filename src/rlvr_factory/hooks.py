"""Kedro hooks: shape the unrolled RL loop from the run's configuration, refuse a model path that
cannot load before any work starts, tell the run's story on the console, and link MLflow runs
to their code and data."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import mlflow
from kedro.framework.hooks import hook_impl
from kedro.framework.project import pipelines
from kedro_mlflow.framework.hooks.mlflow_hook import MlflowHook
from kedro_mlflow.framework.hooks.utils import _flatten_dict  # the same names kedro-mlflow gives node parameters
from mlflow import MlflowClient
from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH

from rlvr_factory import cpu_huge_pages, pipeline_registry, summary, tracking
from rlvr_factory.models.policy import MODEL_DIR_CONTENTS, has_chat_template, looks_local, model_dir_problem
from rlvr_factory.parameters import ModelConfig
from rlvr_factory.pipelines.rl.pipeline import RLShape
from rlvr_factory.round_files import ROUND, round_name, round_of
from rlvr_factory.rollout.background import close_background_engines, forget_rollouts_ahead
from rlvr_factory.schema import parse, to_dict

log = logging.getLogger(__name__)
EMBEDDED_MODEL = "embedded"
# What the end of a run points at: (label, catalog entry), shown when the run wrote it.
ARTEFACTS = (
    ("report", "eval_report"),
    ("summary", "summary_metrics"),
    ("plot", "round_curve_plot"),
    ("rollouts", "rollout_sample"),
    ("SFT policy", "sft_policy"),
    ("RL policy", "rl_policy"),
)


class PipelineShapeHook:
    """Rebuild the pipelines from this run's configuration (`rl.rounds`, its `--params` and
    `--env` included) once the context exists, in case they were built before it."""

    @hook_impl
    def after_context_created(self, context) -> None:
        pipelines.configure(pipeline_registry.__name__)


class ModelPathHook:
    """Fail before the first node when `model.name_or_path` names a local model directory that
    does not exist or cannot load, saying what such a directory must hold, or whose tokenizer has no
    chat template while `model.chat_template` gives none."""

    def __init__(self) -> None:
        self._model = ModelConfig()

    @hook_impl
    def after_context_created(self, context) -> None:
        self._model = parse(ModelConfig, context.params.get("model"), "model")

    @hook_impl(tryfirst=True)  # before kedro-mlflow starts a run that would then hang as RUNNING
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        name = self._model.name_or_path
        if str(name) == EMBEDDED_MODEL or not looks_local(name):
            return
        if not any(n.name == "prepare_base_model" for n in pipeline.nodes):
            return  # this run takes its policies from earlier stages' outputs
        problem = model_dir_problem(name)
        if problem:
            raise FileNotFoundError(
                f"model.name_or_path is {name}, and {problem}; {MODEL_DIR_CONTENTS}. Point it at such a "
                f"directory, a hub id (`org/name`, needs network access), or `{EMBEDDED_MODEL}` (the built-in tiny model)."
            )
        if self._model.chat_template is None and not has_chat_template(name):
            raise ValueError(
                f"the tokenizer of model.name_or_path {name} has no chat template, which prompts are rendered with; "
                "set model.chat_template (plain: the prompt, a newline and the answer, for a base model such as GPT-2)"
            )


class RunConsoleHook:
    """The run's story on the console.

    One line per finished node outside the RL rounds, one line per RL round (reward, pass
    rate, validation accuracy, KL, entropy, seconds and the run's ETA), and at the end the
    results table, where the artefacts are and the MLflow run; a failed run says which MLflow
    run it left FAILED.
    """

    def __init__(self) -> None:
        self._shape: RLShape | None = None
        self._started: dict[str, float] = {}
        self._clock: summary.RoundClock | None = None
        self._round_start: float | None = None
        self._evaluation: dict[str, float] = {}
        self._eval_report: dict | None = None
        self._run: tuple[str, str] | None = None  # MLflow (run id, tracking URI)
        self._catalog_config: dict = {}
        self._pipeline_start = 0.0
        self._done = 0
        self._total = 0

    @hook_impl
    def after_context_created(self, context) -> None:
        self._shape = RLShape.from_parameters(context.params)
        self._catalog_config = context.config_loader["catalog"]

    @hook_impl(trylast=True)  # after kedro-mlflow has started the run
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        declared = sum(n.namespace == ROUND for n in pipeline.nodes)  # the round loop runs them once per round
        plans = self._shape.plans()[self._shape.resume_from:] if declared and self._shape else []
        self._clock = summary.RoundClock(len(plans))  # the rounds this run has (fewer when it resumes)
        self._pipeline_start, self._done = time.perf_counter(), 0
        self._total = len(pipeline.nodes) - declared + sum(p.nodes for p in plans)
        self._round_start, self._evaluation, self._eval_report = None, {}, None
        active = mlflow.active_run()
        self._run = (active.info.run_id, mlflow.get_tracking_uri()) if active else None
        where = f"; MLflow run {active.info.run_id}" if active else ""
        log.info("%d nodes, %d RL rounds%s", self._total, len(plans), where)
        if os.environ.get("THP_MEM_ALLOC_ENABLE") == "1" and cpu_huge_pages() is False:
            log.warning("PyTorch's CPU allocations get no huge pages in this process (a tensor was allocated "
                        "before rlvr_factory set THP_MEM_ALLOC_ENABLE=1): export THP_MEM_ALLOC_ENABLE=1 "
                        "before Python starts; CPU sampling is 1.6-1.9x faster with it (rlvr_factory/__init__.py)")

    @hook_impl
    def before_node_run(self, node) -> None:
        self._started[node.name] = time.perf_counter()
        if round_of(node.name) is not None and self._round_start is None:
            self._round_start = self._started[node.name]

    @hook_impl
    def after_node_run(self, node, outputs: dict[str, Any]) -> None:
        now = time.perf_counter()
        seconds = now - self._started.pop(node.name, now)
        self._done += 1
        if "eval_report" in outputs:
            self._eval_report = outputs["eval_report"]
        if node.name.startswith("evaluate_"):
            self._evaluation[node.name] = seconds
        k = round_of(node.name)
        if k is None:
            log.info("[%*d/%d] %s: %s", len(str(self._total)), self._done, self._total, node.name, summary.duration(seconds))
            return
        stats = outputs.get(f"{round_name(k)}.stats")
        if stats is None or self._clock is None:
            return  # one of the round's nodes before its update
        # since the previous round's stats (or this run's first round node): with validation ahead a round's
        # stats come one update late, and the pace between them is the rounds' throughput
        round_seconds = now - (self._round_start or now)
        self._round_start = now
        self._clock.finish(round_seconds)
        # The RL policy's evaluation costs what the SFT policy's did, when that one already ran.
        pending = self._evaluation.get("evaluate_sft", 0.0) if "evaluate_rl" not in self._evaluation else 0.0
        self._clock.pending_seconds = pending
        shape = self._shape or RLShape(self._clock.rounds, 0, False)
        log.info(summary.round_line(stats, shape.rounds, round_seconds, self._clock.eta(), shape.with_reference))

    @hook_impl
    def after_pipeline_run(self, run_params, pipeline, catalog) -> None:
        outputs = pipeline.all_outputs()
        if self._eval_report is not None:
            log.info("results\n%s", summary.results_table(self._eval_report))
        paths = [(label, where) for label, name in ARTEFACTS
                 if name in outputs and (where := _location(self._catalog_config.get(name)))]
        if self._run is not None:
            paths.append(("MLflow", _mlflow_location(*self._run)))
        if paths:
            log.info("artefacts\n%s", summary.artefact_lines(paths))
        log.info("done in %s", summary.duration(time.perf_counter() - self._pipeline_start))
        close_background_engines()  # the engine's worker process ends with the run
        forget_rollouts_ahead()

    @hook_impl(tryfirst=True)  # before kedro-mlflow ends the run as FAILED
    def on_pipeline_error(self, error: Exception, run_params, pipeline, catalog) -> None:
        close_background_engines()
        forget_rollouts_ahead()
        if self._run is not None:
            run_id, uri = self._run
            log.error("the run failed (%s: %s); MLflow run %s in %s is marked FAILED",
                      type(error).__name__, error, run_id, uri)


def _location(entry: dict | None) -> str | None:
    """Where a catalog entry (its configuration) keeps its data: its file or directory, if any."""
    entry = entry or {}
    entry = entry.get("dataset", entry)  # an MLflow artifact dataset wraps the one on disk
    return entry.get("filepath") or entry.get("path") if isinstance(entry, dict) else None


def _mlflow_location(run_id: str, tracking_uri: str) -> str:
    """The run, its store and its registered model version, if any."""
    try:
        versions = MlflowClient(tracking_uri, registry_uri=tracking_uri).search_model_versions(f"run_id='{run_id}'")
    except mlflow.exceptions.MlflowException:
        versions = []
    registered = "".join(f"; model {v.name} version {v.version}" for v in versions)
    return f"run {run_id} in {tracking_uri}{registered} (`kedro mlflow ui` opens it)"


class MlflowParamsOnceHook(MlflowHook):
    """kedro-mlflow's hook, which this project registers in its place (`settings.DISABLE_HOOKS_FOR_PLUGINS`),
    logging each `params:` input once per run rather than before every node that reads it.

    kedro-mlflow logs a node's parameter inputs before the node runs, one `mlflow.log_param` (an SQLite
    transaction) per flattened key, and reopens the run for the node's thread. The unrolled RL loop's
    nodes read the same parameter blocks every round, so that re-logged hundreds of unchanged values a
    round: about 1 s of a 7 s round on the trainer's critical path (profiled with py-spy on
    `benchmarks/async_rounds.py`). Parameters never change within a run, and `MlflowLineageHook` logs
    them all when it starts; a node whose parameter inputs were all logged, in a thread that has the
    run open, goes straight to running. Everything else is kedro-mlflow's own (its configuration in
    conf/base/mlflow.yml, long values as tags, the run's start and end, the `kedro mlflow` commands).
    """

    def __init__(self) -> None:
        super().__init__()
        self._params_logged: set[str] = set()

    @hook_impl
    def before_pipeline_run(self, run_params: dict[str, Any], pipeline, catalog) -> None:
        self._params_logged = set()
        super().before_pipeline_run(run_params, pipeline, catalog)

    @hook_impl
    def before_node_run(self, node, catalog, inputs: dict[str, Any], is_async: bool) -> None:
        fresh = {k: to_dict(v) for k, v in inputs.items() if (k.startswith("params:") or k == "parameters")
                 and k not in self._params_logged}  # typed blocks (Kedro's typed parameters) logged as their keys
        active = mlflow.active_run()
        if not fresh and active is not None and active.info.run_id == self.run_id:
            return
        super().before_node_run(node, catalog, fresh, is_async)
        self._params_logged.update(fresh)


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
        self._params = to_dict(dict(context.params))  # typed blocks as their keys, as kedro-mlflow names them

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
