"""GSM8K grade-school word problems (Cobbe et al. 2021): a question and a worked answer whose
last line is `#### n`; the reward is the math verifier's on that final number.

Difficulty is the number of reasoning steps of the reference solution (its lines before
`#### n`, 1 to 8), the only difficulty signal GSM8K's metadata carries.
"""

from __future__ import annotations

import re
from typing import Any

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.loaders import LoadedDomain, required_text
from rlvr_factory.domains.math import math_answer_key, reference_answer
from rlvr_factory.verifiers.math import MathVerifier
from rlvr_factory.verifiers.score import Score

_FINAL = re.compile(r"^[^\S\n]*####[^\S\n]*(\S(?:.*\S)?)[^\S\n]*$", re.MULTILINE)  # within a line, linear
_CALCULATOR = re.compile(r"<<[^<>]*>>")
MAX_DIFFICULTY = 8


class GSM8KDomain(LoadedDomain):
    """GSM8K-format problems read from JSONL, Parquet or a Hugging Face dataset (`openai/gsm8k`, config `main`)."""

    name = "gsm8k"
    verifier_class = MathVerifier  # the reward: the math verifier on the final answer

    def record_to_row(self, record: dict[str, Any]) -> dict[str, Any]:
        """Prompt = question; reference = the final number and the worked solution."""
        solution = required_text(record, "answer")
        finals = _FINAL.findall(solution)
        if not finals:
            raise ValueError("the answer has no final '#### n' line")
        steps = [line for line in solution[: solution.rindex("####")].splitlines() if line.strip()]
        return {
            "prompt": record.get("question"),
            "reference": {"answer": finals[-1].replace(",", ""), "solution": solution},
            "difficulty": min(MAX_DIFFICULTY, max(1, len(steps))),
        }

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The final number (a ValueError unless it is a string)."""
        return reference_answer(reference)

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The worked solution without calculator annotations, ending `#### n`; or `#### n` alone."""
        final = f"#### {task.reference['answer']}"
        return _CALCULATOR.sub("", task.reference["solution"]) if worked else final

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """The math verifier on the final number, in this process."""
        return self.verifier.score(completion, self.gold(reference))

    @staticmethod
    def answer_key(completion: str) -> str | None:
        """The final answer in canonical spelling."""
        return math_answer_key(completion)
