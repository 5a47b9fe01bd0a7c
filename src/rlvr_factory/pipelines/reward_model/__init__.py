from rlvr_factory.pipelines.reward_model.pipeline import create_overoptimisation_pipeline, create_pipeline

__all__ = ["create_overoptimisation_pipeline", "create_pipeline"]
