from rlvr_factory.pipelines.base_model.pipeline import create_pipeline

__all__ = ["create_pipeline"]
