"""Preference: DPO (or IPO) from the curated pairs against the frozen SFT policy, and the report
comparing the DPO policy with the SFT policy on the test split."""

from __future__ import annotations

import logging

import pandas as pd
from transformers import AutoModelForCausalLM

from rlvr_factory.models.lora import with_lora
from rlvr_factory.models.policy import Policy
from rlvr_factory.parameters import DPOBlockConfig, ModelConfig
from rlvr_factory.pipelines.reward_model.nodes import metric_history, split_pairs
from rlvr_factory.training.dpo import DPOConfig, train_dpo
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.pairs import Checkpoint

log = logging.getLogger(__name__)
CURVES = ("loss", "accuracy", "margin", "chosen_reward", "rejected_reward", "val_accuracy", "val_margin", "val_loss",
          "lr")


def dpo_fine_tune(sft_policy: Policy, preference_pairs: pd.DataFrame, model: ModelConfig, dpo: DPOBlockConfig
                  ) -> tuple[Policy, dict, dict]:
    """Optimise the SFT policy (with LoRA adapters when `model.lora.enabled`) on the train pairs
    against itself as the frozen reference; returns the policy, the MLflow curves and a summary
    with the held-out chosen-vs-rejected margin and accuracy."""
    config = DPOConfig.from_params(dpo)
    seed_everything(config.train.seed)
    policy = Policy(with_lora(sft_policy.model, model.lora), sft_policy.tokenizer)
    train, held_out = split_pairs(preference_pairs, policy.tokenizer)
    history = train_dpo(policy, train, held_out, config, Checkpoint(dpo.checkpoint_dir, AutoModelForCausalLM))
    final = history[-1]
    summary = {k: v for k, v in final.items() if k.startswith("val_")}
    summary.update(loss=config.loss, beta=config.beta, label_smoothing=config.label_smoothing,
                   train_pairs=len(train), validation_pairs=len(held_out), steps=config.train.steps)
    log.info("%s: held-out margin %.3f, accuracy %.3f", config.loss, summary["val_margin"], summary["val_accuracy"])
    return policy, metric_history(history, CURVES), summary


def preference_report(sft_eval: dict, dpo_eval: dict, dpo_summary: dict) -> tuple[dict, dict]:
    """`preference.json`: SFT vs DPO on the test split and the held-out pair metrics, and its MLflow metrics."""
    report = {"sft": sft_eval, "dpo": dpo_eval, "pairs": dpo_summary,
              "dpo_minus_sft_greedy_accuracy": dpo_eval["greedy_accuracy"] - sft_eval["greedy_accuracy"]}
    flat = {f"{stage}.{k}": v for stage in ("sft", "dpo") for k, v in report[stage].items()}
    flat.update({f"pairs.{k}": v for k, v in dpo_summary.items() if isinstance(v, (int, float))})
    flat["dpo_minus_sft_greedy_accuracy"] = report["dpo_minus_sft_greedy_accuracy"]
    metrics = {k.replace("@", "_at_").replace("/", "."): {"value": float(v), "step": 0} for k, v in flat.items()}
    log.info("preference: test greedy accuracy SFT %.3f -> DPO %.3f", sft_eval["greedy_accuracy"],
             dpo_eval["greedy_accuracy"])
    return report, metrics
