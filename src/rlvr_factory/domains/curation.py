"""Curation: turn raw task rows into clean, deduplicated, decontaminated, labelled, mixed task pools.

Every step returns what it kept and what it removed with the reason; nothing is dropped
silently. The removed rows form the quarantine table (`QUARANTINE_COLUMNS`).

Every prompt comparison (deduplication, decontamination, the flywheel's checks against the
evaluation and regression prompts) reads prompts through `canonical_text`: compatibility forms
folded as NFKC does, invisible format characters (zero-width spaces and joiners, word joiners,
byte-order marks, soft hyphens: Unicode category Cf), combining marks and control characters
dropped, digits of every script read as ASCII digits, Cyrillic and Greek letters drawn like Latin
ones read as those, and case folded. So a prompt and its copy with a U+200B inside a word are one
prompt.

Decontamination has two rules. Word n-grams catch long copies with words changed; they cannot see
short prompts (fewer words than n) nor a paraphrase that rewords every phrase. The second rule,
`same_problem`, compares what a paraphrase keeps: the numbers and operators in order, and the
content words. Measured on public data (tests/domains/test_curation.py), it flags none of GSM8K's
7473 train questions against its 1319 test questions, and within MATH-500 only its one
near-duplicate pair.
"""

from __future__ import annotations

import json
import random
import re
import unicodedata
from collections import defaultdict
from fnmatch import fnmatchcase
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import pandas as pd

from rlvr_factory.domains.base import TASK_COLUMNS, Domain, Task
from rlvr_factory.schema import Fraction, PositiveInt

SPLITS = ("train", "validation", "test")
EVAL_SPLITS = ("test", "validation")  # on a duplicate, the evaluation copy is the one kept
UNLABELLED = 0  # difficulty of a task whose source gives none (levels start at 1)
QUARANTINE_COLUMNS = ["task_id", "domain", "split", "stage", "reason", "row"]
# words, numbers and every symbol but sentence punctuation: operators tell "2+3" from "2*3"
_TOKEN = re.compile(r"[a-z0-9]+|[^\sa-z0-9.,;:!?\"'`]")
SHORT_PROMPT_TOKENS = 24  # below this, prompts are compared by their gist whatever numbers they hold
MIN_PINNING_NUMBERS = 2  # longer prompts need this many numbers in common, in order, to be compared by gist
# Letters drawn like Latin ones (Cyrillic, Greek) and dashes drawn like a minus, read as those.
_LOOKALIKES = str.maketrans(
    "АВЕКМНОРСТХаеорсухіјѕԁһүΑΒΕΖΗΙΚΜΝΟΡΤΥΧοικνρτυχ‐‑‒–—―−×÷⁄∗",
    "ABEKMHOPCTXaeopcyxijsdhyABEZHIKMNOPTYXoikvptux-------*//*",
)
_ASCII_CONTROLS = dict.fromkeys([*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F])  # all but \t \n \v \f \r
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
         "seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_NUMBER_WORDS = {w: str(i) for i, w in enumerate(_UNITS)} | {w: str(10 * i) for i, w in enumerate(_TENS, 2)}
_UNIT_WORDS, _TENS_WORDS = frozenset(_UNITS[1:10]), frozenset(_TENS)  # twenty five: 25
_OPERATOR_WORDS = {"plus": "+", "minus": "-", "times": "*", "multiplied": "*", "cdot": "*", "divided": "/", "div": "/"}
_OPERATORS = frozenset("+-*/^<>%")
_STOPWORDS = frozenset("""a an the is are was were be been being am of to in on at for by with from as and or but if
then than that this these those it its what whats which who whom whose how many much does do did can
could would should will shall may might must i you he she we they me him her us them my your his our their please
find compute calculate evaluate determine solve work out give state tell express write show get answer result
value question there here so s t""".split())


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) or type(value).__name__.startswith("int")


def _problem(row: Mapping[str, Any], domains: Mapping[str, Domain]) -> tuple[str | None, dict | None]:
    """What is wrong with one row (None: nothing) and its parsed reference."""
    if row.get("_error"):
        return str(row["_error"]), None
    for key in ("task_id", "domain", "prompt", "split", "source"):
        if not isinstance(row.get(key), str):
            return f"{key}: expected a string, got {type(row.get(key)).__name__}", None
    if not row["task_id"].strip():
        return "task_id: empty", None
    if not row["prompt"].strip():
        return "prompt: empty", None
    if row["domain"] not in domains:
        return f"domain: {row['domain']!r} is not one of {sorted(domains)}", None
    if row["split"] not in SPLITS:
        return f"split: {row['split']!r} is not one of {list(SPLITS)}", None
    reference = row.get("reference")
    if isinstance(reference, str):
        try:
            reference = json.loads(reference)
        except json.JSONDecodeError as e:
            return f"reference: not JSON ({e.msg})", None
    if not isinstance(reference, dict):
        return f"reference: expected a JSON object, got {type(reference).__name__}", None
    difficulty = row.get("difficulty")
    if difficulty is not None and not (_is_int(difficulty) and int(difficulty) >= UNLABELLED):
        return f"difficulty: expected an integer >= {UNLABELLED} or none, got {difficulty!r}", None
    try:
        gold = domains[row["domain"]].gold(reference)
    except Exception as e:  # noqa: BLE001  # any failure means the reference does not fit its domain
        return f"reference: the {row['domain']} domain cannot read it ({type(e).__name__}: {e})", None
    if not isinstance(gold, str) or not gold.strip():
        return "reference: its gold answer is empty", None
    return None, reference


def validate_row(row: Mapping[str, Any], domains: Mapping[str, Domain]) -> tuple[Task | None, str | None]:
    """The row as a Task, or None and what breaks the task contract."""
    reason, reference = _problem(row, domains)
    if reason is not None:
        return None, reason
    difficulty = row.get("difficulty")
    return Task(
        task_id=row["task_id"], domain=row["domain"], prompt=row["prompt"], reference=reference,
        difficulty=UNLABELLED if difficulty is None else int(difficulty), split=row["split"], source=row["source"],
    ), None


def quarantine_record(row: Mapping[str, Any] | Task, stage: str, reason: str) -> dict[str, Any]:
    """One quarantine-table row: the task's identity, the step that removed it, why, and the raw row."""
    raw = row.to_row() if isinstance(row, Task) else dict(row)
    return {
        "task_id": _text(raw.get("task_id")), "domain": _text(raw.get("domain")), "split": _text(raw.get("split")),
        "stage": stage, "reason": reason, "row": _json(raw),
    }


def _text(value: Any) -> str:
    """An identity field of a quarantined row as text: a string or a plain scalar as itself, anything else
    (a list, a 5000-digit integer) by its type."""
    if isinstance(value, str):
        return value
    plain = value is None or isinstance(value, float) or _is_int(value) and abs(value) < 10**18
    return str(value) if plain else type(value).__name__


def _json(raw: Mapping[str, Any]) -> str:
    """The quarantined row as JSON, or a note saying why it cannot be written (too deep, too big a number)."""
    try:
        return json.dumps(raw, default=str, sort_keys=True)
    except (ValueError, TypeError, RecursionError) as e:
        return json.dumps({"unwritable_row": f"{type(e).__name__}: {e}"[:300]})


def validate_unique(
    rows: Iterable[Mapping[str, Any]], check: Callable[[Mapping[str, Any]], tuple[Any, str | None]], id_field: str,
    quarantine: Callable[[Mapping[str, Any], str, str], dict[str, Any]] | None = None,
) -> tuple[list, list[dict]]:
    """The items `check` makes of the rows (each `(item, None)` or `(None, reason)`), ids in
    `id_field` unique, and the quarantine record (stage `validate`) of each row refused."""
    quarantine = quarantine or quarantine_record
    items, quarantined, seen = [], [], set()
    for row in rows:
        item, reason = check(row)
        if item is not None and getattr(item, id_field) in seen:
            item, reason = None, f"{id_field}: {getattr(item, id_field)!r} appears more than once"
        if item is None:
            quarantined.append(quarantine(row, "validate", reason))
        else:
            seen.add(getattr(item, id_field))
            items.append(item)
    return items, quarantined


def validate(rows: Iterable[Mapping[str, Any]], domains: Mapping[str, Domain]) -> tuple[list[Task], list[dict]]:
    """Rows that meet the task contract (with unique task ids) as Tasks, and the quarantined rest."""
    return validate_unique(rows, lambda row: validate_row(row, domains), "task_id")


def _fold(char: str) -> str:
    """One non-ASCII character as comparisons read it (see `canonical_text`)."""
    category = unicodedata.category(char)
    if category in ("Cf", "Mn", "Me", "Cc", "Co", "Cs"):
        return " " if char.isspace() else ""
    if category == "Nd":
        return str(unicodedata.decimal(char))
    return " " if category.startswith("Z") else char


def canonical_text(text: str) -> str:
    """The text as every prompt comparison reads it (see the module docstring): NFKC's compatibility
    folding, format characters, marks and controls dropped, digits as ASCII, look-alike letters as
    Latin, case folded."""
    if not text.isascii():
        text = _NON_ASCII.sub(lambda m: _fold(m[0]), unicodedata.normalize("NFKD", text))
        text = unicodedata.normalize("NFKC", text.translate(_LOOKALIKES))
    return text.translate(_ASCII_CONTROLS).casefold()


def normalise_prompt(prompt: str) -> str:
    """A prompt reduced to lower-case words, numbers and symbols (Unicode variants as `canonical_text`
    reads them, case, spacing and sentence punctuation dropped), for near-duplicate detection."""
    return " ".join(_TOKEN.findall(canonical_text(prompt)))


def _eval_first(tasks: Sequence[Task]) -> list[Task]:
    order = {s: i for i, s in enumerate(EVAL_SPLITS)}
    return sorted(tasks, key=lambda t: order.get(t.split, len(order)))  # stable: source order within a split


def deduplicate(tasks: Sequence[Task], keys: Mapping[str, Callable[[Task], str]] | None = None
                ) -> tuple[list[Task], list[dict]]:
    """One task per prompt, exact and normalised (case, whitespace, punctuation), within each domain.

    `keys` names, for a domain whose prompt does not identify a task (a game's seeds share its first
    observation), what does instead (its `task_key`). Of duplicates the evaluation copy (test, then
    validation) is kept, else the first.
    """
    keep_ids, removed, seen = set(), [], {}
    keys = keys or {}
    for task in _eval_first(tasks):
        text = keys[task.domain](task) if task.domain in keys else task.prompt
        for kind, key in (("exact", text), ("normalised", normalise_prompt(text))):
            first = seen.get((task.domain, kind, key))
            if first is not None:
                removed.append(quarantine_record(task, "deduplicate", f"duplicate prompt ({kind}) of {first}"))
                break
        else:
            keep_ids.add(task.task_id)
            seen[(task.domain, "exact", text)] = task.task_id
            seen[(task.domain, "normalised", normalise_prompt(text))] = task.task_id
    return [t for t in tasks if t.task_id in keep_ids], removed


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The word n-grams of a normalised text."""
    words = normalise_prompt(text).split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


@dataclass(frozen=True)
class Gist:
    """What a paraphrase keeps of a prompt: its numbers and operators in order (number words and
    operator words read as digits and symbols), its content words (no stop words, light stemming),
    and whether it is short (fewer than `SHORT_PROMPT_TOKENS` tokens)."""

    skeleton: tuple[str, ...]
    words: frozenset[str]
    short: bool


def _stem(word: str) -> str:
    """A word without a plural or verb ending (``apples`` -> ``apple``, ``boxes`` -> ``box``, ``walked`` -> ``walk``)."""
    if word.endswith(("sses", "xes", "zes", "ches", "shes")):
        return word[:-2]
    for suffix in ("ing", "ed", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def _read_words(tokens: list[str]) -> list[str]:
    """Tokens with number words as digits (``twenty five`` as 25) and operator words as symbols."""
    read: list[str] = []
    for before, token in zip(["", *tokens], tokens):
        if before in _TENS_WORDS and token in _UNIT_WORDS:
            read[-1] = str(int(read[-1]) + int(_NUMBER_WORDS[token]))
        else:
            read.append(_OPERATOR_WORDS.get(token) or _NUMBER_WORDS.get(token) or token)
    return read


def gist(prompt: str) -> Gist:
    """The prompt's `Gist` (read through `canonical_text`)."""
    text = re.sub(r"(?<=[^\W\d_])-(?=[^\W\d_])", " ", canonical_text(prompt))  # deaf-student: no minus
    tokens = _read_words(_TOKEN.findall(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)))  # 1,000 is 1000
    skeleton = tuple((t.lstrip("0") or "0") if t.isdecimal() else t for t in tokens if t.isdecimal() or t in _OPERATORS)
    words = frozenset(_stem(t) for t in tokens if t.isalpha() and t not in _STOPWORDS)
    return Gist(skeleton, words, len(tokens) < SHORT_PROMPT_TOKENS)


def same_problem(train: Gist, evaluation: Gist, threshold: float) -> float | None:
    """The content-word overlap (Jaccard) of two prompts that state one problem, else None.

    They must have the same numbers and operators in the same order and an overlap of at least
    `threshold`, or the train prompt keeps every content word of the evaluation one (padded with a
    request or a remark); two prompts of numbers and operators alone are the same problem. Unless both are
    short, that needs at least `MIN_PINNING_NUMBERS` numbers (long prompts with fewer are the n-gram
    rule's). Short prompts without numbers must also keep every content word of the evaluation prompt:
    a template filled with another word (``Spell hello backwards``, ``Spell world backwards``) is no copy.
    """
    numbers = sum(t.isdecimal() for t in train.skeleton)
    if train.skeleton != evaluation.skeleton or numbers < MIN_PINNING_NUMBERS and not (train.short and evaluation.short):
        return None
    kept = evaluation.words <= train.words  # every content word of the evaluation prompt, padded or not
    if not numbers and not kept:
        return None
    union = train.words | evaluation.words
    overlap = len(train.words & evaluation.words) / len(union) if union else float(bool(numbers))
    return overlap if overlap >= threshold or numbers and kept else None


def _ngram_overlaps(tasks: Sequence[Task], n: int, threshold: float, skip: set[str]) -> dict[int, str]:
    """Index of each train task sharing at least `threshold` of its word n-grams with one evaluation
    prompt of its domain -> why."""
    index: dict[tuple[str, tuple[str, ...]], list[str]] = defaultdict(list)
    for task in tasks:
        if task.split in EVAL_SPLITS and task.domain not in skip:
            for gram in ngrams(task.prompt, n):
                index[(task.domain, gram)].append(task.task_id)
    found = {}
    for i, task in enumerate(tasks):
        grams = ngrams(task.prompt, n) if task.split == "train" and task.domain not in skip else set()
        hits: dict[str, int] = defaultdict(int)
        for gram in grams:
            for eval_id in set(index.get((task.domain, gram), ())):
                hits[eval_id] += 1
        eval_id, shared = max(hits.items(), key=lambda kv: (kv[1], kv[0]), default=(None, 0))
        if grams and shared / len(grams) >= threshold:
            found[i] = f"{shared}/{len(grams)} word {n}-grams ({shared / len(grams):.0%}) overlap evaluation task {eval_id}"
    return found


def _paraphrases(tasks: Sequence[Task], threshold: float, skip: set[str]) -> dict[int, str]:
    """Index of each train task that restates an evaluation prompt of its domain (`same_problem`) -> why."""
    index: dict[tuple[str, tuple[str, ...]], list[tuple[str, Gist]]] = defaultdict(list)
    for task in tasks:
        if task.split in EVAL_SPLITS and task.domain not in skip:
            evaluation = gist(task.prompt)
            index[(task.domain, evaluation.skeleton)].append((task.task_id, evaluation))
    found = {}
    for i, task in enumerate(tasks):
        if task.split != "train" or task.domain in skip:
            continue
        train = gist(task.prompt)
        for eval_id, evaluation in index.get((task.domain, train.skeleton), ()):
            overlap = same_problem(train, evaluation, threshold)
            if overlap is not None:
                found[i] = (f"restates evaluation task {eval_id}: the same numbers and operators "
                            f"({' '.join(train.skeleton)[:60] or 'none'}), {overlap:.0%} of the content words")
                break
    return found


def decontaminate(
    tasks: Sequence[Task], n: int, threshold: float, skip_domains: Iterable[str] = ()
) -> tuple[list[Task], list[dict]]:
    """Train tasks that restate an evaluation (validation/test) prompt of their domain are removed, with
    the evaluation task and the evidence named: those sharing at least `threshold` of their word
    n-grams with one evaluation prompt, and those `same_problem` finds (the same numbers and operators
    and at least `threshold` of the content words; short prompts without numbers by their words
    alone). Domains in `skip_domains` (names or shell-style patterns: `"*"` skips every domain) are
    left alone.
    """
    if n < 1 or not 0 < threshold <= 1:
        raise ValueError(f"decontamination needs n >= 1 and 0 < threshold <= 1, got n={n}, threshold={threshold}")
    patterns = list(skip_domains)
    skip = {d for d in {t.domain for t in tasks} if any(fnmatchcase(d, p) for p in patterns)}
    reasons = {**_paraphrases(tasks, threshold, skip), **_ngram_overlaps(tasks, n, threshold, skip)}
    kept = [t for i, t in enumerate(tasks) if i not in reasons]
    return kept, [quarantine_record(tasks[i], "decontaminate", reason) for i, reason in sorted(reasons.items())]


def label_difficulty(tasks: Sequence[Task], measured: Mapping[str, int], default: int) -> list[Task]:
    """Unlabelled tasks get their measured difficulty (`measured[task_id]`), else `default`; labelled ones keep theirs."""
    return [
        t if t.difficulty != UNLABELLED else Task(
            t.task_id, t.domain, t.prompt, t.reference, measured.get(t.task_id, default), t.split, t.source
        )
        for t in tasks
    ]


def difficulty_from_pass_rate(pass_rate: float, levels: int) -> int:
    """Difficulty 1 (always solved) to `levels` (never solved) from a measured pass rate."""
    return 1 + min(levels - 1, int((1.0 - pass_rate) * levels))


def carve_validation(tasks: Sequence[Task], size: int, seed: int) -> list[Task]:
    """For each domain with no validation tasks, move `size` seeded train tasks to validation."""
    if size <= 0:
        return list(tasks)
    by_domain: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_domain[task.domain].append(task)
    moved = set()
    for domain, members in sorted(by_domain.items()):
        if any(t.split == "validation" for t in members):
            continue
        train = [t.task_id for t in members if t.split == "train"]
        moved |= set(random.Random(f"{seed}:{domain}").sample(train, min(size, len(train))))
    return [
        Task(t.task_id, t.domain, t.prompt, t.reference, t.difficulty, "validation", t.source) if t.task_id in moved
        else t
        for t in tasks
    ]


def mix_by_weight(tasks: Sequence[Task], weights: Mapping[str, float], seed: int) -> tuple[list[Task], dict[str, int]]:
    """The train pool cut to the domains' weight shares (the largest pool that meets them exactly,
    each domain's tasks drawn seeded); evaluation tasks all stay. Returns the tasks and, per
    domain, how many train tasks were left out of the mix."""
    train: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        if task.split == "train":
            train[task.domain].append(task)
    present = {d: weights.get(d, 1.0) for d in train}
    total = sum(present.values())
    size = min((len(train[d]) / (w / total) for d, w in present.items()), default=0)
    keep, left_out = set(), {}
    for d, w in present.items():
        wanted = min(len(train[d]), round(size * w / total))
        chosen = random.Random(f"{seed}:{d}").sample(train[d], wanted)
        keep |= {t.task_id for t in chosen}
        left_out[d] = len(train[d]) - wanted
    return [t for t in tasks if t.split != "train" or t.task_id in keep], left_out


@dataclass
class Curated:
    """What curation produced: the task pool, the quarantine records and the counts of every step."""

    tasks: list[Task]
    quarantined: list[dict]
    counts: dict[str, int]


def members(domain: Domain) -> dict[str, Domain]:
    """The domains whose tasks a (possibly mixed) domain holds, by the label its tasks carry."""
    return dict(getattr(domain, "members", None) or {domain.name: domain})


@dataclass(frozen=True)
class DecontaminationConfig:
    n: PositiveInt = 8  # word n-gram length
    threshold: Fraction = 0.5  # a train prompt sharing >= this share of its n-grams with one eval prompt, or its numbers and operators and >= this share of its content words (docs/domains.md), is removed


@dataclass(frozen=True)
class TaskDecontaminationConfig(DecontaminationConfig):
    skip_domains: list[str] = field(default_factory=list)  # domains left alone ("*": all; generated domains draw disjoint splits)


def curate(
    rows: Sequence[Mapping[str, Any]], domain: Domain, *, decontamination: TaskDecontaminationConfig,
    validation_from_train: int, default_difficulty: int, seed: int, measured: Mapping[str, int] | None = None,
) -> Curated:
    """Validate, deduplicate, decontaminate, label, split and mix `rows` of `domain` (the pool's
    domains take turns in the task order).

    `decontamination` gives `n`, `threshold` and `skip_domains`; `measured` gives difficulties
    measured for unlabelled tasks (by task id), the rest get `default_difficulty`.
    """
    tasks, quarantined = validate(rows, members(domain))
    counts = {"rows": len(rows), "quarantined.validate": len(quarantined)}
    keys = {name: d.task_key for name, d in members(domain).items() if callable(getattr(d, "task_key", None))}
    tasks, removed = deduplicate(tasks, keys)
    quarantined += removed
    counts["removed.deduplicate"] = len(removed)
    skip = [*decontamination.skip_domains, *keys]  # seeds split apart cannot restate each other's prompt
    tasks, removed = decontaminate(tasks, decontamination.n, decontamination.threshold, skip)
    quarantined += removed
    counts["removed.decontaminate"] = len(removed)
    tasks = label_difficulty(tasks, measured or {}, default_difficulty)
    tasks = carve_validation(tasks, validation_from_train, seed)
    weights = getattr(domain, "weights", {})
    if weights is not None:  # a domain with `weights = None` keeps every train task of every member
        tasks, left_out = mix_by_weight(tasks, weights, seed)
        counts.update({f"mix_left_out.{d}": n for d, n in left_out.items()})
    tasks = interleave(tasks)
    for task in tasks:
        key = f"tasks.{task.domain}.{task.split}"
        counts[key] = counts.get(key, 0) + 1
    counts["tasks"] = len(tasks)
    return Curated(tasks, quarantined, counts)


def interleave(tasks: Sequence[Task]) -> list[Task]:
    """Tasks taking turns by domain (each domain's order kept), so any prefix of a split mixes the
    domains (SFT takes the first N train tasks, per-round validation the first N validation tasks)."""
    queues: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        queues[task.domain].append(task)
    longest = max((len(q) for q in queues.values()), default=0)
    return [q[i] for i in range(longest) for q in queues.values() if i < len(q)]


def quarantine_frame(records: Sequence[dict]) -> pd.DataFrame:
    """The quarantine table."""
    return pd.DataFrame(list(records), columns=QUARANTINE_COLUMNS)


__all__ = [
    "QUARANTINE_COLUMNS", "SHORT_PROMPT_TOKENS", "SPLITS", "TASK_COLUMNS", "UNLABELLED", "Curated", "Gist",
    "canonical_text", "carve_validation", "curate", "decontaminate", "deduplicate", "gist", "interleave", "members",
    "difficulty_from_pass_rate", "label_difficulty", "mix_by_weight", "ngrams", "normalise_prompt",
    "quarantine_frame", "quarantine_record", "same_problem", "validate", "validate_row",
]
