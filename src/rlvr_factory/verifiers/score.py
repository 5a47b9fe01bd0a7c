"""A verifier's verdict: the reward, whether the answer is right, its breakdown and a status."""

from __future__ import annotations

from dataclasses import dataclass, field

SCORE_STATUSES = ("ok", "timeout", "error", "infra_error")


@dataclass(frozen=True)
class Score:
    """A verifier's verdict on one completion.

    `status` separates a judged answer (`ok`) from a verifier that could not judge it
    (`timeout`, `error`) and from an infrastructure failure (`infra_error`), which is
    never scored as a wrong answer: the RL update leaves it out of the loss. `message`
    says why a check did not end `ok` (empty when it did, or when there is nothing to add).
    """

    reward: float
    correct: bool
    status: str = "ok"
    breakdown: dict[str, float] = field(default_factory=dict)
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in SCORE_STATUSES:
            raise ValueError(f"status must be one of {SCORE_STATUSES}, got {self.status!r}")
