from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.evaluate.nodes import build_report, evaluate_on_test
from rlvr_factory.pipelines.flywheel.nodes import evaluate_regression

PARAMS = ["test_tasks", "params:domain", "params:verify", "params:evaluate", "params:rollout"]


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(evaluate_on_test, ["sft_policy", *PARAMS], "sft_eval", name="evaluate_sft"),
            Node(evaluate_on_test, ["rl_policy", *PARAMS], "rl_eval", name="evaluate_rl"),
            Node(evaluate_regression, ["rl_policy", "regression_tasks", "params:domain", "params:verify", "params:evaluate"],
                 "regression_metrics", name="evaluate_regression"),
            Node(build_report, ["sft_eval", "rl_eval", "round_history"], ["eval_report", "eval_metrics"], name="build_report"),
        ]
    )
