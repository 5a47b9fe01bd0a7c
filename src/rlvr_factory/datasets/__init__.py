"""Kedro datasets for the objects the pipeline passes between stages."""

from rlvr_factory.datasets.figure_folder import FigureFolderDataset
from rlvr_factory.datasets.jsonl_dataset import JSONLinesDataset
from rlvr_factory.datasets.mlflow_metrics import BatchedMetricsHistoryDataset
from rlvr_factory.datasets.policy_dataset import PolicyDataset
from rlvr_factory.datasets.reward_model_dataset import RewardModelDataset
from rlvr_factory.datasets.round_table import RoundTableDataset

__all__ = ["BatchedMetricsHistoryDataset", "FigureFolderDataset", "JSONLinesDataset", "PolicyDataset", "RewardModelDataset",
           "RoundTableDataset"]
