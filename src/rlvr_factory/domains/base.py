"""The task contract and the domain interface every domain implements."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import pandas as pd

from rlvr_factory.verifiers.pool import Verifier
from rlvr_factory.verifiers.score import Score

TASK_COLUMNS = ["task_id", "domain", "prompt", "reference", "difficulty", "split", "source"]


@dataclass(frozen=True)
class Task:
    """One task: a prompt, the reference its verifier checks against, and its labels."""

    task_id: str
    domain: str
    prompt: str
    reference: dict[str, Any]
    difficulty: int
    split: str
    source: str

    def to_row(self) -> dict[str, Any]:
        """The task as a row of the `tasks` table (reference serialised as JSON)."""
        row = asdict(self)
        row["reference"] = json.dumps(self.reference, sort_keys=True)
        return row


class Domain(Protocol):
    """A task distribution, an environment that reads completions, and a reward.

    `verifier` judges a completion against `gold(reference)`; it offers a cheap, safe
    `quick_score` and a full `score` that a `VerifierPool` runs under a time limit.
    """

    name: str
    verifier: Verifier

    def gold(self, reference: dict[str, Any]) -> str:
        """The part of a task's reference the verifier compares completions with."""

    def generate_tasks(self) -> list[Task]:
        """All tasks of the domain's source, each labelled with its split."""

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """A reference completion for supervised fine-tuning: the worked solution, or the answer alone."""

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """Verify one completion against the task's reference."""

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Plain-text documents for pre-training the embedded base model, none of `exclude`'s prompts."""


def tasks_to_frame(tasks: list[Task]) -> pd.DataFrame:
    """Tasks as a DataFrame with the `tasks` table's columns."""
    return pd.DataFrame([t.to_row() for t in tasks], columns=TASK_COLUMNS)


def tasks_from_frame(frame: pd.DataFrame) -> list[Task]:
    """The inverse of `tasks_to_frame`; raises on rows missing contract columns."""
    missing = [c for c in TASK_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"tasks table lacks columns {missing}; expected {TASK_COLUMNS}")
    return [
        Task(
            task_id=str(r.task_id),
            domain=str(r.domain),
            prompt=str(r.prompt),
            reference=json.loads(r.reference),
            difficulty=int(r.difficulty),
            split=str(r.split),
            source=str(r.source),
        )
        for r in frame.itertuples(index=False)
    ]
