"""Report: after evaluation, the run's curves, summary, rollout sample and registered model (the `register` station)."""

from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.report.nodes import (
    plot_round_curves,
    record_run,
    register_policy,
    round_curves,
    sample_rollouts,
    sft_validation_accuracy,
    summarize,
)


def create_pipeline(rounds: int) -> Pipeline:
    """The report of a run of `rounds` RL rounds (it samples every round's scored rollouts)."""
    scored = [f"round_{k:03d}.scored" for k in range(rounds)]
    return Pipeline(
        [
            Node(sft_validation_accuracy,
                 ["sft_policy", "validation_tasks", "params:domain", "params:verify", "params:evaluate"],
                 "sft_validation", name="sft_validation_accuracy"),
            Node(round_curves, ["round_history", "sft_validation"], "round_curves", name="round_curves"),
            Node(plot_round_curves, "round_curves", "round_curve_plot", name="plot_round_curves"),
            Node(summarize, ["eval_report", "sft_validation"], "summary_metrics", name="summarize"),
            Node(sample_rollouts, ["params:report", *scored], "rollout_sample", name="sample_rollouts"),
            Node(record_run, ["eval_report", "round_history"], None, name="record_run"),
            Node(register_policy, ["rl_policy", "eval_report", "params:report", "params:evaluate"], None,
                 name="register_policy"),
        ]
    )
