"""Finding the final answer a math completion states, as a careful grader reads it.

Extraction takes every brace-matched ``\\boxed{...}`` / ``\\fbox{...}``, else GSM8K's ``#### 42``,
else ``The answer is ...`` / ``Answer: ...`` / ``A: ...`` lines (markdown bold removed), else
(unless ``strict``) the last number or math span of the text. An answer line after the last box
replaces the boxes only when it states something (a number, math, a choice letter), not a remark
(``Note that the answer is unique.``). For multiple choice the last pick counts (a corrected pick
replaces the first), and a hedged pick (``A or B``) is no pick. Every function does work linear in
its input (at most quadratic in an answer's `MAX_ANSWER_CHARS`), so extraction is safe in the
caller's process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlvr_factory.verifiers.math_numbers import _MULTIPLIERS, _THOUSANDS, changes_value

MAX_ANSWER_CHARS = 1000  # a longer final answer is not looked into
MAX_CHOICE_CHARS = 60  # a multiple-choice gold (``(C) Cecile``) is no longer than this
MAX_ANSWERS = 32  # more final answers than this are spam whatever they are
TAIL_CHARS = 2000  # an unmarked answer is looked for in this many final characters

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_BOLD = re.compile(r"(?<![\w*])\*\*(?=\S)([^*\n]{1,400}?)(?<=\S)\*\*(?![\w*])")
_ANSWER_LINE = re.compile(r"^.*\banswer\b\s*(?:is\b|[:=])\s*(.*)$|^[ \t]*A[ \t]*:\s*(.*)$", re.IGNORECASE | re.MULTILINE)
_HASHES = re.compile(r"^[ \t]*####(.*)$", re.MULTILINE)
_NOT_AN_ANSWER = re.compile(  # a remark (``not unique``), not an answer (``not 42`` is one, and rejected)
    r"(?:in)?correct\b|right\b|wrong\b|below\b|above\b|as follows\b|(?:not(?!\s*\$?-?\d)|that|this)\b",
    re.IGNORECASE,
)
HEDGE = re.compile(r"(?<![A-Za-z\\])(?:or|maybe|perhaps|possibly|probably|alternatively|either)(?![A-Za-z])",
                   re.IGNORECASE)
_SCALE = re.compile(r"(?<![A-Za-z])(?:" + "|".join(_MULTIPLIERS) + r"|percent|percentage|pct)s?(?![A-Za-z])",
                    re.IGNORECASE)  # words that `as_number` reads into the value
_LONE_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?%?(?![\w%])")
_PLAIN_WORDS = re.compile(r"[A-Za-z'’ \t,;:!()]*")
_SENTENCE_END = re.compile(r"\.(?:\s|$)")
_HOPE = "I hope it is correct"
_STATES_SOMETHING = re.compile(r"[\d$\\^_=<>]|^\s*\(?[A-Ea-e]\)?\s*$")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.DOTALL)
_LAST_NUMBER = re.compile(r"(?<![A-Za-z\d.])-?(?:\d{1,3}(?:[, ]\d{3})+(?:\.\d+)?(?!\d)|\d*\.\d+|\d+)%?")
_SEPARATOR = re.compile(r"(?:,|;|\\text\{\s*(?:or|and)\s*\}|\bor\b|\band\b|\\quad|\\qquad)")
_CHOICE_GOLD = re.compile(r"^\(?([A-E])\)?(?:[\s.:)].*)?$", re.DOTALL)
_CHOICE_ANCHOR = re.compile(
    r"(?:answer\s*(?:is|:)|réponse est|答案是)\D{0,20}?(?<![A-Za-z])\(?([A-E])\)?(?![A-Za-z])", re.IGNORECASE
)
_CHOICE_FIRST = re.compile(r"^\s*\(?([A-E])\)?(?![A-Za-z])")
_CHOICE_ANY = re.compile(r"(?<![A-Za-z])([A-E])(?![A-Za-z'’])")
_CHOICE_HEDGE = re.compile(
    r"\s*(?:,|/|\\lor|\bor\b|\band\b|\\text\{\s*(?:or|and)\s*\})\s*(?:\\text\{\s*)?\(?[A-E]\)?(?![A-Za-z])"
)


@dataclass(frozen=True)
class Answers:
    """The final answers a text states, and whether a marker (box, ``####``, ``Answer:``) stated them."""

    values: tuple[str, ...]
    marked: bool


def unbold(text: str) -> str:
    """The text with markdown bold (``**42**``) unwrapped; ``2**3`` (a power) is left alone."""
    return _BOLD.sub(r"\1", text) if "**" in text else text


def _brace_matches(text: str) -> dict[int, int]:
    """Map each ``{`` position to its matching ``}`` position (one linear pass)."""
    stack, matches = [], {}
    for i, char in enumerate(text):
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            matches[stack.pop()] = i
    return matches


def _boxes(text: str) -> list[tuple[int, int, str | None]]:
    """(start, end, content) of every ``\\boxed{...}`` / ``\\fbox{...}`` in order; None content when unclosed."""
    matches = _brace_matches(text) if "\\boxed" in text or "\\fbox" in text else {}
    found = []
    for start in _BOX_START.finditer(text):
        close_at = matches.get(start.end() - 1)
        found.append((start.start(), start.end(), None) if close_at is None
                     else (start.start(), close_at, text[start.end() : close_at]))
    return found


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with matched braces, or None."""
    boxes = _boxes(text)
    return boxes[-1][2] if boxes else None


def _clip_sentence(answer: str) -> str:
    """An answer line up to the end of its first sentence, without a trailing full stop."""
    hope = answer.find(_HOPE)
    answer = answer[:hope] if hope >= 0 else answer
    end = _SENTENCE_END.search(answer)
    return (answer[: end.start()] if end else answer).strip().rstrip(".").strip()


def lone_number(answer: str) -> str:
    """The answer's one number when plain words surround it (``the number 42, I think``, ``42 (apples)``),
    else the answer unchanged: two numbers, math, or a word that hedges, bounds, negates or scales the
    number (``42 or so``, ``at least 42``, ``5 million``) keep it whole, for the verdict to judge."""
    numbers = list(_LONE_NUMBER.finditer(answer))
    if len(numbers) != 1:
        return answer
    rest = answer[: numbers[0].start()] + " " + answer[numbers[0].end() :]
    if not _PLAIN_WORDS.fullmatch(rest) or HEDGE.search(rest) or _SCALE.search(rest) or changes_value(answer):
        return answer
    return numbers[0][0]


def _answer_lines(text: str, after: int) -> list[str]:
    """The answers stated by ``#### x`` lines, else by answer lines, that start after position `after`."""
    for pattern in (_HASHES, _ANSWER_LINE):
        lines = [
            lone_number(_clip_sentence(next(g for g in m.groups() if g is not None)))
            for m in pattern.finditer(text)
            if m.start(m.lastindex) > after
        ]
        lines = [line for line in lines if line and not _NOT_AN_ANSWER.match(line)]
        if lines:
            return lines
    return []


def find_answers(text: str, strict: bool = False) -> Answers:
    """The final answers a completion states.

    Boxes count, unless answer lines (``#### x``, ``The answer is x``, ``Answer: x``, ``A: x``) that
    state something follow the last box: those are then the final answers and the boxes
    intermediate results. In ``strict`` mode only boxes count. Without any marker (and not strict),
    the last math span or number stands as an unmarked answer.
    """
    text = unbold(text)
    boxes = [(end, b.strip()) for _, end, b in _boxes(text) if b is not None and b.strip()]
    if strict:
        return Answers(tuple(b for _, b in boxes), marked=bool(boxes))
    lines = _answer_lines(text, boxes[-1][0] if boxes else -1)
    if boxes:
        lines = [line for line in lines if _STATES_SOMETHING.search(line)]
    if lines or boxes:
        return Answers(tuple(lines or [b for _, b in boxes]), marked=True)
    tail = text[-TAIL_CHARS:]
    spans = [next(g for g in m.groups() if g is not None).strip() for m in _MATH_SPAN.finditer(tail)]
    if spans and spans[-1]:
        return Answers((spans[-1],), marked=False)
    numbers = _LAST_NUMBER.findall(tail)
    return Answers((numbers[-1],) if numbers else (), marked=False)


def gold_answers(gold: str) -> list[str]:
    """The answers a gold reference states: its last run of boxes (boxes far apart are not one list),
    else its marked answers, else the whole reference."""
    boxes = [(start, end, b.strip()) for start, end, b in _boxes(gold) if b]
    run = boxes[-1:]
    for previous in reversed(boxes[:-1]):
        gap = re.sub(r"\\[A-Za-z]+|[^A-Za-z\s]", " ", gold[previous[1] + 1 : run[0][0]])
        if len(gap.split()) > 2:
            break
        run.insert(0, previous)
    if run:
        return [b for _, _, b in run]
    found = find_answers(gold)
    return list(found.values) if found.marked else [gold.strip()]


def extract_answer(text: str) -> str | None:
    """The final answer a completion states (its last box, else its last answer line), or None."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    found = find_answers(text)
    return found.values[-1] if found.marked and found.values else None


def parts(answer: str) -> list[str]:
    """The top-level parts of an answer list (``1, 2``, ``3 or 4``).

    Brackets, ``\\{...\\}`` and command arguments keep tuples, intervals and sets whole; a bare
    ``{...}`` group does not, so ``{1,2,3}`` has three parts.
    """
    text = _THOUSANDS.sub("", answer[:MAX_ANSWER_CHARS])
    found, depth, start, groups = [], 0, 0, []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "{":
            groups.append(bool(re.search(r"(\\[A-Za-z]+|\\|[\^_}])$", text[max(0, i - 20) : i])))
            depth += groups[-1]
        elif char == "}":
            depth -= groups.pop() if groups else 0
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth <= 0 and char in ",;\\ao" and (match := _SEPARATOR.match(text, i)) and (
                char in ",;\\" or not text[i - 1 : i].isalnum()):
            found.append(text[start:i])
            start = i = match.end()
            continue
        i += 1
    found.append(text[start:])
    return [p.strip() for p in found if p.strip() and p.strip() not in ("\\", "$")]


def choice_letter(gold: str) -> str | None:
    """The letter of a multiple-choice gold answer (``C``, ``(D) Alina``, ``... the answer is (C)``), or None."""
    text = gold.strip()
    if len(text) > MAX_CHOICE_CHARS or re.search(r"\d", text):
        return None
    match = _CHOICE_GOLD.match(text) or _CHOICE_ANCHOR.search(text)
    return match[1] if match else None


def stated_choice(text: str) -> str | None:
    """The option letter a completion picks: after its last ``answer is``, else a leading letter, else the
    last one; None when the pick is hedged (``A or B``, ``(A)/(B)``)."""
    text = unbold(text)
    anchors = list(_CHOICE_ANCHOR.finditer(text[-TAIL_CHARS:] if len(text) > TAIL_CHARS else text))
    match = anchors[-1] if anchors else _CHOICE_FIRST.match(text)
    if match:
        source = match.string
        return None if _CHOICE_HEDGE.match(source, match.end()) else match[1]
    letters = _CHOICE_ANY.findall(text[-TAIL_CHARS:])
    return letters[-1] if letters else None
