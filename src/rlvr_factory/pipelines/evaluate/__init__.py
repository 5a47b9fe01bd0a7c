from rlvr_factory.pipelines.evaluate.pipeline import create_pipeline

__all__ = ["create_pipeline"]
