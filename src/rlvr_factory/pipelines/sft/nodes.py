"""SFT: demonstrations from the train split, then supervised fine-tuning of the base model."""

from __future__ import annotations

import json
import random

import pandas as pd

from rlvr_factory.domains import DomainConfig, get_domain, tasks_from_frame
from rlvr_factory.models.policy import Policy, load_policy
from rlvr_factory.parameters import ModelConfig, SFTBlockConfig
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.sft import encode_demonstrations, supervised_train


def build_sft_examples(train_tasks: pd.DataFrame, domain: DomainConfig, sft: SFTBlockConfig) -> pd.DataFrame:
    """The first `sft.num_examples` train tasks with a demonstration as completion.

    A seeded `sft.direct_answer_fraction` of them state the answer alone instead of the
    worked solution, like SFT data pooled from teachers of mixed quality; a seeded
    `sft.tool_demonstration_fraction` instead show a tool-using episode (the domain's
    `tool_demonstration`). `turns` holds each demonstration's turns (action, observation, ...).
    """
    env = get_domain(domain)
    rng = random.Random(sft.seed)
    tasks = tasks_from_frame(train_tasks)[: sft.num_examples]
    worked = [rng.random() >= sft.direct_answer_fraction for _ in tasks]
    tool_rng = random.Random(f"{sft.seed}:tool")
    tool = [tool_rng.random() < sft.tool_demonstration_fraction for _ in tasks]
    if any(tool) and not callable(getattr(env, "tool_demonstration", None)):
        raise ValueError(f"sft.tool_demonstration_fraction > 0, but domain {env.name!r} has no tool_demonstration")
    turns = [env.tool_demonstration(t) if use else [env.demonstration(t, worked=w)] for t, w, use in zip(tasks, worked, tool)]
    return pd.DataFrame(
        {"task_id": [t.task_id for t in tasks], "prompt": [t.prompt for t in tasks],
         "completion": ["".join(ts) for ts in turns], "worked": worked, "tool": tool,
         "turns": [json.dumps(ts) for ts in turns]}
    )


def supervised_fine_tune(
    base_model_ref: dict, sft_examples: pd.DataFrame, model: ModelConfig, sft: SFTBlockConfig, rollout: RolloutConfig
) -> tuple[Policy, dict]:
    """Fine-tune the base model on the demonstrations (multi-turn ones rendered as the agent loop renders
    episodes, `rollout.multi_turn.observation_role`), under `model.chat_template` when set (the SFT policy
    keeps it; `sft.action_loss`: which of their actions carry the loss); returns the policy and its loss curve.
    With `sft.num_examples: 0` the policy is the base model unchanged, with no loss curve."""
    seed_everything(sft.train.seed)
    policy = load_policy(base_model_ref["name_or_path"], device=model.device, dtype=model.dtype,
                         chat_template=model.chat_template)
    if sft.num_examples == 0:
        return policy, {}
    demonstrations = [json.loads(t) for t in sft_examples["turns"]]
    examples = encode_demonstrations(policy.tokenizer, list(sft_examples["prompt"]), demonstrations,
                                     rollout.multi_turn.observation_role, sft.action_loss)
    losses = supervised_train(policy, examples, sft.train)
    every = max(1, len(losses) // 100)
    return policy, {"loss": [{"step": i, "value": v} for i, v in enumerate(losses) if i % every == 0 or i == len(losses) - 1]}
