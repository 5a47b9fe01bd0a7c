"""Tiny policies trained in a second or two to act in a known way, for driving real episodes."""

from __future__ import annotations

from functools import lru_cache

from rlvr_factory.models.policy import Policy
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.sft import SFTConfig, encode_demonstrations, supervised_train
from tests.conftest import make_tiny_policy

PROMPTS = ["Compute 12+30", "Compute 7*6", "Compute 50-8"]
EXPRESSIONS = ["12+30", "7*6", "50-8"]


@lru_cache(maxsize=None)
def _trained(demonstrations: tuple[tuple[str, ...], ...], steps: int) -> dict:
    seed_everything(0)
    policy = make_tiny_policy(seed=0)
    examples = encode_demonstrations(policy.tokenizer, PROMPTS, [list(d) for d in demonstrations])
    supervised_train(policy, examples * 4, SFTConfig(steps=steps, batch_size=6, lr=1e-2, warmup_steps=5, seed=0), desc="fixture")
    return {k: v.clone() for k, v in policy.model.state_dict().items()}


def trained_policy(demonstrations: list[list[str]], steps: int = 150) -> Policy:
    """A fresh tiny policy fine-tuned (deterministically, cached per process) on one demonstration per prompt of PROMPTS."""
    policy = make_tiny_policy(seed=0)
    policy.model.load_state_dict(_trained(tuple(tuple(d) for d in demonstrations), steps))
    policy.model.eval()
    return policy


def calculator_user() -> Policy:
    """Calls the calculator with the prompt's expression, then boxes the result."""
    return trained_policy([[f"<calc>{e}</calc>", f"<result>{v}</result>", f"\\boxed{{{v}}}"]
                           for e, v in zip(EXPRESSIONS, (42, 42, 42))])


def tool_spammer() -> Policy:
    """Calls the calculator after every observation and never answers."""
    return trained_policy([["<calc>1+1</calc>", "<result>2</result>", "<calc>1+1</calc>", "<result>2</result>",
                            "<calc>1+1</calc>"]] * len(PROMPTS))
