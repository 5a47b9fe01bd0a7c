"""Reward model: fit on the curated pairs, then log it; and the over-optimisation report of an RL run."""

from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.reward_model.nodes import (
    fit_reward_model, log_reward_model, overoptimisation_curve, plot_overoptimisation,
)


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(fit_reward_model, ["sft_policy", "preference_pairs", "params:model", "params:reward_model"],
                 ["reward_model", "reward_model_metrics", "reward_model_report"], name="train_reward_model"),
            Node(log_reward_model, ["reward_model", "reward_model_report"], None, name="log_reward_model"),
        ]
    )


def create_overoptimisation_pipeline() -> Pipeline:
    """Proxy vs gold per round of the RL run (the Gao et al. 2022 curve), from the round history."""
    return Pipeline(
        [
            Node(overoptimisation_curve, "round_history", ["overoptimisation_curve", "overoptimisation_summary"],
                 name="overoptimisation_curve"),
            Node(plot_overoptimisation, ["overoptimisation_curve", "overoptimisation_summary"],
                 "overoptimisation_plot", name="plot_overoptimisation"),
        ]
    )
