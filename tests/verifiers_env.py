"""What the tests that run `verifiers` share: its venv (skipping the module without it) and the example taskset's
answers, and a policy that half knows one of them."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
import torch

from tests.conftest import make_scripted_policy


def verifiers_venv() -> Path:
    """The verifiers venv (scripts/install_verifiers.sh). Without it the calling module is skipped, unless
    RLVR_REQUIRE_VERIFIERS is set (CI sets it), where it fails."""
    venv = Path(os.environ.get("RLVR_VERIFIERS_VENV", Path(__file__).parents[1] / ".venv-verifiers")).resolve()
    if not (venv / "bin" / "vf-eval").exists():
        if os.environ.get("RLVR_REQUIRE_VERIFIERS"):
            raise RuntimeError(f"RLVR_REQUIRE_VERIFIERS is set but {venv} has no vf-eval (scripts/install_verifiers.sh)")
        pytest.skip(f"verifiers is not installed in {venv} (bash scripts/install_verifiers.sh)", allow_module_level=True)
    return venv


def sums_answers(seed: int = 0, n: int = 4) -> list[str]:
    """The answers of the example taskset's first tasks (its own generator: a seeded `random.Random`)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        out.append(str(a + b))
    return out


def half_right_policy(answer: str):
    """A tiny Llama that, after the generation prompt, writes `answer` then EOS about half the time (the first
    token's logit lowered to 5.5 against 259 others at 0), and garbage otherwise. (The final RMS norm scales
    the one-hot residual by sqrt(hidden size), so the weight is 5.5 over that.)"""
    policy = make_scripted_policy(answer)
    first = policy.tokenizer(answer)["input_ids"][0]
    with torch.no_grad():
        row = policy.model.lm_head.weight[first]
        row[row == 100.0] = 5.5 / policy.model.config.hidden_size ** 0.5
    return policy
