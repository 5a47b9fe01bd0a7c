from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.base_model.nodes import prepare_base_model


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(
                prepare_base_model,
                ["params:model", "params:domain", "validation_tasks", "test_tasks"],
                "base_model_ref",
                name="prepare_base_model",
            )
        ]
    )
