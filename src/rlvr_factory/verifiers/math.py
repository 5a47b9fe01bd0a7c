"""Math answer verification: extract the final answer, then compare it cheapest check first.

Extraction takes every brace-matched ``\\boxed{...}`` / ``\\fbox{...}``, else GSM8K's
``#### 42``, else ``The answer is ...`` / ``Answer: ...`` / ``A: ...`` lines, else (unless
``strict``) the last number or math span of the text. Equivalence tries, in order: a
normalised string match, an exact numeric match (integers, decimals, thousands
separators, fractions, percentages, scientific notation) within a relative tolerance,
then Math-Verify's symbolic check (sets, intervals, tuples, matrices, equations).

``quick_score`` runs only the first two, in bounded time and memory, so it is safe in the
caller's process; ``score`` adds Math-Verify, which can be slow on adversarial input and is
called with its own signal-based timeouts off: run it under a wall-clock guard.

Several different final answers (``\\boxed{3} ... \\boxed{4}``, ``3 or 4``) score 0 unless the
gold answer itself lists several parts; repeating one answer is fine.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from fractions import Fraction

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from rlvr_factory.verifiers.score import Score


class _TimeoutOffOnPurpose(logging.Filter):
    """Math-Verify warns, once per process, that its own timeout is off; it is off on purpose
    (its signals need the main thread; the caller's wall-clock guard bounds each check)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _logger in ("math_verify.parser", "math_verify.grader"):  # in every process that imports this module
    logging.getLogger(_logger).addFilter(_TimeoutOffOnPurpose())

MAX_EXPONENT = 400  # scientific-notation exponents beyond this are not plain numbers
MAX_NUMBER_DIGITS = 400  # longer digit strings are not plain numbers
MAX_STEP_DIGITS = 30  # operands of a stated computation longer than this are skipped
MIN_ROUNDED_DECIMALS = 3  # a decimal this long may be a rounded 1/3-like gold
MAX_CHOICE_CHARS = 60  # a multiple-choice gold (``(C) Cecile``) is no longer than this

_BOX_START = re.compile(r"\\(?:boxed|fbox)\s*\{")
_ANSWER_LINE = re.compile(
    r"^.*\banswer\b\s*(?:is\b|[:=])\s*(.+?)\s*$|^\s*A\s*:\s*(.+?)\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_HASHES = re.compile(r"^\s*####\s*(.+?)\s*$", re.MULTILINE)
_NOT_AN_ANSWER = re.compile(
    r"(?:in)?correct\b|right\b|wrong\b|below\b|above\b|as follows\b|(?:not|that|this)\b",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"\.(?:\s|$)|\s+I hope it is correct")
_MATH_SPAN = re.compile(
    r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.DOTALL
)
_DECIMAL_COMMA = re.compile(r"-?(?:0,\d+|\d+,(?:\d{1,2}|\d{4,}))")
_LAST_NUMBER = re.compile(
    r"(?<![A-Za-z\d.])-?(?:\d{1,3}(?:[, ]\d{3})+(?:\.\d+)?(?!\d)|\d*\.\d+|\d+)%?"
)
_CHOICE_GOLD = re.compile(r"^\(?([A-E])\)?(?:[\s.:)].*)?$", re.DOTALL)
_CHOICE_ANCHOR = re.compile(
    r"(?:answer\s*(?:is|:)|réponse est|答案是)\D{0,20}?(?<![A-Za-z])\(?([A-E])\)?(?![A-Za-z])",
    re.IGNORECASE,
)
_CHOICE_FIRST = re.compile(r"^\s*\(?([A-E])\)?(?![A-Za-z])")
_CHOICE_ANY = re.compile(r"(?<![A-Za-z])([A-E])(?![A-Za-z'’])")
_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textnormal|mathrm|mbox|mathbf|textit)\s*\{([^{}]*)\}"
)
_SEPARATOR = re.compile(
    r"\s*(?:,|;|\\text\{\s*(?:or|and)\s*\}|\bor\b|\band\b|\\quad|\\qquad)\s*"
)
_THOUSANDS = re.compile(r"(?<=\d)(?:\s?\{\s?,\s?\}\s?|,\\!\s?|\\,|,| )(?=\d{3}(?!\d))")
_UNIT_WORDS = re.compile(
    r"(?<=[\d}])\s*(?:\s[A-Za-z]{2,}|[A-Za-z]{2,})(?:\s+[A-Za-z]{2,})*(?:\^\{?\d\}?)?$"
)
_NUMBER = re.compile(
    r"^(?P<sign>[+-]?)(?P<int>\d*)(?:\.(?P<frac>\d*))?"
    r"(?:(?:e|E|\\times10\^|\\cdot10\^|\*10\^|\*\*|×10\^)\{?(?P<exp>[+-]?\d+)\}?)?(?P<pct>%?)$"
)
_FRACTION = re.compile(
    r"^(?P<sign>[+-]?)(?P<whole>\d*)\\[dtc]?frac\{(?P<num>[^{}]+)\}\{(?P<den>[^{}]+)\}(?P<pct>%?)$"
)
_STEP = re.compile(
    r"(?<![\w.^/])(\d+(?:\.\d+)?(?:\s*[-+*×/÷]\s*\d+(?:\.\d+)?)+)\s*=\s*\$?\s*(-?\d+(?:\.\d+)?)(?![\d.]\d)"
)
_ALIASES = (
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\cfrac", "\\frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("\\!", ""),
    ("\\$", ""),
    ("$", ""),
    ("\\%", "%"),
    ("percentage", "%"),
    ("percent", "%"),
    ("pct", "%"),
    ("^\\circ", ""),
    ("^{\\circ}", ""),
    ("°", ""),
    ("\\displaystyle", ""),
    ("\\le", "\\leq"),
    ("\\leqq", "\\leq"),
    ("\\ge", "\\geq"),
    ("\\geqq", "\\geq"),
    ("\\neq", "\\ne"),
    ("€", ""),
    ("\\,", " "),
    ("\\;", " "),
    ("\\ ", " "),
)


@dataclass(frozen=True)
class Answers:
    """The final answers a text states, and whether a marker (box, ``####``, ``Answer:``) stated them."""

    values: tuple[str, ...]
    marked: bool


def _brace_matches(text: str) -> dict[int, int]:
    """Map each ``{`` position to its matching ``}`` position (one linear pass)."""
    stack, matches = [], {}
    for i, char in enumerate(text):
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            matches[stack.pop()] = i
    return matches


def _boxes(text: str) -> list[tuple[int, str | None]]:
    """(end position, content) of every ``\\boxed{...}`` / ``\\fbox{...}`` in order; None content when unclosed."""
    matches = _brace_matches(text) if "\\boxed" in text or "\\fbox" in text else {}
    found = []
    for start in _BOX_START.finditer(text):
        close_at = matches.get(start.end() - 1)
        found.append(
            (start.end(), None)
            if close_at is None
            else (close_at, text[start.end() : close_at])
        )
    return found


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) with matched braces, or None."""
    boxes = _boxes(text)
    return boxes[-1][1] if boxes else None


def _clip_sentence(answer: str) -> str:
    """An answer line up to the end of its first sentence, without a trailing full stop."""
    end = _SENTENCE_END.search(answer)
    return (answer[: end.start()] if end else answer).strip().rstrip(".").strip()


def _answer_lines(text: str, after: int) -> list[str]:
    """The answers stated by ``#### x`` lines, else by answer lines, that start after position `after`."""
    for pattern in (_HASHES, _ANSWER_LINE):
        lines = [
            _clip_sentence(next(g for g in m.groups() if g is not None))
            for m in pattern.finditer(text)
            if m.start(m.lastindex) > after
        ]
        lines = [line for line in lines if line and not _NOT_AN_ANSWER.match(line)]
        if lines:
            return lines
    return []


def find_answers(text: str, strict: bool = False) -> Answers:
    """The final answers a completion states.

    Boxes count, unless answer lines (``#### x``, ``The answer is x``, ``Answer: x``, ``A: x``)
    follow the last box: those are then the final answers and the boxes intermediate results.
    In ``strict`` mode only boxes count. Without any marker (and not strict), the last math
    span or number stands as an unmarked answer.
    """
    boxes = [(end, b.strip()) for end, b in _boxes(text) if b is not None and b.strip()]
    if strict:
        return Answers(tuple(b for _, b in boxes), marked=bool(boxes))
    lines = _answer_lines(text, boxes[-1][0] if boxes else -1)
    if lines or boxes:
        return Answers(tuple(lines or [b for _, b in boxes]), marked=True)
    spans = [
        next(g for g in m.groups() if g is not None).strip()
        for m in _MATH_SPAN.finditer(text[-2000:])
    ]
    if spans and spans[-1]:
        return Answers((spans[-1],), marked=False)
    numbers = _LAST_NUMBER.findall(text[-2000:])
    return Answers((numbers[-1],) if numbers else (), marked=False)


def gold_answers(gold: str) -> list[str]:
    """The answers a gold reference states: its last run of boxes (boxes far apart are not one list),
    else its marked answers, else the whole reference."""
    boxes = [
        (m.start(), end, b.strip())
        for m, (end, b) in zip(_BOX_START.finditer(gold), _boxes(gold))
        if b
    ]
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
    return found.values[-1] if found.marked else None


def normalise(answer: str) -> str:
    """An answer in canonical spelling: no ``$``, ``\\left``/``\\right``, text wrappers or stray spaces."""
    text = _THOUSANDS.sub("", answer.strip())
    for old, new in _ALIASES:
        text = text.replace(old, new)
    text = _WRAPPERS.sub(r"\1", text)
    text = re.sub(r"(?<=\w)\s+(?=\w)", "\x00", text)
    text = re.sub(r"\s+", "", text).replace("\x00", " ")
    return (
        text.rstrip(".").lower()
        if re.fullmatch(r"[A-Za-z ]+", text)
        else text.rstrip(".")
    )


def parts(answer: str) -> list[str]:
    """The top-level parts of an answer list (``1, 2``, ``3 or 4``).

    Brackets, ``\\{...\\}`` and command arguments keep tuples, intervals and sets whole; a bare
    ``{...}`` group does not, so ``{1,2,3}`` has three parts.
    """
    text = _THOUSANDS.sub("", answer)
    found, depth, start, groups = [], 0, 0, []
    i = 0
    while i < len(text):
        char = text[i]
        if char == "{":
            groups.append(
                bool(re.search(r"(\\[A-Za-z]+|\\|[\^_}])$", text[max(0, i - 20) : i]))
            )
            depth += groups[-1]
        elif char == "}":
            depth -= groups.pop() if groups else 0
        elif char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth <= 0 and (match := _SEPARATOR.match(text, i)) and match.end() > i:
            found.append(text[start:i])
            start = i = match.end()
            continue
        i += 1
    found.append(text[start:])
    return [p.strip() for p in found if p.strip() and p.strip() not in ("\\", "$")]


def as_number(answer: str) -> tuple[Fraction, bool, int | None] | None:
    """A plain number as (exact value, written as a percentage, decimals written), else None.

    Reads integers, decimals, thousands separators, ``3/4``, ``\\frac{3}{4}``, percentages,
    scientific notation with a bounded exponent, and ignores a currency sign or trailing unit words.
    """
    text = normalise(answer)
    text = _UNIT_WORDS.sub("", text) if not text.endswith("%") else text
    text = text.replace(" ", "").replace("\u2212", "-")
    if len(text) > MAX_NUMBER_DIGITS:
        return None
    fraction = _FRACTION.match(text) or re.match(
        r"^(?P<sign>[+-]?)(?P<num>\d+)/(?P<den>\d+)(?P<pct>%?)$", text
    )
    if fraction:
        num, den = (as_number(fraction[k]) for k in ("num", "den"))
        if num is None or den is None or den[0] == 0 or num[1] or den[1]:
            return None
        value = (int(fraction.groupdict().get("whole") or 0) + num[0] / den[0]) * (
            -1 if fraction["sign"] == "-" else 1
        )
        return value, bool(fraction["pct"]), None
    match = _NUMBER.match(text)
    if not match or not (match["int"] or match["frac"]):
        return None
    exponent = (
        int(match["exp"] or 0) if len(match["exp"] or "") < 6 else MAX_EXPONENT + 1
    )
    if abs(exponent) > MAX_EXPONENT:
        return None
    digits = (match["int"] or "0") + (match["frac"] or "")
    value = (
        Fraction(int(digits), 10 ** len(match["frac"] or "")) * Fraction(10) ** exponent
    )
    decimals = len(match["frac"]) if match["frac"] and not match["exp"] else None
    return (-value if match["sign"] == "-" else value), bool(match["pct"]), decimals


def _close(
    predicted: Fraction, gold: Fraction, decimals: int | None, tolerance: float
) -> bool:
    """Equal within the relative tolerance, or the prediction is the gold rounded to its decimals.

    Rounding counts only for a gold with no finite decimal expansion (``1/3``) and a prediction with at
    least ``MIN_ROUNDED_DECIMALS`` decimals.
    """
    if abs(predicted - gold) <= Fraction(tolerance) * max(abs(gold), abs(predicted)):
        return True
    if decimals is None or decimals < MIN_ROUNDED_DECIMALS or _terminates(gold):
        return False
    return abs(predicted - gold) * 10**decimals <= Fraction(1, 2)


def _terminates(value: Fraction) -> bool:
    """Whether a fraction has a finite decimal expansion (its denominator has no prime but 2 and 5)."""
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


def numbers_match(predicted: str, gold: str, tolerance: float = 1e-6) -> bool | None:
    """Whether two plain numbers are equal (a percentage also matches its fraction), or None if either is no number."""
    p, g = as_number(predicted), as_number(gold)
    if p is None or g is None:
        return None
    candidates = {p[0]}
    if p[1] and not g[1]:
        candidates.add(p[0] / 100)
    gold_values = {g[0], g[0] / 100} if g[1] and not p[1] else {g[0]}
    return any(_close(c, v, p[2], tolerance) for c in candidates for v in gold_values)


def answers_match(predicted: str, gold: str, tolerance: float = 1e-6) -> bool:
    """Whether a predicted final answer equals the gold one by string or numeric match (no sympy)."""
    numeric = numbers_match(predicted, gold, tolerance)
    if numeric is not None:
        return numeric
    return normalise(predicted) == normalise(gold)


def _choice(gold: str) -> str | None:
    """The letter of a multiple-choice gold answer (``C``, ``(D) Alina``, ``... the answer is (C)``), or None."""
    text = gold.strip()
    if len(text) > MAX_CHOICE_CHARS or re.search(r"\d", text):
        return None
    match = _CHOICE_GOLD.match(text) or _CHOICE_ANCHOR.search(text)
    return match[1] if match else None


def stated_choice(text: str) -> str | None:
    """The option letter a completion picks: after ``answer is``, else a leading letter, else the last one."""
    match = _CHOICE_ANCHOR.search(text) or _CHOICE_FIRST.match(text)
    if match:
        return match[1]
    letters = _CHOICE_ANY.findall(text)
    return letters[-1] if letters else None


def _evaluate(expression: str) -> Fraction | None:
    """The exact value of ``a op b op c ...`` with ``* /`` before ``+ -``, or None on division by zero."""
    tokens = re.findall(r"\d+(?:\.\d+)?|[-+*×/÷]", expression)
    if any(len(t) > MAX_STEP_DIGITS for t in tokens):
        return None
    terms, signs, current = [], [], Fraction(tokens[0])
    for op, number in zip(tokens[1::2], tokens[2::2]):
        value = Fraction(number)
        if op in "*×":
            current *= value
        elif op in "/÷":
            if value == 0:
                return None
            current /= value
        else:
            terms.append(current)
            signs.append(op)
            current = value
    total = terms[0] if terms else current
    for sign, term in zip(signs, terms[1:] + [current]):
        total = total + term if sign == "+" else total - term
    return total


def process_score(text: str) -> tuple[int, int]:
    """(correct, total) over the computations ``a op b = c`` a text states, GSM8K ``<<a*b=c>>`` included.

    A result written with decimals counts as correct when it is the exact value rounded to those decimals.
    """
    correct = total = 0
    for match in _STEP.finditer(text):
        value, stated = _evaluate(match[1]), match[2]
        if value is None or len(stated) > MAX_STEP_DIGITS:
            continue
        total += 1
        decimals = len(stated.split(".")[1]) if "." in stated else 0
        correct += abs(value - Fraction(stated)) <= (
            Fraction(1, 2 * 10**decimals) if decimals else 0
        )
    return correct, total


def _distinct(values: list[str], tolerance: float) -> list[str]:
    """The values with repeats (same spelling or same number) removed, first spelling kept."""
    kept: list[str] = []
    for value in values:
        if not any(answers_match(value, seen, tolerance) for seen in kept):
            kept.append(value)
    return kept


@dataclass(frozen=True)
class _Judgement:
    """What extraction found: the predicted answer, the gold answer, and flags for the verdict."""

    predicted: str | None
    gold: str
    marked: bool
    spam: bool


def _mv_parse(text: str) -> list:
    """Math-Verify's parse of a text with its own timeout off (LaTeX, boxed first, then plain expressions)."""
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return parse(text, config, parsing_timeout=None)


def _mv_input(answer: str) -> str:
    """An extracted answer wrapped for Math-Verify: boxed, unless it is prose or already delimited."""
    prose = re.search(r"(?<![\\A-Za-z])[A-Za-z]{2,}\s+[A-Za-z]{2,}", answer)
    return (
        answer
        if prose or re.search(r"\$|\\\(|\\\[", answer)
        else f"\\boxed{{{answer}}}"
    )


def _float_rounding(answer: str) -> int:
    """Decimal places to compare floats at: those the answer writes (at least 2), at most Math-Verify's default 6."""
    written = [len(d) for d in re.findall(r"\d?\.(\d+)", answer)]
    return min(6, max(2, min(written))) if written else 6


class MathVerifier:
    """Reward for math: outcome (final answer right), format (an answer stated) and process (steps right)."""

    def __init__(
        self,
        strict: bool = False,
        tolerance: float = 1e-6,
        outcome_weight: float = 1.0,
        process_weight: float = 0.0,
        format_weight: float = 0.0,
        max_completion_chars: int = 20000,
        max_answer_chars: int = 1000,
    ) -> None:
        self.strict = strict  # only a boxed answer counts
        self.tolerance = tolerance  # relative tolerance of a numeric match
        self.outcome_weight = outcome_weight  # reward share for the right final answer
        self.process_weight = process_weight  # reward share for correct computations
        self.format_weight = format_weight  # reward share for stating an answer at all
        self.max_completion_chars = max_completion_chars  # longer: status error
        self.max_answer_chars = max_answer_chars  # longer answers: status error

    def _score(
        self,
        completion: str,
        outcome: float,
        marked: bool,
        status: str = "ok",
        spam: bool = False,
    ) -> Score:
        """A Score with its breakdown; spamming or an error forfeits the outcome."""
        correct_steps, steps = process_score(completion) if status == "ok" else (0, 0)
        outcome = 0.0 if spam or status != "ok" else outcome
        breakdown = {
            "outcome": outcome,
            "format": float(marked),
            "process": correct_steps / steps if steps else 0.0,
            "steps": float(steps),
            "spam": float(spam),
        }
        reward = (
            self.outcome_weight * outcome
            + self.process_weight * breakdown["process"]
            + self.format_weight * breakdown["format"]
        )
        return Score(
            reward=reward, correct=outcome == 1.0, status=status, breakdown=breakdown
        )

    def _judge(self, completion: str, gold: str) -> _Judgement:
        """Extract the predicted and gold answers and decide whether the prediction spams several answers."""
        golds = _distinct(gold_answers(gold), self.tolerance)
        gold_answer = ", ".join(golds)
        found = find_answers(completion, self.strict)
        if not found.values:
            return _Judgement(None, gold_answer, False, False)
        distinct = _distinct(list(found.values), self.tolerance)
        gold_is_single = len(golds) == 1 and len(parts(gold_answer)) == 1
        spam = (
            found.marked
            and gold_is_single
            and (
                len(distinct) > 1
                or len(_distinct(parts(distinct[0]), self.tolerance)) > 1
            )
        )
        return _Judgement(", ".join(distinct), gold_answer, found.marked, spam)

    def _quick(
        self, completion: str, gold: str
    ) -> tuple[Score | None, _Judgement | None]:
        """The fast-path verdict (or None) and the extraction it rests on."""
        if (
            len(completion) > self.max_completion_chars
            or len(gold) > self.max_completion_chars
        ):
            return self._score("", 0.0, False, status="error"), None
        judged = self._judge(completion, gold)
        letter = _choice(gold)
        if letter is not None and not self.strict:
            picked = stated_choice(last_boxed(completion) or completion)
            return self._score(
                completion, float(picked == letter), picked is not None
            ), judged
        if judged.spam or judged.predicted is None:
            return self._score(completion, 0.0, judged.marked, spam=judged.spam), judged
        if max(len(judged.predicted), len(judged.gold)) > self.max_answer_chars:
            return self._score(completion, 0.0, judged.marked, status="error"), judged
        numeric = numbers_match(judged.predicted, judged.gold, self.tolerance)
        if numeric is None:
            numeric = normalise(judged.predicted) == normalise(judged.gold) or None
        if numeric is None or not judged.marked:
            return None, judged
        return self._score(completion, float(numeric), judged.marked), judged

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """A final Score when extraction and the string/numeric checks decide, else None (a symbolic check is needed).

        Never calls sympy or Math-Verify and does bounded work, so it is safe in the caller's process.
        """
        try:
            return self._quick(completion, gold)[0]
        except Exception:  # noqa: BLE001 - a verifier never raises on model output
            return self._score("", 0.0, False, status="error")

    def score(self, completion: str, gold: str) -> Score:
        """Score one completion against the gold answer: the quick checks, then Math-Verify's symbolic check.

        A missing answer is wrong, never an error; oversized input or any internal failure is status ``error``.
        """
        try:
            quick, judged = self._quick(completion, gold)
            if quick is not None:
                return quick
            # Math-Verify's plain-expression parser reads a decimal comma (1,22); boxed, it is a list
            decimal_comma = _DECIMAL_COMMA.fullmatch(judged.gold)
            gold_parsed = _mv_parse(
                judged.gold if decimal_comma else _mv_input(judged.gold)
            ) or _mv_parse(gold)
            predicted = _mv_input(judged.predicted) if judged.marked else completion
            rounding = _float_rounding(judged.predicted)
            correct = verify(
                gold_parsed,
                _mv_parse(predicted),
                float_rounding=rounding,
                timeout_seconds=None,
            )
            return self._score(completion, float(correct), judged.marked)
        except Exception:  # noqa: BLE001 - a verifier never raises on model output
            return self._score("", 0.0, False, status="error")
