"""SFT: demonstrations from the train split, then supervised fine-tuning of the base model."""

from __future__ import annotations

import random

import pandas as pd

from rlvr_factory.domains import get_domain, tasks_from_frame
from rlvr_factory.models.policy import Policy, load_policy
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.sft import SFTConfig, encode_chat_examples, supervised_train


def build_sft_examples(train_tasks: pd.DataFrame, domain: dict, sft: dict) -> pd.DataFrame:
    """The first `sft.num_examples` train tasks with a demonstration as completion.

    A seeded `sft.direct_answer_fraction` of them state the answer alone instead of the
    worked solution, like SFT data pooled from teachers of mixed quality.
    """
    env = get_domain(domain)
    rng = random.Random(sft["seed"])
    tasks = tasks_from_frame(train_tasks)[: sft["num_examples"]]
    worked = [rng.random() >= sft["direct_answer_fraction"] for _ in tasks]
    return pd.DataFrame(
        {"task_id": [t.task_id for t in tasks], "prompt": [t.prompt for t in tasks],
         "completion": [env.demonstration(t, worked=w) for t, w in zip(tasks, worked)], "worked": worked}
    )


def supervised_fine_tune(base_model_ref: dict, sft_examples: pd.DataFrame, model: dict, sft: dict) -> tuple[Policy, dict]:
    """Fine-tune the base model on the demonstrations; returns the policy and its loss curve."""
    seed_everything(sft["train"]["seed"])
    policy = load_policy(base_model_ref["name_or_path"], device=model["device"], dtype=model["dtype"])
    examples = encode_chat_examples(policy.tokenizer, list(sft_examples["prompt"]), list(sft_examples["completion"]))
    losses = supervised_train(policy, examples, SFTConfig(**sft["train"]))
    every = max(1, len(losses) // 100)
    return policy, {"loss": [{"step": i, "value": v} for i, v in enumerate(losses) if i % every == 0 or i == len(losses) - 1]}
