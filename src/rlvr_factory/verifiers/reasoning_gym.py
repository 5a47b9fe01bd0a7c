"""Reward for reasoning-gym tasks: the final ``<answer>...</answer>`` block, judged exactly or by the family's scorer.

The gold is a JSON string ``{"family": name, "answer": reference answer, "entry": the generator's
item as a Python literal}`` (`make_gold`; a literal, because scorers compare tuples and sets that JSON
would turn into lists). A completion is read the reasoning-gym way: the text inside its
``<answer>`` tags is the answer. The verdict, all in the breakdown:

* **format**: exactly one distinct answer was given in tags; none, or several that differ
  (`ambiguous`), scores 0, so hedging across blocks earns nothing;
* **outcome**: 1 or 0, by the family's rule (`reasoning_gym_rules`): most families compare the
  answer with the reference exactly (canonical forms; no scorer runs, in the caller's process); the
  families with several valid answers pass a parse-only `screen` of the answer's form, then their own
  `score_answer(answer, entry)` runs in the scoring sandbox (`verifiers.isolation`: a process forked
  for that one row), and only its full credit counts: partial credit, which reasoning-gym pays for
  length, prefixes and junk, is 0. `screened` in the breakdown marks an answer refused by the screen.

reward = outcome_weight * outcome + format_weight * format; `correct` when the outcome is 1. The
breakdown declares both components and their weights (`weight.outcome`, `weight.format`), so
per-component normalisation can read them apart. A scorer can be slow, hang or raise: it runs under
the sandbox's time limit, and one that raises or returns something that is not a number in [0, 1] is
an `error`, never a crash. `quick_score` only extracts, parses and compares, in bounded time.
"""

from __future__ import annotations

import ast
import functools
import json
import math
from dataclasses import dataclass
from typing import Any, Callable

from rlvr_factory.verifiers.canonical import same
from rlvr_factory.verifiers.isolation import Sandboxed
from rlvr_factory.verifiers.reasoning_gym_rules import CASELESS, MINIMAL, SCORED, screen
from rlvr_factory.verifiers.score import Score, declare_weights

OPEN, CLOSE = "<answer>", "</answer>"
FULL_CREDIT = 1.0 - 1e-9  # a scorer's float at or above this counts as fully correct


def answer_blocks(completion: str) -> list[str]:
    """The stripped contents of every ``<answer>...</answer>`` block, in order (one left-to-right scan)."""
    blocks, pos = [], 0
    while (start := completion.find(OPEN, pos)) >= 0:
        end = completion.find(CLOSE, start + len(OPEN))
        if end < 0:
            break
        blocks.append(completion[start + len(OPEN) : end].strip())
        pos = end + len(CLOSE)
    return blocks


def normalise_answer(answer: str) -> str:
    """An answer with runs of whitespace collapsed, for telling answers apart and for majority voting."""
    return " ".join(answer.split())


@dataclass(frozen=True)
class Extracted:
    """The completion's answer (None: no single one), and whether several different ones were given."""

    answer: str | None
    ambiguous: bool = False


def extract(completion: str) -> Extracted:
    """The one answer a completion states in tags; several different blocks are ambiguous."""
    blocks = answer_blocks(completion)
    if not blocks:
        return Extracted(None)
    if len({normalise_answer(b) for b in blocks}) > 1:
        return Extracted(None, ambiguous=True)
    return Extracted(blocks[-1])


def plain(value: Any) -> Any:
    """`value` with numpy scalars (``np.str_``, ``np.int64``, ...) made the Python values they equal."""
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return type(value)(plain(v) for v in value)
    item = getattr(value, "item", None)
    return item() if callable(item) and type(value).__module__ == "numpy" else value


def entry_literal(entry: dict[str, Any]) -> str:
    """A generator's item (numpy scalars made plain) as a Python literal that reads back equal;
    raises ValueError when it does not."""
    entry = plain(entry)
    text = repr(entry)
    try:
        same = read_entry(text) == entry
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
        raise ValueError(f"the item is not a plain Python literal ({type(e).__name__}: {str(e)[:80]})") from None
    if not same:
        raise ValueError("the item does not read back equal to itself (NaN or an object without a literal form)")
    return text


def read_entry(text: str) -> dict[str, Any]:
    """The item an `entry_literal` wrote (literals only: nothing is executed)."""
    entry = ast.literal_eval(text)
    if not isinstance(entry, dict):
        raise ValueError(f"an entry must be a dict, got {type(entry).__name__}")
    return entry


def make_gold(family: str, answer: str, entry: str) -> str:
    """The gold string of one task: its family, reference answer and `entry_literal` of the generator's item."""
    return json.dumps({"family": family, "answer": answer, "entry": entry}, sort_keys=True)


@functools.lru_cache(maxsize=None)
def scorer(family: str) -> Callable[[str | None, dict[str, Any]], float]:
    """The family's `score_answer`, as reasoning-gym builds it (one instance per family and process)."""
    import reasoning_gym

    return reasoning_gym.get_score_answer_fn(family)


def family_score(family: str, answer: str | None, entry: dict[str, Any]) -> float:
    """The family scorer's value for `answer`; raises ValueError when it is not a number in [0, 1]."""
    value = scorer(family)(answer, entry)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 <= value <= 1:
        raise ValueError(f"the {family} scorer returned {value!r}, not a number in [0, 1]")
    return float(value)


class ReasoningGymVerifier(Sandboxed):
    """Reward for reasoning-gym families (see the module docstring)."""

    def __init__(self, outcome_weight: float = 1.0, format_weight: float = 0.0, max_completion_chars: int = 20000,
                 max_answer_chars: int = 4096) -> None:
        self.outcome_weight = outcome_weight  # reward share of the family scorer's verdict
        self.format_weight = format_weight  # reward share for stating exactly one answer in tags
        self.max_completion_chars = max_completion_chars  # longer completions: status error
        self.max_answer_chars = max_answer_chars  # longer answers: status error, never sent to a scorer

    def _verdict(self, outcome: float, stated: bool, ambiguous: bool = False, status: str = "ok",
                 message: str = "", screened: bool = False) -> Score:
        breakdown = {"outcome": outcome, "format": float(stated), "ambiguous": float(ambiguous),
                     "screened": float(screened),
                     **declare_weights(outcome=self.outcome_weight, format=self.format_weight)}
        reward = self.outcome_weight * outcome + self.format_weight * float(stated) if status == "ok" else 0.0
        return Score(reward=reward, correct=status == "ok" and outcome >= FULL_CREDIT, status=status,
                     breakdown=breakdown, message=message)

    def _error(self, message: str, stated: bool = False) -> tuple[Score, None, None]:
        return self._verdict(0.0, stated, status="error", message=message), None, None

    def _screen(self, completion: str, gold: str) -> tuple[Score | None, dict[str, Any] | None, str | None]:
        """A verdict reached without the scorer, else the parsed gold (its entry read) and the extracted answer."""
        if len(completion) > self.max_completion_chars:
            return self._error(f"the completion is longer than max_completion_chars={self.max_completion_chars}")
        try:
            spec = json.loads(gold)
            if not isinstance(spec.get("family"), str) or not isinstance(spec.get("entry"), str) or \
                    not isinstance(spec.get("answer"), str):
                raise ValueError("it needs a 'family' name, an 'answer' and an 'entry' literal")
        except (ValueError, AttributeError, RecursionError) as e:
            return self._error(f"invalid reasoning-gym gold: {e}")
        found = extract(completion)
        if found.answer is None:
            return self._verdict(0.0, False, ambiguous=found.ambiguous), None, None
        if len(found.answer) > self.max_answer_chars:
            return self._error(f"the answer is longer than max_answer_chars={self.max_answer_chars}", stated=True)
        family = spec["family"]
        if same(found.answer, spec["answer"], caseless=family in CASELESS):
            return self._verdict(1.0, True), None, None
        if family not in SCORED:
            return self._verdict(0.0, True), None, None
        try:
            spec["entry"] = read_entry(spec["entry"])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as e:
            return self._error(f"invalid reasoning-gym entry: {type(e).__name__}: {str(e)[:80]}", stated=True)
        refused = screen(family, found.answer, spec["entry"])
        if refused is not None:
            return self._verdict(0.0, True, screened=True, message=refused), None, None
        return None, spec, found.answer

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """The verdict when no scorer is needed (no answer, several answers, an exact family, a refused answer)."""
        return self._screen(completion, gold)[0]

    def warm_up(self) -> None:
        """Build every family's scorer once, before any row (the scoring server's start-up); one that cannot
        be built (`composite` needs datasets of its own) is left to fail its checks."""
        from rlvr_factory.domains.reasoning_gym import available_families

        for family in available_families():
            try:
                scorer(family)
            except Exception:  # noqa: BLE001 - reported by the checks that need it
                continue

    def full_check(self, completion: str, gold: str) -> Score:
        """The full verdict: the family's scorer on the stated answer (in the scoring sandbox)."""
        quick, spec, answer = self._screen(completion, gold)
        if quick is not None:
            return quick
        family, entry = spec["family"], spec["entry"]
        if family_score(family, answer, entry) < FULL_CREDIT:
            return self._verdict(0.0, True)
        if family in MINIMAL and any(family_score(family, answer[:k], entry) >= FULL_CREDIT for k in range(1, len(answer))):
            return self._verdict(0.0, True, screened=True, message="a shorter prefix of the moves already solves it")
        return self._verdict(1.0, True)
