"""Reward models: a scalar head on a causal LM's backbone, any HF sequence-classification model, or
an implicit reward read from a causal LM's likelihood against a frozen reference.

Two ways to read r(x, y) off a model (`reward_model.head`):

* `scalar`: an `AutoModelForSequenceClassification` with one label; r(x, y) is its logit at the
  last token of the chat-formatted prompt and completion (the completion's EOS). Saved as an
  ordinary HF model directory, loaded with `AutoModelForSequenceClassification.from_pretrained`.
* `implicit`: an `ImplicitRewardModel`, r(x, y) = beta (log pi(y|x) - log pi_ref(y|x)) summed over
  the completion's tokens, pi a causal LM trained on the pairs and pi_ref its frozen copy as
  training started (Rafailov et al. 2023, "Your language model is secretly a reward model": the
  Bradley-Terry loss on this reward is DPO's loss). It reads preferences through the LM's own
  next-token predictions, which already check what a fresh head has to learn. Saved as two
  causal-LM directories: pi's at the path (its config records `implicit_reward`), pi_ref's in
  `reference/` beneath it.

Either lives in a `Policy` (model + tokenizer) and loads with `load_reward_model`;
`sequence_rewards` reads r from both.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from rlvr_factory.models.lora import is_lora, merged_copy, served_model
from rlvr_factory.models.policy import Policy, freeze, load_policy
from rlvr_factory.preferences.contract import finite_number


def _with_pad(policy: Policy) -> Policy:
    """The model knows the tokenizer's pad id, which marks where each sequence ends."""
    if policy.tokenizer.pad_token is None:
        policy.tokenizer.pad_token = policy.tokenizer.eos_token
    policy.model.config.pad_token_id = policy.tokenizer.pad_token_id
    return policy


HEADS = ("scalar", "implicit")
IMPLICIT_KEY = "implicit_reward"  # an implicit reward model's config record: {"beta": ..., "reference": dir}
REFERENCE_DIR = "reference"
STATS_KEY = "reward_stats"  # the config's record of the held-out reward mean and std: {"mean": ..., "std": ...}


def reward_stats(mean: Any, std: Any, where: str) -> dict[str, float]:
    """The statistics record `{mean, std}` a reward model is standardised by: both finite numbers, `std` > 0.
    Anything else is refused (ValueError naming `where` and the key): a NaN or infinite mean or std would
    turn every reward into NaN or 0, a negative std would flip every reward."""
    for key, value in (("mean", mean), ("std", std)):
        try:
            number = finite_number(value, f"{where}: {STATS_KEY}.{key}")
        except ValueError as e:
            raise ValueError(f"{e}; retrain the reward model, or correct or remove {STATS_KEY}") from None
        if key == "std" and number <= 0:
            raise ValueError(f"{where}: {STATS_KEY}.std is {value!r}; the spread of the rewards must be > 0 (a "
                             f"reward model that gives every completion the same reward ranks nothing)")
    return {"mean": float(mean), "std": float(std)}


def saved_reward_stats(config: Any, where: str) -> dict[str, float]:
    """The statistics a reward model's config records (empty when it records none), checked as `reward_stats`."""
    record = getattr(config, STATS_KEY, None)
    if record is None:
        return {}
    if not isinstance(record, dict) or set(record) != {"mean", "std"}:
        raise ValueError(f"{where}: {STATS_KEY} must be {{\"mean\": <number>, \"std\": <number > 0>}}, got {record!r}")
    return reward_stats(record["mean"], record["std"], where)


class ImplicitRewardModel(torch.nn.Module):
    """r(x, y) = beta (log pi(y|x) - log pi_ref(y|x)) over the completion tokens (`mask`).

    `policy` is trained; `reference` stays frozen (no gradient, eval mode). `config` is the
    policy's, with `implicit_reward` recorded, so the model's context and the saved reward
    statistics read as for a scalar-head model.
    """

    def __init__(self, policy: torch.nn.Module, reference: torch.nn.Module, beta: float) -> None:
        super().__init__()
        if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < math.inf:
            raise ValueError(f"an implicit reward needs a finite beta > 0, got {beta!r}")
        self.policy = policy
        self.reference = freeze(reference)
        self.beta = float(beta)
        self.config = policy.config
        setattr(self.config, IMPLICIT_KEY, {"beta": self.beta, "reference": REFERENCE_DIR})

    def train(self, mode: bool = True) -> ImplicitRewardModel:
        super().train(mode)
        self.reference.eval()
        return self

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.policy.get_input_embeddings()

    def rewards(self, ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """r(x, y) of each right-padded row, `mask` 1 on its completion tokens, in float32."""
        from rlvr_factory.rl.preference import implicit_rewards, sequence_logps
        from rlvr_factory.training.lm import token_logprobs

        logp, _ = token_logprobs(self.policy, ids, attention, positions=mask)
        with torch.no_grad():
            ref, _ = token_logprobs(self.reference, ids, attention, positions=mask)
        return implicit_rewards(sequence_logps(logp, mask), sequence_logps(ref, mask), self.beta).float()

    def save_pretrained(self, path: str | Path, **kwargs: Any) -> None:
        """pi's HF directory at `path`, pi_ref's in `path/reference`."""
        self.policy.save_pretrained(path, **kwargs)
        self.reference.save_pretrained(Path(path) / REFERENCE_DIR, **kwargs)

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> ImplicitRewardModel:
        """Load what `save_pretrained` wrote (`kwargs` go to both `AutoModelForCausalLM.from_pretrained`)."""
        record = implicit_record(path)
        if record is None:
            raise ValueError(f"{path} is not an implicit reward model (its config.json has no {IMPLICIT_KEY!r})")
        reference = Path(path) / record.get("reference", REFERENCE_DIR)
        if not (reference / "config.json").exists():
            raise FileNotFoundError(f"the implicit reward model at {path} lacks its reference model ({reference})")
        return cls(AutoModelForCausalLM.from_pretrained(str(path), **kwargs),
                   AutoModelForCausalLM.from_pretrained(str(reference), **kwargs), record["beta"])


def implicit_record(path: str | Path) -> dict[str, Any] | None:
    """The `implicit_reward` record of the model directory at `path`, or None (a scalar-head model, a hub id)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    return json.loads(config.read_text()).get(IMPLICIT_KEY)


def implicit_reward_model(policy: Policy, beta: float) -> Policy:
    """An implicit reward model from a causal-LM policy: pi starts as a copy of it, pi_ref is a frozen copy.

    The policy is left untouched (a LoRA policy is merged into the copies first).
    """
    lm = merged_copy(policy.model) if is_lora(policy.model) else copy.deepcopy(policy.model)
    model = ImplicitRewardModel(lm, copy.deepcopy(lm), beta)
    return _with_pad(Policy(model.to(policy.device), copy.deepcopy(policy.tokenizer)))


def reward_model_from_policy(policy: Policy, seed: int = 0, head: str = "scalar", beta: float = 0.1) -> Policy:
    """A reward model on the policy's backbone: with `head: scalar` its transformer weights and a
    fresh scalar head (seeded); with `head: implicit` an `ImplicitRewardModel` (`beta`) from it.

    The policy is left untouched (a LoRA policy is merged into a copy first).
    """
    if head not in HEADS:
        raise ValueError(f"reward_model.head must be one of {HEADS}, got {head!r}")
    if head == "implicit":
        return implicit_reward_model(policy, beta)
    lm = served_model(policy.model)
    config = copy.deepcopy(lm.config)
    config.num_labels = 1
    config.problem_type = "regression"
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    backbone, source = getattr(model, model.base_model_prefix), getattr(lm, lm.base_model_prefix)
    backbone.load_state_dict(source.state_dict())
    return _with_pad(Policy(model.to(policy.device), copy.deepcopy(policy.tokenizer)))


def load_reward_model(path: str, device: str = "auto", dtype: str = "float32") -> Policy:
    """A reward model from an HF directory or hub id: an implicit one when its config records
    `implicit_reward`, else a sequence classifier. Refused: a classifier with more than one label,
    and reward statistics that are not finite or give a non-positive std (`reward_stats`)."""
    if implicit_record(path) is not None:
        policy = load_policy(path, device=device, dtype=dtype, model_class=ImplicitRewardModel)
    else:
        policy = load_policy(path, device=device, dtype=dtype, model_class=AutoModelForSequenceClassification)
        if policy.model.config.num_labels != 1:
            raise ValueError(f"{path} is a classifier with {policy.model.config.num_labels} labels; a reward model "
                             "has one (load it with num_labels=1 and train it on pairs)")
    saved_reward_stats(policy.model.config, str(Path(path) / "config.json"))
    return _with_pad(policy)


def sequence_rewards(model: torch.nn.Module, ids: torch.Tensor, attention: torch.Tensor,
                     mask: torch.Tensor | None = None) -> torch.Tensor:
    """r(x, y) of each right-padded row, in float32: a scalar-head model's logit at the row's last
    token, or an implicit reward model's log-ratio over the completion (`mask`: 1 on its tokens)."""
    if isinstance(model, ImplicitRewardModel):
        if mask is None:
            raise ValueError("an implicit reward model needs the completion mask to score a row")
        return model.rewards(ids, attention, mask)
    return model(input_ids=ids, attention_mask=attention).logits[:, 0].float()
