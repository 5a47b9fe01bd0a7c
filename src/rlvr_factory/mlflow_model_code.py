"""The file MLflow runs to build the logged policy model when it loads it (models from code;
see `mlflow_model.log_policy_model`)."""

import mlflow

from rlvr_factory.mlflow_model import PolicyModel

mlflow.models.set_model(PolicyModel())
