from rlvr_factory.pipelines.preference.pipeline import create_pipeline

__all__ = ["create_pipeline"]
