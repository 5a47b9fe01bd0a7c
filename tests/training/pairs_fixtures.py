"""Tiny preference data for the trainer tests: worked solutions preferred to bare answers."""

from __future__ import annotations

import random

import torch

from rlvr_factory.preferences import PreferencePair
from rlvr_factory.training.pairs import encode_pairs


def toy_pairs(n: int, seed: int = 0, split: str = "train") -> list[PreferencePair]:
    """`Compute a+b`: the worked solution (chosen) vs a wrong bare answer (rejected)."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        pairs.append(PreferencePair(f"{split}-{i}", f"Compute {a}+{b}", f"{a}+{b}={a + b}\n\\boxed{{{a + b}}}",
                                    f"\\boxed{{{a + b + 1}}}", split=split, kind="direct_wrong" if i % 2 else "x"))
    return pairs


def encoded(tokenizer, n: int, seed: int = 0, split: str = "train"):
    return encode_pairs(tokenizer, toy_pairs(n, seed, split))


def count_optimizer_steps(monkeypatch, die_at: int | None = None) -> dict[str, int]:
    """Count AdamW steps from now on (`["n"]`); with `die_at`, that step raises KeyboardInterrupt
    instead (a run killed mid-training). Undo with `monkeypatch.undo()` or call again."""
    real_step = getattr(torch.optim.AdamW.step, "_real", torch.optim.AdamW.step)
    calls = {"n": 0}

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == die_at:
            raise KeyboardInterrupt("killed")
        return real_step(self, *args, **kwargs)

    counted._real = real_step
    monkeypatch.setattr(torch.optim.AdamW, "step", counted)
    return calls
