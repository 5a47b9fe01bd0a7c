"""Reward models: a scalar head on a causal LM's backbone, or any HF sequence-classification model.

A reward model is an `AutoModelForSequenceClassification` with one label: r(x, y) is its logit
at the last token of the chat-formatted prompt and completion (the completion's EOS). It lives
in a `Policy` (model + tokenizer), is saved as an ordinary HF model directory and loads with
`AutoModelForSequenceClassification.from_pretrained` (or `load_reward_model`).
"""

from __future__ import annotations

import copy

import torch
from transformers import AutoModelForSequenceClassification

from rlvr_factory.models.lora import is_lora, merged_copy
from rlvr_factory.models.policy import Policy, load_policy


def _with_pad(policy: Policy) -> Policy:
    """The model knows the tokenizer's pad id, which marks where each sequence ends."""
    if policy.tokenizer.pad_token is None:
        policy.tokenizer.pad_token = policy.tokenizer.eos_token
    policy.model.config.pad_token_id = policy.tokenizer.pad_token_id
    return policy


def reward_model_from_policy(policy: Policy, seed: int = 0) -> Policy:
    """A reward model on the policy's backbone: its transformer weights, a fresh scalar head (seeded).

    The policy is left untouched (a LoRA policy is merged into a copy first).
    """
    lm = merged_copy(policy.model) if is_lora(policy.model) else policy.model
    config = copy.deepcopy(lm.config)
    config.num_labels = 1
    config.problem_type = "regression"
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    backbone, source = getattr(model, model.base_model_prefix), getattr(lm, lm.base_model_prefix)
    backbone.load_state_dict(source.state_dict())
    return _with_pad(Policy(model.to(policy.device), copy.deepcopy(policy.tokenizer)))


def load_reward_model(path: str, device: str = "auto", dtype: str = "float32") -> Policy:
    """A reward model from an HF directory or hub id; a classifier with more than one label is refused."""
    policy = load_policy(path, device=device, dtype=dtype, model_class=AutoModelForSequenceClassification)
    if policy.model.config.num_labels != 1:
        raise ValueError(f"{path} is a classifier with {policy.model.config.num_labels} labels; a reward model "
                         "has one (load it with num_labels=1 and train it on pairs)")
    return _with_pad(policy)


def sequence_rewards(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """r(x, y) of each right-padded row: the model's scalar at its last token, in float32."""
    return model(input_ids=ids, attention_mask=attention).logits[:, 0].float()
