"""Kedro datasets for the objects the pipeline passes between stages."""

from rlvr_factory.datasets.jsonl_dataset import JSONLinesDataset
from rlvr_factory.datasets.policy_dataset import PolicyDataset

__all__ = ["JSONLinesDataset", "PolicyDataset"]
