from kedro.pipeline import Node, Pipeline

from rlvr_factory.audit.plot import plot_reward_audit
from rlvr_factory.pipelines.curate.nodes import audit_rewards, curate_preferences, curate_tasks, split_tasks


def create_pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(curate_tasks, ["params:domain", "params:curate", "params:verify", "flywheel_pool"],
                 ["curated_tasks", "curated_quarantine", "curate_metrics"], name="curate_tasks"),
            Node(audit_rewards, ["curated_tasks", "curated_quarantine", "params:domain", "params:curate", "params:verify"],
                 ["tasks", "curate_quarantine", "reward_audit", "reward_audit_metrics"], name="audit_rewards"),
            Node(plot_reward_audit, "reward_audit", "reward_audit_plot", name="plot_reward_audit"),
            Node(split_tasks, "tasks", ["train_tasks", "validation_tasks", "test_tasks"], name="split_tasks"),
        ]
    )


def create_preference_pipeline() -> Pipeline:
    """Preference pairs, curated like tasks (after the base model, whose context bounds a pair's length)."""
    return Pipeline(
        [
            Node(curate_preferences, ["tasks", "base_model_ref", "params:domain", "params:preferences"],
                 ["preference_pairs", "preference_quarantine", "preference_metrics"], name="curate_preferences"),
        ]
    )
