"""reasoning-gym as a domain source: a hundred procedural task families, each its own domain.

`domain.name: reasoning_gym` with `datasets: [chain_sum, ...]` (or `all`) exposes reasoning-gym's
generators by name. Each family's tasks carry the family as their `domain`, so metrics, the
curriculum and advantage normalisation see every family apart. Difficulty level d (1, 2, ...)
is the family's reasoning-gym curriculum at global level d - 1 (families without a curriculum
have level 1 only: their default configuration); `configs` overrides single fields of any
family's configuration at every level.

Generation runs as scheduler jobs, one per (family, level), in worker processes under
`generation.timeout_seconds`, and every item is checked before it becomes a row: a question and
a reference answer that are strings within the length limits, an item that reads back equal
from its Python literal, every item again from a fresh generator with the same seed
(determinism), and the reference answer earning full credit from the family's own scorer. Each
item is drawn with Python's and numpy's global random generators seeded from its dataset seed and
index (and restored after): some generators draw from them instead of their own seeded `Random`
(`list_functions`, `pool_matrix` in 0.1.25), which would otherwise make their items depend on
whatever ran before in the process. The workers run with a fixed `PYTHONHASHSEED` (`HASH_SEED`) for
the generators whose draws follow the order of a set of strings, which Python's per-process hash
salt would otherwise change from run to run. A generator that raises, hangs or returns malformed
items gives rows with an `_error` reason, which the curate stage quarantines; the run continues
with the other families.

The reward is `ReasoningGymVerifier` (the family's `score_answer` on the ``<answer>`` block,
through the verifier pool). Demonstrations state the reference answer in the same tags.
"""

from __future__ import annotations

import json
import logging
import math
import random
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterator, Mapping, Sequence

from rlvr_factory.domains.base import Task
from rlvr_factory.scheduler import create_scheduler
from rlvr_factory.verifiers.reasoning_gym import (
    CLOSE, OPEN, ReasoningGymVerifier, entry_literal, extract, family_score, make_gold, normalise_answer,
)
from rlvr_factory.verifiers.reasoning_gym_rules import QUARANTINED, SCORED, SHARED_SOLUTIONS, screen
from rlvr_factory.verifiers.score import Score

log = logging.getLogger(__name__)

ALL = "all"
# Generators `all` leaves out, and why (a family named explicitly is still built, with a warning).
EXCLUDED = {
    "composite": "not a family: a wrapper that mixes other generators by a dataset list of its own",
    "acre": "licence: adapted from ACRE under GPL-3.0, unlike the package's Apache-2.0 generators",
    "gsm_symbolic": "contamination: GSM-Symbolic templates of GSM8K test questions, which the gsm8k domain evaluates on",
}
# Families whose items give no `answer` but keep one valid solution in their metadata.
ORACLE_KEYS = ("example_answer", "example_correct_answer", "possible_answer")
# Curricula of reasoning-gym 0.1.25 that give an unusable configuration at some level: the fields
# to set (from the level's configuration) before the block's own `configs`, and why. Without them
# the family is quarantined with the generator's error.
FIXES = {
    "knight_swap": (lambda c: {"min_nodes": 6, "max_nodes": max(6, c.max_nodes)},
                    "its curriculum starts at 4 nodes; the generator asserts min_nodes >= 6"),
    "sokoban": (lambda c: {"min_boxes": 1, "max_boxes": 2}, "4-10 boxes on its level-1 6x6 board never finish generating"),
    "word_ladder": (lambda c: {"min_word_length": 4}, "its level-1 word length 3 is missing from its word list (KeyError: 3)"),
}
# The generation workers' PYTHONHASHSEED: some generators draw from sets of strings
# (`isomorphic_strings`, `ransom_note`: `rng.choice(list(letters - used))`), whose order follows string
# hashing, which Python salts anew in every process unless this is fixed.
HASH_SEED = 0
DEFAULT_INSTRUCTION = "Give only the final answer, between <answer> and </answer>."


@dataclass(frozen=True)
class Generation:
    """How tasks are generated: scheduler workers and the wall-clock limit of one (family, level) job."""

    workers: int = 2  # worker processes generating families in parallel
    timeout_seconds: float = 120.0  # a (family, level) job past this is killed; its rows are quarantined


@dataclass(frozen=True)
class FamilyRequest:
    """One generation job: `counts` items of each split of one family at one level."""

    family: str
    level: int
    seeds: dict[str, int]  # split -> the reasoning-gym dataset seed of that split
    counts: dict[str, int]  # split -> items
    indices: dict[str, list[int]]  # split -> the split-wide task index of each item (for task ids)
    overrides: dict[str, Any] = field(default_factory=dict)
    instruction: str = ""
    max_prompt_chars: int = 20000
    max_answer_chars: int = 5000


def available_families() -> list[str]:
    """Every generator reasoning-gym registers, by name."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def resolve_families(datasets: str | Sequence[str], exclude: Sequence[str] = ()) -> list[str]:
    """The families a `datasets` setting names: a list, or `all` (every family but `EXCLUDED` and `exclude`)."""
    known = available_families()
    if datasets == ALL:
        return [f for f in known if f not in EXCLUDED and f not in set(exclude)]
    if isinstance(datasets, str) or not datasets:
        raise ValueError(f"reasoning_gym datasets must be 'all' or a non-empty list of names, got {datasets!r}")
    unknown = [d for d in datasets if d not in known]
    if unknown:
        raise ValueError(f"unknown reasoning-gym datasets {unknown}; available: {known}")
    if "composite" in datasets:
        raise ValueError(f"'composite' cannot be a family: {EXCLUDED['composite']}")
    for name in datasets:
        if name in EXCLUDED:
            log.warning("reasoning_gym: %s is excluded from 'all' (%s); built because it was named", name, EXCLUDED[name])
    return [d for d in dict.fromkeys(datasets) if d not in set(exclude)]


def check_overrides(configs: Mapping[str, Mapping[str, Any]], families: Sequence[str]) -> None:
    """Refuse `configs` that name an unselected family or a field its configuration does not have."""
    from reasoning_gym.factory import DATASETS

    unknown = sorted(set(configs) - set(families))
    if unknown:
        raise ValueError(f"reasoning_gym configs name families that are not selected: {unknown}")
    for family, overrides in configs.items():
        known = {f.name for f in fields(DATASETS[family][1])}
        if set(overrides) - known:
            raise ValueError(f"reasoning_gym configs.{family} sets unknown fields {sorted(set(overrides) - known)}; "
                             f"its configuration has {sorted(known)}")


def family_levels(family: str, levels: Sequence[int]) -> list[int]:
    """The requested levels the family has: all of them with a curriculum, else level 1 alone."""
    from reasoning_gym.factory import has_curriculum

    return sorted(levels) if has_curriculum(family) else [lvl for lvl in sorted(levels) if lvl == 1]


def level_config(family: str, level: int, seed: int, size: int, overrides: Mapping[str, Any]) -> Any:
    """The family's configuration at a difficulty level (its curriculum at global level `level - 1`),
    with its `FIXES` and then `overrides` applied, validated."""
    from reasoning_gym.factory import DATASETS, create_curriculum, has_curriculum

    if has_curriculum(family):
        curriculum = create_curriculum(family)
        curriculum.set_global_level(level - 1)
        config = curriculum.generate_configuration({"seed": seed, "size": size})
    else:
        config = DATASETS[family][1](seed=seed, size=size)
    fix = FIXES[family][0](config) if family in FIXES else {}
    config = replace(config, **{**fix, **overrides, "seed": seed, "size": size})
    if callable(getattr(config, "validate", None)):
        config.validate()
    return config


def _generator(family: str, config: Any) -> Any:
    from reasoning_gym.factory import DATASETS

    return DATASETS[family][0](config=config)


def reference_answer(family: str, item: Mapping[str, Any]) -> str | None:
    """The item's answer, or the solution its metadata keeps (`ORACLE_KEYS`), as a string; None if neither."""
    if isinstance(item.get("answer"), str):
        return item["answer"]
    metadata = item.get("metadata") or {}
    for key in ORACLE_KEYS:
        if key in metadata:
            value = metadata[key]
            return value if isinstance(value, str) else json.dumps(value)
    return None


def _problem(family: str, item: Any, request: FamilyRequest) -> tuple[str | None, dict[str, Any]]:
    """What is wrong with one generated item (None: nothing), and its reference when it is right."""
    if not isinstance(item, dict) or not isinstance(item.get("question"), str) or not item["question"].strip():
        return f"malformed item: expected a dict with a non-empty 'question' string, got {str(item)[:120]!r}", {}
    if not isinstance(item.get("metadata", {}), dict):
        return "malformed item: 'metadata' is not a dict", {}
    answer = reference_answer(family, item)
    if answer is None or not answer.strip():
        return "no reference answer: the item has neither an answer nor a solution in its metadata", {}
    if len(item["question"]) > request.max_prompt_chars:
        return f"question longer than max_prompt_chars={request.max_prompt_chars} ({len(item['question'])})", {}
    if len(answer) > request.max_answer_chars:
        return f"answer longer than max_answer_chars={request.max_answer_chars} ({len(answer)})", {}
    try:
        literal = entry_literal(item)
    except ValueError as e:
        return f"malformed item: {e}", {}
    credit = family_score(family, answer, item)
    if credit < 1.0:
        return f"the reference answer earns {credit:g}, not 1, from the family's own scorer", {}
    refused = screen(family, answer, item) if family in SCORED else None
    if refused:
        return f"the reference answer does not pass the family's screen: {refused}", {}
    return None, {"family": family, "answer": answer, "entry": literal}


def generate_family(request: FamilyRequest) -> list[dict[str, Any]]:
    """The task rows of one (family, level) job; an item that fails a check is a row with an `_error`."""
    rows = []
    for split, count in request.counts.items():
        if not count:
            continue
        items = _items(request, split, count)
        again = _items(request, split, count)  # a fresh generator: every item must repeat
        differ = [i for i, (a, b) in enumerate(zip(items, again)) if _identity(a) != _identity(b)]
        if differ:
            raise RuntimeError(f"nondeterministic: a fresh generator with the same seed gave {len(differ)} of "
                               f"{count} items differently (first: item {differ[0]})")
        for index, item in zip(request.indices[split], items):
            reason, reference = _problem(request.family, item, request)
            row = {
                "task_id": f"{request.family}-{split}-{index:05d}", "domain": request.family, "split": split,
                "prompt": _prompt(item.get("question", "") if isinstance(item, dict) else "", request.instruction),
                "reference": reference, "difficulty": request.level,
                "source": f"reasoning_gym:{request.family}:level={request.level}:seed={request.seeds[split]}",
            }
            rows.append({**row, "_error": reason} if reason else row)
    return rows


def _items(request: FamilyRequest, split: str, count: int) -> list[Any]:
    """`count` items of one split from a fresh generator, each drawn under `_global_seeds` of its index."""
    seed = request.seeds[split]
    generator = _generator(request.family, level_config(request.family, request.level, seed, count, request.overrides))
    items = []
    for i in range(count):
        with _global_seeds(zlib.crc32(f"{seed}:{i}".encode())):
            items.append(generator[i])
    return items


@contextmanager
def _global_seeds(seed: int) -> Iterator[None]:
    """Python's and numpy's global random generators seeded with `seed` inside, as they were outside."""
    import numpy as np

    state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _identity(item: Any) -> Any:
    """What must repeat when a generator is rebuilt with the same seed: an item's question and answer."""
    return (item.get("question"), item.get("answer")) if isinstance(item, dict) else repr(item)


def _family_error(request: FamilyRequest, why: str) -> dict[str, Any]:
    """The one `_error` row that stands for a (family, level) job that gave no tasks, saying why."""
    return {"task_id": f"{request.family}-level{request.level}", "domain": request.family, "split": "",
            "difficulty": request.level, "_error": why}


def _prompt(question: str, instruction: str) -> str:
    return f"{question}\n{instruction}" if instruction else question


def _seed(seed: int, family: str, level: int, split: str) -> int:
    """A reasoning-gym dataset seed per (family, level, split), stable across processes and platforms."""
    return zlib.crc32(f"{seed}:{family}:{level}:{split}".encode())


def gold(reference: dict[str, Any]) -> str:
    """The family, reference answer and generator's item of a task's reference, as the verifier reads them."""
    return make_gold(reference["family"], reference["answer"], reference["entry"])


def answer_key(completion: str) -> str | None:
    """The stated answer with whitespace normalised (for majority voting), or None."""
    found = extract(completion).answer
    return None if found is None else normalise_answer(found)


class ReasoningGymFamily:
    """One family seen as a domain of its own (the curate stage and evaluation look members up by name)."""

    def __init__(self, name: str, verifier: ReasoningGymVerifier) -> None:
        self.name = name
        self.verifier = verifier

    gold = staticmethod(gold)
    answer_key = staticmethod(answer_key)


class ReasoningGymDomain:
    """Tasks from reasoning-gym's generators (see the module docstring); each family is a domain."""

    name = "reasoning_gym"
    verifier_class = ReasoningGymVerifier  # the reward, built from the block's `verifier` options
    weights = None  # no weighted cut of the train pool: the curriculum weights families online
    shared_solutions = SHARED_SOLUTIONS  # families where one task's solution can solve another (the reward audit)

    def __init__(
        self,
        splits: Mapping[str, int],  # tasks per split, per family
        datasets: str | Sequence[str] = ALL,  # the families: `all` or a list of names
        levels: Sequence[int] = (1,),  # levels of each family's curriculum (level 1 only without one)
        seed: int = 0,  # task generation seed
        exclude: Sequence[str] = (),  # families left out of `datasets`
        configs: Mapping[str, Mapping[str, Any]] | None = None,  # family -> its generator's config overrides
        instruction: str = DEFAULT_INSTRUCTION,  # appended to every question
        max_prompt_chars: int = 20000,  # longer questions are left out
        max_answer_chars: int = 5000,  # tasks with longer answers are left out
        generation: Mapping[str, Any] | None = None,  # {workers, timeout_seconds} of the sandboxed generators
        verifier: Mapping[str, Any] | None = None,  # ReasoningGymVerifier's settings
    ) -> None:
        if not levels or any(not isinstance(v, int) or v < 1 for v in levels):
            raise ValueError(f"reasoning_gym levels must be integers >= 1, got {list(levels)}")
        self.families = resolve_families(datasets, exclude)
        check_overrides(configs or {}, self.families)
        self.splits = dict(splits)
        self.levels = sorted(set(levels))
        self.seed = seed
        self.configs = {k: dict(v) for k, v in (configs or {}).items()}
        self.instruction = instruction
        self.max_prompt_chars = max_prompt_chars
        self.max_answer_chars = max_answer_chars
        self.generation = Generation(**(generation or {}))
        self.verifier = self.verifier_class(**(verifier or {}))
        self.members = {f: ReasoningGymFamily(f, self.verifier) for f in self.families}

    def member(self, key: str) -> ReasoningGymFamily:
        """The family called `key`."""
        if key not in self.members:
            raise ValueError(f"{key!r} is not one of this domain's reasoning-gym families: {sorted(self.members)}")
        return self.members[key]

    def _requests(self, counts: Mapping[str, int], seed: int) -> list[FamilyRequest]:
        """One job per (family, level); each split's tasks take the levels in turn."""
        requests = []
        for family in self.families:
            levels = family_levels(family, self.levels)
            for level in levels:
                indices = {s: [i for i in range(n) if levels[i % len(levels)] == level] for s, n in counts.items()}
                if not any(indices.values()):
                    continue
                requests.append(FamilyRequest(
                    family, level, {s: _seed(seed, family, level, s) for s in counts},
                    {s: len(ix) for s, ix in indices.items()}, indices, self.configs.get(family, {}),
                    self.instruction, self.max_prompt_chars, self.max_answer_chars,
                ))
        return requests

    def _generate(self, requests: Sequence[FamilyRequest], desc: str) -> list[dict[str, Any]]:
        """Every request's rows; a job that raised, hung or died, or a `QUARANTINED` family (not generated),
        gives one `_error` row saying so."""
        held = [r for r in requests if r.family in QUARANTINED]
        requests = [r for r in requests if r.family not in QUARANTINED]
        rows: list[dict[str, Any]] = [_family_error(r, f"quarantined: {QUARANTINED[r.family]}") for r in held]
        for request in held:
            log.warning("reasoning_gym %s: %s quarantined: %s", desc, request.family, QUARANTINED[request.family])
        settings = {"workers": self.generation.workers, "timeout_seconds": self.generation.timeout_seconds,
                    "retry": {"max_attempts": 1, "retry_timeouts": False}, "hash_seed": HASH_SEED}
        with create_scheduler(settings) as scheduler:
            for request, result in zip(requests, scheduler.map(generate_family, requests)):
                if result.ok:
                    rows += result.value
                    continue
                why = {"timeout": f"the generator ran past generation.timeout_seconds={self.generation.timeout_seconds:g}",
                       "error": f"the generator raised {result.error}",
                       "infra_error": f"the generator's worker died: {result.error}"}.get(result.status, result.error)
                log.warning("reasoning_gym %s: %s level %d quarantined: %s", desc, request.family, request.level, why)
                rows.append(_family_error(request, why))
        return rows

    def rows(self) -> list[dict[str, Any]]:
        """Every family's task rows at every level, not yet validated (bad ones carry an `_error`)."""
        rows = self._generate(self._requests(self.splits, self.seed), "generation")
        log.info("reasoning_gym: %d rows from %d families", len(rows), len(self.families))
        return rows

    def generate_tasks(self) -> list[Task]:
        """The rows that passed every generation check, as tasks."""
        return [Task(r["task_id"], r["domain"], r["prompt"], r["reference"], r["difficulty"], r["split"], r["source"])
                for r in self.rows() if not r.get("_error")]

    gold = staticmethod(gold)

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The reference answer in ``<answer>`` tags (generators give no worked solutions, so `worked` changes nothing)."""
        return f"{OPEN}{task.reference['answer']}{CLOSE}"

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """The family's verdict in this process (the pipeline verifies through the worker pool)."""
        return self.verifier.score(completion, self.gold(reference))

    answer_key = staticmethod(answer_key)

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Fresh items of every family and level (their own seeds) with their answers in tags, in plain
        text, none of whose prompts is in `exclude`; a family whose generation fails is left out."""
        jobs = max(1, sum(len(family_levels(f, self.levels)) for f in self.families))
        rows = self._generate(self._requests({"corpus": math.ceil(size / jobs)}, seed), "corpus")
        texts = [f"{r['prompt']}\n{OPEN}{r['reference']['answer']}{CLOSE}" for r in rows
                 if not r.get("_error") and r["prompt"] not in exclude]
        return texts[:size]
