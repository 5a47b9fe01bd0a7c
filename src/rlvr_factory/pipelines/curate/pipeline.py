from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.curate.nodes import curate_tasks, split_tasks


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(curate_tasks, ["params:domain", "params:curate", "params:verify", "flywheel_pool"],
                 ["tasks", "curate_quarantine", "curate_metrics"], name="curate_tasks"),
            Node(split_tasks, "tasks", ["train_tasks", "validation_tasks", "test_tasks"], name="split_tasks"),
        ]
    )
