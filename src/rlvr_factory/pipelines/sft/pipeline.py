from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.sft.nodes import build_sft_examples, supervised_fine_tune


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(build_sft_examples, ["train_tasks", "params:domain", "params:sft"], "sft_examples", name="build_sft_examples"),
            Node(
                supervised_fine_tune,
                ["base_model_ref", "sft_examples", "params:model", "params:sft", "params:rollout"],
                ["sft_policy", "sft_loss_curve"],
                name="supervised_fine_tune",
            ),
        ]
    )
