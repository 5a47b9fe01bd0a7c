"""A verifier's verdict: the reward, whether the answer is right, its breakdown and a status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

SCORE_STATUSES = ("ok", "timeout", "error", "infra_error")


@dataclass(frozen=True)
class Score:
    """A verifier's verdict on one completion.

    `status` separates a judged answer (`ok`) from a verifier that could not judge it
    (`timeout`, `error`) and from an infrastructure failure (`infra_error`), which is
    never scored as a wrong answer: the RL update leaves it out of the loss. The breakdown
    holds numbers, and may name why a verdict is what it is (e.g. the CAD verifier's
    `cad_status` and `reason` strings). `message` says why a check did not end `ok` (empty
    when it did, or when there is nothing to add).
    """

    reward: float
    correct: bool
    status: str = "ok"
    breakdown: dict[str, float | str] = field(default_factory=dict)
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in SCORE_STATUSES:
            raise ValueError(f"status must be one of {SCORE_STATUSES}, got {self.status!r}")


WEIGHT_PREFIX = "weight."  # a breakdown key `weight.<name>` declares the reward component `<name>` and its weight


def declare_weights(**weights: float) -> dict[str, float]:
    """The breakdown entries that declare reward components with their weights (`weight.<name>`)."""
    return {f"{WEIGHT_PREFIX}{name}": float(w) for name, w in weights.items()}


def declared_components(breakdown: Mapping[str, float]) -> dict[str, tuple[float, float]]:
    """The reward components a breakdown declares, `name -> (value, weight)`: every `weight.<name>`
    key with its `<name>` value (0 when absent). Empty when the verifier declares none."""
    return {
        key[len(WEIGHT_PREFIX):]: (float(breakdown.get(key[len(WEIGHT_PREFIX):], 0.0)), float(weight))
        for key, weight in sorted(breakdown.items()) if key.startswith(WEIGHT_PREFIX)
    }
