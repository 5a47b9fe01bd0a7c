"""MATH-format competition problems (Hendrycks et al. 2021): problem, worked solution with
`\\boxed{}`, answer, subject and level; difficulty is the level (1-5).

The reward is the math verifier's on the final answer. MATH-500 (the PRM800K test subset)
ships in `shared:math500/test.jsonl`.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.loaders import LoadedDomain, required_text
from rlvr_factory.verifiers.math import MathVerifier, extract_answer, last_boxed, normalise
from rlvr_factory.verifiers.score import Score

_LEVEL = re.compile(r"^\s*(?:level\s*)?([1-9])\s*$", re.IGNORECASE)


def reference_answer(reference: Any) -> str:
    """A math reference's answer: the string under ``answer`` (a ValueError otherwise, saying what it got)."""
    answer = reference.get("answer") if isinstance(reference, dict) else None
    if not isinstance(answer, str):
        got = type(answer).__name__ if isinstance(reference, dict) else f"a {type(reference).__name__} reference"
        raise ValueError(f"a reference needs 'answer', a string; got {got}")
    return answer


def math_answer_key(completion: str) -> str | None:
    """The completion's final answer in canonical spelling (for majority voting), or None."""
    answer = extract_answer(completion)
    return normalise(answer) if answer else None


class MathDomain(LoadedDomain):
    """MATH-format problems read from JSONL, Parquet or a Hugging Face dataset."""

    name = "math"
    verifier_class = MathVerifier  # the reward: the math verifier on the final answer

    def record_to_row(self, record: dict[str, Any]) -> dict[str, Any]:
        """Prompt = problem; reference = answer (else the solution's last box), solution, subject; difficulty = level."""
        solution = required_text(record, "solution")
        answer = record.get("answer") or last_boxed(solution)
        if not isinstance(answer, str) or not answer.strip():
            raise ValueError("no answer: neither an 'answer' field nor a \\boxed{} in the solution")
        level = record.get("level")
        difficulty = None
        if level is not None:
            match = _LEVEL.match(str(level))
            if match is None:
                raise ValueError(f"level must be 1-9 or 'Level n', got {level!r}")
            difficulty = int(match.group(1))
        return {
            "prompt": record.get("problem"),
            "reference": {"answer": answer.strip(), "solution": solution, "subject": record.get("subject")},
            "difficulty": difficulty,
        }

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The reference answer (a ValueError unless it is a string)."""
        return reference_answer(reference)

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The reference solution (it ends with the boxed answer), or the boxed answer alone."""
        return task.reference["solution"] if worked else f"\\boxed{{{task.reference['answer']}}}"

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """The math verifier on the final answer, in this process."""
        return self.verifier.score(completion, self.gold(reference))

    @staticmethod
    def answer_key(completion: str) -> str | None:
        """The final answer in canonical spelling."""
        return math_answer_key(completion)
