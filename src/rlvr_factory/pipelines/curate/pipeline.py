from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.curate.nodes import generate_tasks, split_tasks


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(generate_tasks, "params:domain", "tasks", name="generate_tasks"),
            Node(split_tasks, "tasks", ["train_tasks", "validation_tasks", "test_tasks"], name="split_tasks"),
        ]
    )
