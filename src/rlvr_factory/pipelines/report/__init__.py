from rlvr_factory.pipelines.report.pipeline import create_pipeline

__all__ = ["create_pipeline"]
