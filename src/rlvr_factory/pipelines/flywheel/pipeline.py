"""Flywheel: `kedro run --pipelines=flywheel` after a run; the next `rlvr` run curates its pool."""

from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.flywheel.nodes import collect_regression, ingest_interactions


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(ingest_interactions,
                 ["flywheel_interactions", "flywheel_pool_previous", "tasks", "regression_tasks_previous",
                  "params:domain", "params:verify", "params:curate"],
                 ["flywheel_pool", "flywheel_held_back", "flywheel_metrics"], name="ingest_interactions"),
            Node(collect_regression,
                 ["rl_policy", "test_tasks", "regression_tasks_previous", "params:domain", "params:verify",
                  "params:evaluate"], "regression_tasks", name="collect_regression"),
        ]
    )
