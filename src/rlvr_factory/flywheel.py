"""The data flywheel: logged interactions and the last evaluation's failures become train tasks and a regression set.

An interaction is one JSON object: `prompt`, `completion`, `domain` and `timestamp` (required);
`outcome` (a bool or a number in [0, 1], what the deployment logged) and `feedback` (anything
JSON, e.g. a user's thumbs) are optional and kept; `reference` is the domain's reference object
(e.g. ``{"answer": "12"}`` for arithmetic), without which the row cannot be verified.

`ingest` holds rows back, each with its kind and reason, never silently dropping one:
* `malformed`: the row breaks the contract above;
* `unverifiable`: it has no reference, or its domain cannot read the reference (nothing that
  cannot be verified trains);
* `duplicate`: its prompt (exact or normalised) is already a task of the pool or of this batch;
* `contaminated`: its prompt overlaps an evaluation prompt (validation, test or regression; the
  curate stage's word n-gram test).
The others are verified (the logged completion scored by the domain's verifier, next to the
logged outcome) and become train tasks with source `flywheel` and an id hashed from domain and
prompt. The regression set is the evaluation tasks the policy got wrong, added to the last one.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rlvr_factory.domains.base import Domain, Task
from rlvr_factory.domains.curation import decontaminate, deduplicate, members, quarantine_record, validate_row
from rlvr_factory.verification import verify_batch

SOURCE = "flywheel"
REQUIRED = ("prompt", "completion", "domain")


@dataclass(frozen=True)
class Ingested:
    """What one pass of the flywheel produced."""

    tasks: list[Task]  # new train tasks (source `flywheel`)
    held_back: list[dict]  # quarantine records: stage = malformed | unverifiable | duplicate | contaminated
    counts: dict[str, float]


def _contract_problem(row: Any) -> str | None:
    """What breaks the interaction contract (None: nothing)."""
    if not isinstance(row, Mapping):
        return f"an interaction must be a JSON object, got {type(row).__name__}"
    if row.get("_error"):
        return str(row["_error"])
    for key in REQUIRED:
        if not isinstance(row.get(key), str) or not row[key].strip():
            return f"{key}: expected a non-empty string, got {row.get(key)!r:.80}"
    if not isinstance(row.get("timestamp"), (str, int, float)) or isinstance(row.get("timestamp"), bool):
        return f"timestamp: expected a string or a number, got {row.get('timestamp')!r:.80}"
    outcome = row.get("outcome")
    if outcome is not None and not (isinstance(outcome, bool) or isinstance(outcome, (int, float)) and 0 <= outcome <= 1):
        return f"outcome: expected a bool or a number in [0, 1], got {outcome!r:.80}"
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


def ingest(
    interactions: Sequence[Any], pool: Sequence[Task], evaluation: Sequence[Task], domain: Domain,
    verify: Mapping[str, Any], decontamination: Mapping[str, Any],
) -> Ingested:
    """New train tasks from `interactions` (see the module docstring), checked against the current
    task `pool` (duplicates) and the `evaluation` tasks (contamination)."""
    held, candidates, logged = [], [], {}
    for row in interactions:
        problem = _contract_problem(row)
        if problem:
            held.append(quarantine_record(row if isinstance(row, Mapping) else {"row": repr(row)}, "malformed", problem))
            continue
        task, reason = _as_task(row, domain)
        if task is None:
            held.append(quarantine_record(row, "unverifiable", reason))
            continue
        candidates.append(task)
        logged.setdefault(task.task_id, row)
    known = {t.task_id for t in [*pool, *evaluation]}
    held += [quarantine_record(t, "duplicate", f"already in the pool as {t.task_id}") for t in candidates if t.task_id in known]
    candidates = [t for t in candidates if t.task_id not in known]
    kept, duplicates = deduplicate([*pool, *evaluation, *candidates])
    new_ids = {t.task_id for t in candidates}
    fresh = [t for t in kept if t.task_id in new_ids and t.source == SOURCE]
    held += [dict(d, stage="duplicate") for d in duplicates if d["task_id"] in new_ids]
    evaluation_ids = {t.task_id for t in evaluation}
    clean, contaminated = decontaminate([*evaluation, *fresh], decontamination["n"], decontamination["threshold"])
    tasks = [t for t in clean if t.task_id not in evaluation_ids]
    held += [dict(c, stage="contaminated") for c in contaminated]
    scores, _ = verify_batch(domain, [logged[t.task_id]["completion"] for t in tasks], [t.reference for t in tasks],
                             dict(verify)) if tasks else ([], {})
    disagree = sum(logged[t.task_id].get("outcome") is not None and bool(logged[t.task_id]["outcome"]) != s.correct
                   for t, s in zip(tasks, scores))
    counts = {"interactions": len(interactions), "tasks": len(tasks),
              "logged_completions_correct": sum(s.correct for s in scores), "outcome_disagreements": disagree,
              **{f"held_back.{kind}": sum(h["stage"] == kind for h in held)
                 for kind in ("malformed", "unverifiable", "duplicate", "contaminated")}}
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
