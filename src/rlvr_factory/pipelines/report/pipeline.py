"""Report: after evaluation, the run's curves, per-domain heatmap, summary, rollout sample and registered model (the `register` station)."""

from kedro.pipeline import Node, Pipeline

from rlvr_factory.pipelines.report.nodes import (
    domain_table,
    plot_domain_heatmap,
    plot_round_curves,
    record_run,
    register_policy,
    render_part_views,
    round_curves,
    sample_rollouts,
    sft_validation_accuracy,
    summarize,
)


def create_pipeline() -> Pipeline:
    """The report of a run (it samples every round's scored rollouts, `round.scored`, a folder per round)."""
    return Pipeline(
        [
            Node(sft_validation_accuracy,
                 ["sft_policy", "validation_tasks", "params:domain", "params:verify", "params:evaluate",
                  "params:rollout"], "sft_validation", name="sft_validation_accuracy"),
            Node(round_curves, ["round_history", "sft_validation"], "round_curves", name="round_curves"),
            Node(plot_round_curves, "round_curves", "round_curve_plot", name="plot_round_curves"),
            Node(domain_table, ["round.domain_levels", "params:rl"], "domain_rounds", name="domain_table"),
            Node(plot_domain_heatmap, "domain_rounds", "domain_heatmap", name="plot_domain_heatmap"),
            Node(summarize, ["eval_report", "sft_validation"], "summary_metrics", name="summarize"),
            Node(sample_rollouts, ["params:report", "round.scored", "params:rl"], "rollout_sample", name="sample_rollouts"),
            Node(render_part_views, ["rollout_sample", "train_tasks", "params:domain", "params:report"], "part_views",
                 name="render_part_views"),
            Node(record_run, ["eval_report", "round_history"], None, name="record_run"),
            Node(register_policy, ["rl_policy", "eval_report", "params:report", "params:evaluate"], None,
                 name="register_policy"),
        ]
    )
