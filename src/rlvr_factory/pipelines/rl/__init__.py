from rlvr_factory.pipelines.rl.pipeline import create_pipeline

__all__ = ["create_pipeline"]
