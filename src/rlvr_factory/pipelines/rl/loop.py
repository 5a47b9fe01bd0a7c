"""The round loop: the one place where RL rounds repeat.

The `rl` pipeline declares one round (`round.rollout -> round.verify -> round.track_* -> round.update`); this
runner runs the pipeline Kedro's way (every node through a Kedro `Task`, with the project's hooks, each
dataset released when no node needs it any more) except that, where the declared round stands, it runs
round k's copy of it for k = `rl.resume_from` .. `rl.rounds` - 1:

    for k in rounds:                       # CleanRL's loop, with Kedro nodes as its steps
        nodes += round_block(k)            # round_007.rollout, round_007.verify, ... (pipeline.py)
        run every node whose inputs exist  # in order; round k+1's rollout may wait on round k's update
        forget round k-2's datasets        # round k+1 reads back to round k-1 at most

Round k's datasets are named `round_NNN.*` and persisted by the catalog's `{round}.*` patterns. A
round reads from its neighbours only (the previous policy, pass rates and domain levels; asynchronous
rounds: a rollout started one round ahead, a validation finished one round late, `RoundPlan`), so the
nodes waiting at any time are those of three rounds at most: the cost of a round and the memory held do
not grow with the round index, and nothing is built per round but that round's few nodes.
"""

from __future__ import annotations

import logging
from collections import Counter
from itertools import chain

from kedro.io import CatalogProtocol
from kedro.pipeline import Node, Pipeline
from kedro.runner import SequentialRunner
from kedro.runner.task import Task
from pluggy import PluginManager

from rlvr_factory.pipelines.rl.pipeline import RLShape, _checkpointed, round_block, round_pipeline
from rlvr_factory.round_files import ROUND, round_of

log = logging.getLogger(__name__)
REACH = 2  # a round reads datasets of the rounds up to two before and two after it (RoundPlan)


def _shape(catalog: CatalogProtocol) -> RLShape:
    """The run's `RLShape`, from the parameters in the catalog."""
    return RLShape.from_parameters({"rl": catalog.load("params:rl"), "rollout": catalog.load("params:rollout")})


class RoundLoopRunner(SequentialRunner):
    """Kedro's `SequentialRunner`, with the declared RL round run `rl.rounds` times (module docstring).

    A pipeline without the declared round (`--pipeline=sft`, `--to-nodes=curate_tasks`) runs exactly as
    under `SequentialRunner`. Node order is the pipeline's topological order, the rounds run where the
    declared round's first node stands.
    """

    def run(self, pipeline: Pipeline, catalog: CatalogProtocol, hook_manager: PluginManager | None = None,
            run_id: str | None = None, only_missing_outputs: bool = False) -> dict:
        declared = [n for n in pipeline.nodes if n.namespace == ROUND]
        if declared:  # before Kedro checks the pipeline's inputs: a cut round misses some, and this says why
            self._check_declared(pipeline, declared, _shape(catalog))
        return super().run(pipeline, catalog, hook_manager, run_id, only_missing_outputs)

    def _run(self, pipeline: Pipeline, catalog: CatalogProtocol, hook_manager: PluginManager | None = None,
             run_id: str | None = None) -> None:
        declared = [n for n in pipeline.nodes if n.namespace == ROUND]
        if not declared:
            return super()._run(pipeline, catalog, hook_manager, run_id)
        shape = _shape(catalog)
        load_counts = Counter(chain.from_iterable(n.inputs for n in pipeline.nodes))
        done: list[Node] = []
        for node in pipeline.nodes:
            if node.namespace == ROUND:
                if node is declared[0]:
                    self._rounds(shape, catalog, hook_manager, run_id)
                done.append(node)
            else:
                self._execute(node, pipeline, catalog, hook_manager, run_id, done)
            self._release_datasets(node, catalog, load_counts, pipeline)

    def _execute(self, node: Node, pipeline: Pipeline, catalog: CatalogProtocol, hook_manager, run_id, done: list):
        try:
            Task(node=node, catalog=catalog, hook_manager=hook_manager, is_async=self._is_async, run_id=run_id).execute()
        except Exception:
            self._suggest_resume_scenario(pipeline, done, catalog)
            raise
        done.append(node)

    @staticmethod
    def _check_declared(pipeline: Pipeline, declared: list[Node], shape: RLShape) -> None:
        """The run holds the whole declared round (a filter that cuts it would run part of every round),
        and a run that does not start from the initial policy resumes at a checkpoint."""
        missing = {f"{ROUND}.{n.name}" for n in round_pipeline(0, shape.with_reference).nodes} - {n.name for n in declared}
        if missing:
            raise ValueError(f"this run keeps only part of the RL round (not {', '.join(sorted(missing))}); "
                             "filter whole rounds: --from-nodes=round.rollout resumes them, --to-nodes=initial_policy "
                             "stops before them")
        if shape.resume_from == 0 and "initial_policy" not in {n.name for n in pipeline.nodes}:
            raise ValueError("round 0 starts from the policy initial_policy makes, which this run leaves out: run from "
                             "initial_policy, or resume after a checkpoint with --params=rl.resume_from=N")

    def _rounds(self, shape: RLShape, catalog: CatalogProtocol, hook_manager, run_id) -> None:
        """Rounds `shape.resume_from` .. `shape.rounds - 1`, each node once its inputs exist (module docstring)."""
        plans = shape.plans()
        waiting: list[Node] = []
        made: set[str] = set()
        pending_reads: Counter[str] = Counter()
        start = shape.resume_from
        if start:
            kept = sorted(i for i in round_block(start, shape, plans).inputs() if round_of(i) is not None)
            log.info("resuming at round %d from %s", start, ", ".join(kept))
        for k in range(start, shape.rounds):
            block = round_block(k, shape, plans)
            for name in block.datasets():  # as Kedro's runner does for the whole pipeline before it runs
                catalog.get(name, fallback_to_runtime_pattern=True)
            block = block.nodes
            pending_reads.update(i for n in block for i in n.inputs if round_of(i) is not None)
            waiting += block
            self._run_ready(waiting, made, start, catalog, hook_manager, run_id, shape, pending_reads)
            self._forget(catalog, made, pending_reads, before=k + 1 - REACH)  # round k+1 reads back to k-1
        if waiting:
            raise RuntimeError(f"the round loop ended with nodes that never got their inputs: "
                               f"{', '.join(n.name for n in waiting)}")

    def _run_ready(self, waiting: list[Node], made: set[str], start: int, catalog, hook_manager, run_id,
                   shape: RLShape, pending_reads: Counter) -> None:
        """Run the first waiting node whose inputs exist, again and again, until none is ready."""
        def ready(node: Node) -> bool:  # a round's dataset exists once made, or on disk from before the resumed round
            return all(i in made or (k := round_of(i)) is None or k < start for i in node.inputs)

        while (node := next((n for n in waiting if ready(n)), None)) is not None:
            waiting.remove(node)
            try:
                Task(node=node, catalog=catalog, hook_manager=hook_manager, is_async=self._is_async,
                     run_id=run_id).execute()
            except Exception:
                self._suggest_resume(node, shape)
                raise
            made.update(node.outputs)
            pending_reads.subtract(i for i in node.inputs if round_of(i) is not None)

    @staticmethod
    def _forget(catalog: CatalogProtocol, made: set[str], pending_reads: Counter, before: int) -> None:
        """Release the datasets of rounds before `before` that no waiting node reads (no later round reads
        them either), and drop them from the catalog, so memory does not grow with the rounds."""
        for name in [m for m in made if (k := round_of(m)) is not None and k < before and pending_reads[m] <= 0]:
            catalog.release(name)
            # the catalog keeps every dataset a pattern resolved (DataCatalog.get); round k's are done with
            catalog._datasets.pop(name, None)
            made.discard(name)
            del pending_reads[name]

    def _suggest_resume(self, failed: Node, shape: RLShape) -> None:
        """Where a run that failed in a round resumes: the round after the last checkpoint before it."""
        k = round_of(failed.name) or 0
        resume = max((j + 1 for j in range(shape.resume_from, k) if _checkpointed(j, shape.checkpoint_every)),
                     default=shape.resume_from)
        how = (f"--from-nodes=round.rollout --params=rl.resume_from={resume}" if resume else
               "from the start (no checkpoint was written before it; rl.checkpoint_every sets how often)")
        self._logger.warning("round %d failed in %s; resume the run %s", k, failed.name, how)

