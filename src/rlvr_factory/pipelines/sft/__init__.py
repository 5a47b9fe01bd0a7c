from rlvr_factory.pipelines.sft.pipeline import create_pipeline

__all__ = ["create_pipeline"]
