"""Preference: DPO from the curated pairs, then SFT vs DPO on the test split."""

from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.evaluate.nodes import evaluate_on_test
from rlvr_factory.pipelines.evaluate.pipeline import PARAMS
from rlvr_factory.pipelines.preference.nodes import dpo_fine_tune, preference_report


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(dpo_fine_tune, ["sft_policy", "preference_pairs", "params:model", "params:dpo"],
                 ["dpo_policy", "dpo_metrics", "dpo_summary"], name="dpo_fine_tune"),
            Node(evaluate_on_test, ["sft_policy", *PARAMS], "sft_eval", name="evaluate_sft"),
            Node(evaluate_on_test, ["dpo_policy", *PARAMS], "dpo_eval", name="evaluate_dpo"),
            Node(preference_report, ["sft_eval", "dpo_eval", "dpo_summary"],
                 ["preference_report", "preference_eval_metrics"], name="preference_report"),
        ]
    )
