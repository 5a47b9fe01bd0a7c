"""The task contract and the domain interface every domain implements.

A domain is a "triple package": a task distribution (`generate_tasks`), an environment the
model acts in (`Environment`: `reset(task) -> observation`, `step(action) -> Step`) and a
reward (`verifier` / `score`, a `Score` with breakdown and status). Single-turn domains get
their environment for free from `SingleTurnEnvironment`: the observation is the prompt, one
action (the completion) is scored, and the episode ends. A multi-turn domain (a tool to
call, a patch to apply and test) returns its own `Environment` from an `environment()`
method; `environment_for(domain)` picks whichever applies. See docs/environments.md.
"""

from __future__ import annotations

import json
import inspect
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

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
    # maj@k), `environment(scorer=None)` (a fresh multi-turn `Environment`) and
    # `tool_demonstration(task)` (a multi-turn SFT demonstration: actions and observations), `answer_form(task)`
    # (how the reward audit states an answer: `AnswerForm`), `task_key(task)` (what tells tasks apart in curation
    # when their prompts may coincide, e.g. a game's seed: `domains/gym_text.py`).


@dataclass(frozen=True)
class AnswerForm:
    """How a task's answers are stated, for the reward audit (`rlvr_factory.audit`): each answer slot's reference
    text (None: the slot has none, as a program's tests) and a function from one text per slot to a completion.
    A domain may define `answer_form(task)`; without it, its `reference["answer"]` is the one slot. `apart`, when
    given, restates another task's answer for a slot so that it cannot be right beside the reference in one
    answer (a CAD part moved far off: a part that lies inside the reference's is their union, a right answer)."""

    slots: Mapping[str, str | None]
    state: Callable[[Mapping[str, str]], str]
    apart: Callable[[str], str] | None = None


Scorer = Callable[[str, dict[str, Any]], Score | None]  # (answer, task reference) -> verdict, or None: judged later


@dataclass(frozen=True)
class Step:
    """What one environment step returns.

    `observation`: what the model sees next (ignored when `done`). `score`: the episode's
    verdict when `done`; None leaves the verdict to the domain's verifier, which the verify
    station runs on the episode's answer in one batch through the verifier pool. `done`: the
    episode ended. The fields after these are optional: `reward` is this turn's own reward
    (for environments that score steps; weighted by `rl.update.turn_reward_weight`), `info`
    counts things per step (`tool_calls`, `tool_errors`, ...; summed over the episode into its
    breakdown and the round metrics), `finish_reason` names why the environment ended the
    episode (default `done`), and `out_of_budget` says it ended because a budget of the
    environment's own ran out (e.g. `max_tool_calls`), like the loop's `max_turns`.
    """

    observation: str
    score: Score | None
    done: bool
    reward: float = 0.0
    info: Mapping[str, float] = field(default_factory=dict)
    finish_reason: str | None = None
    out_of_budget: bool = False


@runtime_checkable
class Environment(Protocol):
    """Where the model acts on one task: `reset` gives the first observation, `step` takes an action.

    An episode ends when a step returns `done=True`; that step's `score` is the episode's
    verdict (None: the domain's verifier judges the answer the environment passed to its
    scorer, else the last action). A step that raises ends its episode with status `error`;
    a `reset` that raises `rlvr_factory.scheduler.InfraError` (a sandbox that would not start)
    is retried and, failing, the episode is `infra_error` and left out of the loss.
    """

    def reset(self, task: Task) -> str:
        """Start an episode on `task`; the first observation (for single-turn domains, the prompt)."""

    def step(self, action: str) -> Step:
        """Apply the model's action (a completion) and return what follows."""


class SingleTurnEnvironment:
    """The default environment: observe the prompt, answer once, get scored, done.

    `scorer` judges the answer (default: the domain's `score`, in this process).
    """

    def __init__(self, domain: Domain, scorer: Scorer | None = None) -> None:
        self.domain = domain
        self.scorer = scorer or domain.score
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
        return Step(observation="", score=self.scorer(action, task.reference), done=True)


def environment_for(domain: Domain, scorer: Scorer | None = None) -> Environment:
    """A fresh environment of the domain: its own (`domain.environment()`) if it has one, else the single-turn one.

    `scorer` reaches environments that judge answers with the domain's verifier: the
    single-turn one, and a domain's own when its `environment` takes a `scorer` argument.
    """
    factory = getattr(domain, "environment", None)
    if not callable(factory):
        return SingleTurnEnvironment(domain, scorer)
    return factory(scorer=scorer) if "scorer" in inspect.signature(factory).parameters else factory()


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


def references_of(frame: pd.DataFrame, task_ids: Iterable[str]) -> list[dict[str, Any]]:
    """The references of the tasks `task_ids` (repeats allowed), from a tasks table: only those decoded
    (a round's episodes name a few of the thousands of train tasks)."""
    task_ids = [str(t) for t in task_ids]
    encoded = dict(zip(map(str, frame["task_id"]), frame["reference"]))
    decoded: dict[str, dict[str, Any]] = {}
    for task_id in task_ids:
        if task_id not in decoded:
            if task_id not in encoded:
                raise KeyError(f"task {task_id!r} is not in the tasks table ({len(encoded)} tasks)")
            decoded[task_id] = json.loads(encoded[task_id])
    return [decoded[task_id] for task_id in task_ids]


def row_reference(row: dict[str, Any]) -> dict[str, Any] | None:
    """A raw row's reference as a dict (parsed when it is a JSON string); None when it is not a JSON object."""
    reference = row.get("reference")
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except json.JSONDecodeError:
            return None
    return reference if isinstance(reference, dict) else None


def source_rows(domain: Domain) -> list[dict[str, Any]]:
    """The domain's task rows before curation: its raw `rows()` if it loads a data set, else its generated tasks."""
    rows = getattr(domain, "rows", None)
    return rows() if callable(rows) else [t.to_row() for t in domain.generate_tasks()]


def member(domain: Domain, key: str) -> Domain:
    """The domain that owns tasks labelled `key`: a mix's member, else the domain itself."""
    find = getattr(domain, "member", None)
    return find(key) if callable(find) else domain
