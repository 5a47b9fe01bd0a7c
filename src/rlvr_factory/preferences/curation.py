"""Curation of preference pairs: validate, refuse contradictions, deduplicate, decontaminate, carve a
validation split.

The same machinery as task curation (`domains.curation`), applied to pairs: every removed row
goes to the quarantine table (`PAIR_QUARANTINE_COLUMNS`) with the step and the reason; no row
crashes the stage. A pair is refused when a field is missing or empty, when chosen and rejected
are the same text as a reader sees it (`canonical`: Unicode NFKC, invisible characters dropped,
case and whitespace ignored), when its margin breaks the contract (`contract.margin_value`: a
bool, a string, NaN, an infinity, a negative or huge number), or when prompt and completion
together are longer than the model's context. A pair whose reverse is also present (the same
prompt, chosen and rejected swapped) is removed with it: the data contradicts itself. Of
duplicate pairs the evaluation copy is kept; a train pair whose prompt is an evaluation prompt
(of the tasks or of the held-out pairs), or shares `threshold` of its word n-grams with one, is
removed. Every comparison reads `canonical` text, so invisible characters hide nothing.
"""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from dataclasses import asdict, dataclass, replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.curation import (
    EVAL_SPLITS, SPLITS, DecontaminationConfig, carve_validation, decontaminate, deduplicate, normalise_prompt,
    quarantine_record, validate_unique,
)
from rlvr_factory.preferences.contract import PreferencePair, margin_value

PAIR_QUARANTINE_COLUMNS = ["pair_id", "domain", "split", "stage", "reason", "row"]
TokenCounter = Callable[[str, str], int]  # (prompt, completion) -> tokens the model reads
# Unicode's default-ignorable code points outside the format category: fillers and selectors that render as nothing
_IGNORABLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0"
                        "\U000e0100-\U000e01ef]")


def canonical(text: str) -> str:
    """Text as a reader sees it: Unicode NFKC, invisible characters dropped (format characters such as
    zero-width spaces and joiners, BOM and bidi marks, and fillers), case folded, whitespace runs as one space."""
    visible = "".join(c for c in unicodedata.normalize("NFKC", text) if unicodedata.category(c) != "Cf")
    return " ".join(_IGNORABLE.sub("", visible).casefold().split())


def _quarantine(row: Any, stage: str, reason: str) -> dict[str, Any]:
    """One row of the preference quarantine table (a task quarantine record keyed by the pair id)."""
    if isinstance(row, PreferencePair):
        raw = asdict(row)
    else:
        raw = dict(row) if isinstance(row, Mapping) else {"value": repr(row)[:2000]}
    record = quarantine_record(raw, stage, reason)
    del record["task_id"]
    return {"pair_id": str(raw.get("pair_id")), **record}


def _text_problem(row: Mapping[str, Any]) -> str | None:
    for key in ("pair_id", "prompt", "chosen", "rejected", "split"):
        if not isinstance(row.get(key), str):
            return f"{key}: expected a string, got {type(row.get(key)).__name__}"
        if not canonical(row[key]):
            return f"{key}: empty"  # whitespace and invisible characters count as nothing
    if canonical(row["chosen"]) == canonical(row["rejected"]):
        return ("chosen and rejected are identical (up to case, whitespace, Unicode form and invisible "
                "characters): the pair states no preference")
    if row["split"] not in SPLITS:
        return f"split: {row['split']!r} is not one of {list(SPLITS)}"
    return None


def validate_pair_row(
    row: Any, count_tokens: TokenCounter | None = None, max_tokens: int | None = None
) -> tuple[PreferencePair | None, str | None]:
    """The row as a PreferencePair, or None and what breaks the pair contract (never an exception)."""
    if not isinstance(row, Mapping):
        return None, f"a pair row must be an object, got {type(row).__name__}"
    if row.get("_error"):
        return None, str(row["_error"])
    problem = _text_problem(row)
    if problem is not None:
        return None, problem
    try:
        margin = margin_value(row.get("margin"))
    except ValueError as e:
        return None, str(e)
    if count_tokens is not None and max_tokens is not None:
        for key in ("chosen", "rejected"):
            tokens = count_tokens(row["prompt"], row[key])
            if tokens > max_tokens:
                return None, (f"{key}: {tokens} tokens with its prompt, longer than the model's context of "
                              f"{max_tokens}; shorten it or raise preferences.max_length")
    return PreferencePair(
        pair_id=row["pair_id"], prompt=row["prompt"], chosen=row["chosen"], rejected=row["rejected"], margin=margin,
        domain=str(row.get("domain") or ""), split=row["split"], source=str(row.get("source") or ""),
        kind=str(row.get("kind") or ""),
    ), None


def _as_task(pair: PreferencePair, text: str) -> Task:
    """A pair seen through the task machinery: `text` stands in for the prompt."""
    return Task(pair.pair_id, pair.domain, text, {}, 1, pair.split, pair.source)


def _keep(pairs: Sequence[PreferencePair], kept: Iterable[Task]) -> list[PreferencePair]:
    ids = {t.task_id for t in kept}
    return [p for p in pairs if p.pair_id in ids]


def remove_contradictions(pairs: Sequence[PreferencePair]) -> tuple[list[PreferencePair], list[dict]]:
    """Pairs whose reverse is also present (the same prompt with chosen and rejected swapped, read as
    `canonical` text) are removed, both ways, each naming a pair it contradicts."""
    by_text: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    texts = {p.pair_id: (canonical(p.prompt), canonical(p.chosen), canonical(p.rejected)) for p in pairs}
    for pair_id, (prompt, chosen, rejected) in texts.items():
        by_text[(prompt, chosen, rejected)].append(pair_id)
    reverse = {pair_id: by_text.get((prompt, rejected, chosen))
               for pair_id, (prompt, chosen, rejected) in texts.items()}
    removed = [_quarantine(p, "contradiction", f"pair {reverse[p.pair_id][0]!r} prefers the rejected completion to "
                                               "the chosen one for the same prompt: the two contradict each other")
               for p in pairs if reverse[p.pair_id]]
    return [p for p in pairs if not reverse[p.pair_id]], removed


def deduplicate_pairs(pairs: Sequence[PreferencePair]) -> tuple[list[PreferencePair], list[dict]]:
    """One pair per (prompt, chosen, rejected), exact and normalised (of `canonical` text); of duplicates the
    evaluation copy."""
    kept, removed = deduplicate([_as_task(p, "\n\n".join(canonical(t) for t in (p.prompt, p.chosen, p.rejected)))
                                 for p in pairs])
    by_id = {p.pair_id: p for p in pairs}
    return _keep(pairs, kept), [_quarantine(by_id[r["task_id"]], "deduplicate", r["reason"]) for r in removed]


def decontaminate_pairs(
    pairs: Sequence[PreferencePair], eval_prompts: Iterable[str], n: int, threshold: float
) -> tuple[list[PreferencePair], list[dict]]:
    """Train pairs whose prompt is, or shares `threshold` of its word n-grams with, an evaluation prompt
    (`eval_prompts` and the prompts of the held-out pairs) are removed, with the evaluation prompt named."""
    held_out = [*eval_prompts, *(p.prompt for p in pairs if p.split in EVAL_SPLITS)]
    exact = {normalise_prompt(canonical(prompt)): prompt for prompt in held_out}
    removed, candidates = [], []
    for pair in pairs:
        key = normalise_prompt(canonical(pair.prompt))
        if pair.split == "train" and key in exact:
            removed.append(_quarantine(pair, "decontaminate", f"prompt is the evaluation prompt {exact[key][:80]!r}"))
        else:
            candidates.append(pair)
    # one domain for all, so a pair is checked against every evaluation prompt whatever its domain
    evaluation = [Task(f"\0eval-{i}", "", canonical(prompt), {}, 1, "test", "") for i, prompt in enumerate(held_out)]
    train = [Task(p.pair_id, "", canonical(p.prompt), {}, 1, "train", p.source) for p in candidates
             if p.split == "train"]
    kept, overlap = decontaminate(train + evaluation, n, threshold)
    by_id = {p.pair_id: p for p in candidates}
    removed += [_quarantine(by_id[r["task_id"]], "decontaminate", r["reason"]) for r in overlap]
    kept_ids = {t.task_id for t in kept} | {p.pair_id for p in candidates if p.split != "train"}
    return [p for p in candidates if p.pair_id in kept_ids], removed


def carve_validation_pairs(pairs: Sequence[PreferencePair], size: int, seed: int) -> list[PreferencePair]:
    """When no pair is held out, `size` seeded train pairs move to the validation split."""
    carved = {t.task_id: t.split for t in carve_validation([_as_task(p, p.prompt) for p in pairs], size, seed)}
    return [replace(p, split=carved[p.pair_id]) for p in pairs]


@dataclass
class CuratedPairs:
    """What pair curation produced: the pairs, the quarantine records and the counts of every step."""

    pairs: list[PreferencePair]
    quarantined: list[dict]
    counts: dict[str, int]


def curate_pairs(
    rows: Sequence[Mapping[str, Any]], eval_prompts: Iterable[str], *, decontamination: DecontaminationConfig,
    validation_from_train: int, seed: int, count_tokens: TokenCounter | None = None, max_tokens: int | None = None,
) -> CuratedPairs:
    """Validate, refuse contradicting pairs, deduplicate and decontaminate raw pair rows against
    `eval_prompts`, then make sure some pairs are held out. `decontamination` gives `n` and `threshold`."""
    pairs, quarantined = validate_unique(rows, lambda row: validate_pair_row(row, count_tokens, max_tokens), "pair_id",
                                         _quarantine)
    counts = {"rows": len(rows), "quarantined.validate": len(quarantined)}
    pairs, removed = remove_contradictions(pairs)
    quarantined += removed
    counts["removed.contradiction"] = len(removed)
    pairs, removed = deduplicate_pairs(pairs)
    quarantined += removed
    counts["removed.deduplicate"] = len(removed)
    pairs, removed = decontaminate_pairs(pairs, eval_prompts, decontamination.n, decontamination.threshold)
    quarantined += removed
    counts["removed.decontaminate"] = len(removed)
    pairs = carve_validation_pairs(pairs, validation_from_train, seed)
    for pair in pairs:
        counts[f"pairs.{pair.split}"] = counts.get(f"pairs.{pair.split}", 0) + 1
    counts["pairs"] = len(pairs)
    return CuratedPairs(pairs, quarantined, counts)


def pair_quarantine_frame(records: Sequence[dict]) -> pd.DataFrame:
    """The preference quarantine table."""
    return pd.DataFrame(list(records), columns=PAIR_QUARANTINE_COLUMNS)
