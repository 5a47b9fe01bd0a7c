"""The data flywheel: logged interactions and the last evaluation's failures become train tasks and a regression set.

An interaction is one JSON object: `prompt` (at most `MAX_PROMPT_CHARS` characters), `completion`,
`domain` and `timestamp` (a string or a finite number) are required; `outcome` (a bool or a number
in [0, 1], what the deployment logged) and `feedback` (anything JSON, e.g. a user's thumbs) are
optional and kept; `reference` is the domain's reference object (e.g. ``{"answer": "12"}`` for
arithmetic), without which the row cannot be verified. Interaction files are read with
`rlvr_factory.json_lines`: a line that is not one readable JSON value is one `malformed` row.

`ingest` holds rows back, each with its kind and reason, never silently dropping one (and one row,
whatever it holds, never fails the others):
* `malformed`: the row breaks the contract above;
* `unverifiable`: it has no reference, its domain cannot read the reference, or the verifier could
  not check the reference (nothing that cannot be verified trains);
* `duplicate`: its prompt (exact or normalised, Unicode variants included) is already a task of the
  pool or of this batch;
* `contaminated`: its prompt restates an evaluation prompt (validation, test or regression; the
  curate stage's decontamination: word n-grams, and the same numbers and content words);
* `refuted`: the domain's verifier refutes the reference: the reference's own answer, written as the
  domain demonstrates it, does not score correct against it, or the logged outcome contradicts the
  verifier's verdict on the logged completion (the reference or the log is wrong, and which is unknown).
The others become train tasks with source `flywheel` and an id hashed from domain and prompt. The
regression set is the evaluation tasks the policy got wrong, added to the last one.
"""

from __future__ import annotations

import hashlib
import json
import math
import reprlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rlvr_factory.domains.base import Domain, Task
from rlvr_factory.domains.curation import (
    DecontaminationConfig, decontaminate, deduplicate, members, quarantine_record, validate_row,
)
from rlvr_factory.verification import VerifyConfig, verify_batch
from rlvr_factory.verifiers.score import Score

SOURCE = "flywheel"
REQUIRED = ("prompt", "completion", "domain")
MAX_PROMPT_CHARS = 16_000  # a longer prompt is held back (MATH-500's longest problem has 1,500 characters)
HELD_BACK = ("malformed", "unverifiable", "duplicate", "contaminated", "refuted")


@dataclass(frozen=True)
class Ingested:
    """What one pass of the flywheel produced."""

    tasks: list[Task]  # new train tasks (source `flywheel`)
    held_back: list[dict]  # quarantine records, stage one of HELD_BACK
    counts: dict[str, float]


def _shown(value: Any) -> str:
    """A short, bounded picture of any value (nesting and length cut; a number too long to print by its type)."""
    try:
        return reprlib.repr(value)
    except (ValueError, RecursionError):
        return type(value).__name__


def _is_number(value: Any) -> bool:
    """Whether a value is a finite int or float (a bool is no number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _contract_problem(row: Any) -> str | None:
    """What breaks the interaction contract (None: nothing)."""
    if not isinstance(row, Mapping):
        return f"an interaction must be a JSON object, got {type(row).__name__}"
    if row.get("_error"):
        return str(row["_error"])
    for key in REQUIRED:
        if not isinstance(row.get(key), str) or not row[key].strip():
            return f"{key}: expected a non-empty string, got {type(row.get(key)).__name__}"
    if len(row["prompt"]) > MAX_PROMPT_CHARS:
        return f"prompt: {len(row['prompt'])} characters, more than {MAX_PROMPT_CHARS}"
    if not (isinstance(row.get("timestamp"), str) or _is_number(row.get("timestamp"))):
        return f"timestamp: expected a string or a finite number, got {type(row.get('timestamp')).__name__}"
    outcome = row.get("outcome")
    if outcome is not None and not (isinstance(outcome, bool) or _is_number(outcome) and 0 <= outcome <= 1):
        return f"outcome: expected a bool or a number in [0, 1], got {_shown(outcome)}"
    return None


def task_id(domain: str, prompt: str) -> str:
    """A flywheel task's id: stable for the same domain and prompt, so re-ingesting a log adds nothing."""
    digest = hashlib.sha256(json.dumps([domain, prompt]).encode()).hexdigest()
    return f"{SOURCE}-{digest[:16]}"


def _as_task(row: Mapping[str, Any], domain: Domain) -> tuple[Task | None, str | None]:
    """The interaction as a train task, or what keeps it from being verified."""
    if row.get("reference") is None:
        return None, "no reference: the interaction cannot be verified, so it does not train"
    candidate = {"task_id": task_id(row["domain"], row["prompt"]), "domain": row["domain"], "prompt": row["prompt"],
                 "reference": row["reference"], "difficulty": row.get("difficulty", 1), "split": "train",
                 "source": SOURCE}
    return validate_row(candidate, members(domain))


def _read(row: Any, domain: Domain) -> tuple[Task | None, dict | None]:
    """The row as a candidate task, or its quarantine record (malformed or unverifiable); never raises."""
    record = row if isinstance(row, Mapping) else {"row": _shown(row)}
    try:
        problem = _contract_problem(row)
        if problem:
            return None, quarantine_record(record, "malformed", problem)
        task, reason = _as_task(row, domain)
    except Exception as e:  # noqa: BLE001 - whatever a row holds, it is one held-back row
        return None, quarantine_record(record, "malformed", f"unreadable interaction ({type(e).__name__}: {e})"[:500])
    return (task, None) if task is not None else (None, quarantine_record(record, "unverifiable", reason))


def _new_and_clean(
    candidates: Sequence[Task], pool: Sequence[Task], evaluation: Sequence[Task], decontamination: DecontaminationConfig,
) -> tuple[list[Task], list[dict]]:
    """The candidates that are neither in the pool or evaluation set, nor duplicates of each other, nor
    restatements of an evaluation prompt; and the quarantine records of the rest."""
    known = {t.task_id for t in [*pool, *evaluation]}
    held = [quarantine_record(t, "duplicate", f"already in the pool as {t.task_id}") for t in candidates if t.task_id in known]
    candidates = [t for t in candidates if t.task_id not in known]
    kept, duplicates = deduplicate([*pool, *evaluation, *candidates])
    new_ids = {t.task_id for t in candidates}
    fresh = [t for t in kept if t.task_id in new_ids and t.source == SOURCE]
    held += [dict(d, stage="duplicate") for d in duplicates if d["task_id"] in new_ids]
    evaluation_ids = {t.task_id for t in evaluation}
    clean, contaminated = decontaminate([*evaluation, *fresh], decontamination.n, decontamination.threshold)
    held += [dict(c, stage="contaminated") for c in contaminated]
    return [t for t in clean if t.task_id not in evaluation_ids], held


def _demonstration(task: Task, domain: Domain) -> str | None:
    """The task's reference answer as the domain writes it (its answer-only demonstration), or None."""
    try:
        answer = domain.demonstration(task, worked=False)
    except Exception:  # noqa: BLE001 - a reference the domain cannot write out is refuted below
        return None
    return answer if isinstance(answer, str) else None


def _disagrees(outcome: Any, logged: Score) -> bool:
    """Whether the logged outcome (right when truthy) contradicts the verifier's verdict on the logged completion."""
    return outcome is not None and logged.status == "ok" and bool(outcome) != logged.correct


def _refutation(itself: Score | None, logged: Score, outcome: Any) -> tuple[str, str] | None:
    """(stage, reason) when the verifier refutes the task's reference or cannot check it, else None."""
    if itself is None:
        return "refuted", "the domain cannot write the reference's own answer out as a completion"
    if itself.status != "ok":
        return "unverifiable", f"the reference could not be checked against itself (status {itself.status}: " \
                               f"{itself.message[:200]})"
    if not itself.correct:
        return "refuted", "the reference's own answer, as the domain demonstrates it, scores wrong against it"
    if _disagrees(outcome, logged):
        verdicts = ("right", "wrong") if outcome else ("wrong", "right")
        return "refuted", (f"the log says the completion is {verdicts[0]}, the verifier says {verdicts[1]}: "
                           "the reference or the log is wrong")
    return None


def _verified(
    tasks: Sequence[Task], logged: Mapping[str, Mapping[str, Any]], domain: Domain, verify: VerifyConfig,
) -> tuple[list[Task], list[dict], dict[str, Score]]:
    """The tasks whose reference the verifier confirms, the quarantine records of the others, and the
    score of each task's logged completion (by task id)."""
    answers = {t.task_id: _demonstration(t, domain) for t in tasks}
    checked = [t for t in tasks if answers[t.task_id] is not None]
    completions = [logged[t.task_id]["completion"] for t in tasks] + [answers[t.task_id] for t in checked]
    references = [t.reference for t in tasks] + [t.reference for t in checked]
    scores = verify_batch(domain, completions, references, verify)[0] if tasks else []
    itself = dict(zip([t.task_id for t in checked], scores[len(tasks):]))
    kept, held = [], []
    for task, score in zip(tasks, scores):
        refuted = _refutation(itself.get(task.task_id), score, logged[task.task_id].get("outcome"))
        if refuted:
            held.append(quarantine_record(task, *refuted))
        else:
            kept.append(task)
    return kept, held, {t.task_id: s for t, s in zip(tasks, scores)}


def ingest(
    interactions: Sequence[Any], pool: Sequence[Task], evaluation: Sequence[Task], domain: Domain,
    verify: VerifyConfig, decontamination: DecontaminationConfig,
) -> Ingested:
    """New train tasks from `interactions` (see the module docstring), checked against the current
    task `pool` (duplicates) and the `evaluation` tasks (contamination)."""
    held, candidates, logged = [], [], {}
    for row in interactions:
        task, record = _read(row, domain)
        if task is None:
            held.append(record)
        else:
            candidates.append(task)
            logged.setdefault(task.task_id, row)
    fresh, removed = _new_and_clean(candidates, pool, evaluation, decontamination)
    tasks, refuted, scores = _verified(fresh, logged, domain, verify)
    held += removed + refuted
    counts = {"interactions": len(interactions), "tasks": len(tasks),
              "logged_completions_correct": sum(s.correct for s in scores.values()),
              "outcome_disagreements": sum(_disagrees(logged[i].get("outcome"), s) for i, s in scores.items()),
              **{f"held_back.{kind}": sum(h["stage"] == kind for h in held) for kind in HELD_BACK}}
    return Ingested(tasks, held, {k: float(v) for k, v in counts.items()})


def regression_set(previous: Sequence[Task], evaluated: Sequence[Task], correct: Sequence[bool]) -> list[Task]:
    """The last regression set plus the evaluated tasks answered wrong, each task once (first kept)."""
    if len(evaluated) != len(correct):
        raise ValueError(f"{len(evaluated)} evaluated tasks but {len(correct)} verdicts")
    tasks, seen = [], set()
    for task in [*previous, *(t for t, ok in zip(evaluated, correct) if not ok)]:
        if task.task_id not in seen:
            seen.add(task.task_id)
            tasks.append(task)
    return tasks
