from rlvr_factory.pipelines.flywheel.pipeline import create_pipeline

__all__ = ["create_pipeline"]
