"""Math answer verification: extract the final answer, then compare it exactly with sympy.

Extraction takes the last brace-matched ``\\boxed{...}``, else the last ``Answer: ...``.
Equivalence is exact rational arithmetic through sympy, so ``0.50``, ``1/2`` and ``2/4``
all match ``1/2``; answers that are not numbers fall back to a normalised string match.
"""

from __future__ import annotations

import re
from functools import lru_cache

import sympy

from rlvr_factory.verifiers.score import Score

MAX_ANSWER_CHARS = 200
_ANSWER_LINE = re.compile(r"\banswer\b\s*(?:is\b|[:=])\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(/[+-]?\d+)?$")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` with matched braces, or None."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_answer(text: str) -> str | None:
    """The final answer a completion states, or None when it states none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    lines = _ANSWER_LINE.findall(text)
    return lines[-1].strip().rstrip(".") if lines else None


@lru_cache(maxsize=65536)
def as_rational(answer: str) -> sympy.Rational | None:
    """An exact rational for a plain number (``-12``, ``3.50``, ``1,000``, ``2/4``), else None."""
    compact = answer.replace(",", "").replace(" ", "").replace("$", "")
    if len(compact) > MAX_ANSWER_CHARS or not _NUMBER.match(compact):
        return None
    try:
        return sympy.Rational(compact)
    except ZeroDivisionError:
        return None


def answers_match(predicted: str, gold: str) -> bool:
    """Whether a predicted final answer equals the gold one (exact, sympy-rational)."""
    p, g = as_rational(predicted), as_rational(gold)
    if p is not None and g is not None:
        return p == g
    return " ".join(predicted.split()).lower() == " ".join(gold.split()).lower()


class MathVerifier:
    """Outcome reward for math: 1 when the stated final answer equals the gold answer."""

    def __init__(self, format_weight: float = 0.0) -> None:
        self.format_weight = format_weight  # reward share for stating an answer at all

    def score(self, completion: str, gold: str) -> Score:
        """Score one completion; a missing answer is wrong, never an error."""
        predicted = extract_answer(completion)
        has_format = predicted is not None
        correct = has_format and answers_match(predicted, gold)
        outcome = float(correct)
        fmt = float(has_format)
        reward = (1.0 - self.format_weight) * outcome + self.format_weight * fmt
        return Score(reward=reward, correct=correct, breakdown={"outcome": outcome, "format": fmt})
