"""The task contract and the domain interface every domain implements.

A domain is a "triple package": a task distribution (`generate_tasks`), an environment the
model acts in (`Environment`: `reset(task) -> observation`, `step(action) -> Step`) and a
reward (`verifier` / `score`, a `Score` with breakdown and status). Single-turn domains get
their environment for free from `SingleTurnEnvironment`: the observation is the prompt, one
action (the completion) is parsed and scored, and the episode ends. A multi-turn domain
(apply a patch, run the tests, show the output) returns its own `Environment` from an
`environment()` method; `environment_for(domain)` picks whichever applies.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

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

    # Optional, looked up with getattr: `rows()` (the raw, unvalidated task rows of a loaded
    # data set, for the curate stage), `answer_key(completion)` (canonical final answer, for
    # maj@k) and `environment(task)` (a multi-turn `Environment`).


@dataclass(frozen=True)
class Step:
    """What one environment step returns: the next observation, the reward so far, and whether the episode ended."""

    observation: str
    score: Score
    done: bool


@runtime_checkable
class Environment(Protocol):
    """Where the model acts on one task: `reset` gives the first observation, `step` takes an action.

    An episode ends when a step returns `done=True`; that step's `score` is the episode's reward.
    """

    def reset(self, task: Task) -> str:
        """Start an episode on `task`; the first observation (for single-turn domains, the prompt)."""

    def step(self, action: str) -> Step:
        """Apply the model's action (a completion) and return what follows."""


class SingleTurnEnvironment:
    """The default environment: observe the prompt, answer once, get scored, done."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.task: Task | None = None

    def reset(self, task: Task) -> str:
        """The task's prompt."""
        self.task = task
        return task.prompt

    def step(self, action: str) -> Step:
        """Score the completion against the task's reference; the episode ends."""
        if self.task is None:
            raise RuntimeError("step() before reset(): call reset(task) to start an episode")
        task, self.task = self.task, None
        return Step(observation="", score=self.domain.score(action, task.reference), done=True)


def environment_for(domain: Domain) -> Environment:
    """A fresh environment of the domain: its own (`domain.environment()`) if it has one, else the single-turn one."""
    factory = getattr(domain, "environment", None)
    return factory() if callable(factory) else SingleTurnEnvironment(domain)


def answer_key(domain: Domain, completion: str) -> str | None:
    """The completion's final answer in canonical form for majority voting (`domain.answer_key`),
    or None when the domain's answers are not comparable or none was stated."""
    key = getattr(domain, "answer_key", None)
    return key(completion) if callable(key) else None


def draw_split_tasks(
    domain: str, splits: Mapping[str, int], levels: Sequence[int], seed: int,
    draw: Callable[[random.Random, int], tuple[str, dict[str, Any]]], attempts: int = 1000,
) -> list[Task]:
    """Each split's generated tasks from one generator seeded with `seed`: levels in equal shares (in turn),
    `draw(rng, level) -> (prompt, reference)` redrawn until its prompt is new, so no prompt appears twice."""
    rng = random.Random(seed)
    seen: set[str] = set()
    tasks = []
    for split, count in splits.items():
        for i in range(count):
            level = levels[i % len(levels)]
            for _ in range(attempts):
                prompt, reference = draw(rng, level)
                if prompt not in seen:
                    break
            else:
                raise ValueError(f"level {level} ran out of distinct tasks after {attempts} draws; lower domain.splits")
            seen.add(prompt)
            tasks.append(Task(f"{domain}-{split}-{i:05d}", domain, prompt, reference, level, split,
                              f"generated:seed={seed}"))
    return tasks


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


def source_rows(domain: Domain) -> list[dict[str, Any]]:
    """The domain's task rows before curation: its raw `rows()` if it loads a data set, else its generated tasks."""
    rows = getattr(domain, "rows", None)
    return rows() if callable(rows) else [t.to_row() for t in domain.generate_tasks()]


def member(domain: Domain, key: str) -> Domain:
    """The domain that owns tasks labelled `key`: a mix's member, else the domain itself."""
    find = getattr(domain, "member", None)
    return find(key) if callable(find) else domain
