from rlvr_factory.pipelines.curate.pipeline import create_pipeline, create_preference_pipeline

__all__ = ["create_pipeline", "create_preference_pipeline"]
