"""A Kedro dataset for a reward model saved as an HF sequence-classification directory."""

from __future__ import annotations

from rlvr_factory.datasets.policy_dataset import PolicyDataset
from rlvr_factory.models.policy import Policy
from rlvr_factory.models.reward_model import load_reward_model


class RewardModelDataset(PolicyDataset):
    """Saves like a policy (`save_pretrained`, model and tokenizer); loads with
    `AutoModelForSequenceClassification` (one label: the reward)."""

    def load(self) -> Policy:
        return load_reward_model(str(self._path), self._device, self._dtype)
