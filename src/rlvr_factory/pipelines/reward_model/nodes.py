"""Reward model: Bradley-Terry training on the preference pairs, its held-out accuracy, its MLflow
record; and the over-optimisation report of a run trained on it."""

from __future__ import annotations

import logging

import mlflow
import pandas as pd
import torch
from matplotlib.figure import Figure
from transformers import AutoModelForSequenceClassification

from rlvr_factory import mlflow_model
from rlvr_factory.models.policy import Policy, load_policy
from rlvr_factory.models.reward_model import (
    STATS_KEY, ImplicitRewardModel, implicit_reward_model, load_reward_model, reward_model_from_policy, reward_stats,
)
from rlvr_factory.overoptimisation import plot_proxy_gold, proxy_gold_curve, tracking_summary
from rlvr_factory.parameters import ModelConfig, RewardModelBlockConfig
from rlvr_factory.preferences import pairs_from_frame
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.pairs import Checkpoint, encode_pairs
from rlvr_factory.training.reward_model import RewardModelConfig, pair_accuracy, pair_rewards, train_reward_model

log = logging.getLogger(__name__)
POLICY_BACKBONE = "policy"  # reward_model.backbone: a head on the SFT policy's backbone


def split_pairs(preference_pairs: pd.DataFrame, tokenizer) -> tuple[list, list]:
    """The train and validation pairs, tokenized."""
    pairs = pairs_from_frame(preference_pairs)
    train = encode_pairs(tokenizer, [p for p in pairs if p.split == "train"])
    held_out = encode_pairs(tokenizer, [p for p in pairs if p.split == "validation"])
    if not held_out:
        raise ValueError("no validation preference pairs to measure the model on; set preferences.validation_from_train")
    return train, held_out


def metric_history(history: list[dict], keys: tuple[str, ...]) -> dict:
    """Per-step training records as an MLflow metric history (`{name: [{step, value}, ...]}`)."""
    return {k: [{"step": int(r["step"]), "value": float(r[k])} for r in history if k in r] for k in keys
            if any(k in r for r in history)}


def fit_reward_model(sft_policy: Policy, preference_pairs: pd.DataFrame, model: ModelConfig,
                     reward_model: RewardModelBlockConfig) -> tuple[Policy, dict, dict]:
    """Train a reward model on the train pairs. `reward_model.head: scalar` puts a fresh scalar head on
    the SFT policy's backbone (`reward_model.backbone: policy`) or trains the HF sequence-classification
    model `backbone` names; `head: implicit` trains a copy of the SFT policy (or of the causal LM
    `backbone` names) as r = beta log(pi / pi_ref) against its frozen self. Returns the model (its
    config records the held-out reward mean and std), the MLflow curves and the report."""
    config = RewardModelConfig.from_params(reward_model)
    seed_everything(reward_model.seed)
    head, backbone = reward_model.head, reward_model.backbone
    if backbone == POLICY_BACKBONE:
        rm = reward_model_from_policy(sft_policy, reward_model.seed, head, reward_model.beta)
    elif head == "implicit":
        rm = implicit_reward_model(load_policy(backbone, model.device, model.dtype), reward_model.beta)
    else:
        rm = load_reward_model(backbone, model.device, model.dtype)
    train, held_out = split_pairs(preference_pairs, rm.tokenizer)
    model_class = ImplicitRewardModel if head == "implicit" else AutoModelForSequenceClassification
    checkpoint = Checkpoint(reward_model.checkpoint_dir, model_class)
    history = train_reward_model(rm, train, held_out, config, checkpoint)
    with torch.inference_mode():
        rewards = torch.cat([torch.cat(pair_rewards(rm.model, held_out[lo : lo + 64], rm.tokenizer.pad_token_id))
                             for lo in range(0, len(held_out), 64)])
    setattr(rm.model.config, STATS_KEY, reward_stats(float(rewards.mean()), float(rewards.std()),
                                                     "the trained reward model's held-out rewards"))
    report = {**pair_accuracy(rm, held_out, config.eval_batch_size), "train_pairs": len(train),
              "validation_pairs": len(held_out), "steps": config.train.steps, "head": head,
              "train_accuracy_last_50": sum(r["accuracy"] for r in history[-50:]) / len(history[-50:]),
              "reward_stats": getattr(rm.model.config, STATS_KEY)}
    log.info("reward model: held-out pair accuracy %.3f on %d pairs", report["val_accuracy"], len(held_out))
    curves = metric_history(history, ("loss", "accuracy", "margin", "val_accuracy", "val_margin", "lr"))
    return rm, curves, report


def log_reward_model(reward_model: Policy, reward_model_report: dict) -> None:
    """Log the reward model to MLflow (transformers flavour, `reward_model/`) with its held-out metrics."""
    if mlflow.active_run() is None:
        log.warning("no active MLflow run: the reward model is not logged")
        return
    metrics = {f"eval.reward_model.{k.replace('/', '.')}": float(v) for k, v in reward_model_report.items()
               if isinstance(v, (int, float))}
    mlflow_model.log_reward_model(reward_model, metrics)
    mlflow.log_dict(reward_model_report, "reward_model/report.json")


def overoptimisation_curve(round_history: list[dict]) -> tuple[pd.DataFrame, dict]:
    """Proxy and gold per round, and where the gold stopped tracking the proxy."""
    curve = proxy_gold_curve(round_history)
    summary = tracking_summary(curve, learned=all("proxy_reward_mean" in r for r in round_history))
    log.info("over-optimisation: %s", summary["verdict"])
    return curve, summary


def plot_overoptimisation(curve: pd.DataFrame, summary: dict) -> Figure:
    """The proxy-vs-gold figure (Gao et al. 2022), logged to MLflow as a PNG."""
    return plot_proxy_gold(curve, summary)
