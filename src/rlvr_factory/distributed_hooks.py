"""Kedro under torchrun: every rank runs the whole pipeline; rank 0 alone writes files and MLflow.

`torchrun --nproc_per_node=N -m kedro run --pipeline=rlvr` starts N copies of the run. Each joins
the process group (`distributed:` parameters) before the first node; the training loops and the
rollout and verify stations then split their work across the ranks (`rlvr_factory.distributed`).
On every other rank the datasets the pipeline writes are kept in memory instead (so they never
race rank 0 for a file or an MLflow run), its MLflow tracking is off, and its console shows errors
only (its results equal rank 0's). Each node starts once all ranks are there, so a file rank 0 wrote is in place before
anyone reads it.
"""

from __future__ import annotations

import logging
import os

from kedro.framework.hooks import hook_impl
from kedro.io import MemoryDataset

from rlvr_factory import distributed
from rlvr_factory.schema import parse

log = logging.getLogger(__name__)
QUIET_LOGGERS = ("kedro", "rlvr_factory", "kedro_mlflow")


class DistributedHook:
    """Join the torchrun process group at start-up and keep ranks other than 0 from writing."""

    def __init__(self) -> None:
        self._context = None
        self._store_ready = False  # rank 0 has let the others open the MLflow store

    @hook_impl(tryfirst=True)  # before kedro-mlflow opens the tracking store
    def after_context_created(self, context) -> None:
        self._context = context
        if not distributed.init(parse(distributed.DistributedConfig, context.params.get("distributed"), "distributed")):
            return
        if not distributed.is_main():
            os.environ["TQDM_DISABLE"] = "1"
            for name in QUIET_LOGGERS:
                logging.getLogger(name).setLevel(logging.ERROR)
            distributed.barrier()  # rank 0 creates the MLflow store and experiment first (it arrives in after_catalog_created)

    @hook_impl
    def after_catalog_created(self, catalog) -> None:
        if distributed.world_size() > 1 and distributed.is_main() and not self._store_ready:
            self._store_ready = True
            distributed.barrier()

    @hook_impl(tryfirst=True)  # before kedro-mlflow starts its run
    def before_pipeline_run(self, run_params, pipeline, catalog) -> None:
        if distributed.world_size() == 1 or distributed.is_main():
            return
        mlflow_config = getattr(self._context, "mlflow", None)
        if mlflow_config is not None:
            names = run_params.get("pipeline_names") or [run_params.get("pipeline_name") or "__default__"]
            mlflow_config.tracking.disable_tracking.pipelines = list(names)

    @hook_impl
    def before_node_run(self, node, catalog) -> None:
        distributed.barrier()
        if distributed.world_size() > 1 and not distributed.is_main():  # rank 0 alone writes (every round's too)
            for name in node.outputs:
                if not isinstance(catalog.get(name, fallback_to_runtime_pattern=True), MemoryDataset):
                    catalog[name] = MemoryDataset()
