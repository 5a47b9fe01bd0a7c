"""Reading a final answer as an exact number, and comparing numbers the way a careful grader does.

`as_number` reads integers, decimals, thousands separators, fractions, mixed numbers,
percentages, scientific notation, repeating decimals (``0.\\overline{3}``, ``0.(3)``) and
multiplier words (``5 million``, ``2 dozen``) exactly, and ignores a currency sign and trailing
unit words (``12 cm``). Words that change a number's value in ways it does not read
(``squared``, ``factorial``, ``minus``, ...) or make it a bound or a negation (``at least``,
``more than``, ``not``) make `changes_value` true: such an answer is rejected, never read as the
bare number. `numbers_match` compares integers and exact fractions exactly, a
gold written as a decimal within a relative tolerance, and a decimal rounded from a
non-terminating gold only when rounding is allowed. Every function here does bounded work on any
input, so all of it may run in the caller's process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

MAX_EXPONENT = 400  # scientific-notation exponents beyond this are not plain numbers
MAX_NUMBER_CHARS = 400  # longer answers are not plain numbers
MAX_STEP_DIGITS = 30  # operands of a stated computation longer than this are skipped
MIN_ROUNDED_DECIMALS = 3  # with rounding allowed, a decimal this long may stand for a 1/3-like gold
MAX_STEP_CHARS = 160  # the longest computation `a op b op c = d` that the process reward reads

_THOUSANDS = re.compile(r"(?<=\d)(?:\s?\{\s?,\s?\}\s?|,\\!\s?|\\,|,| )(?=\d{3}(?!\d))")
_WRAPPERS = re.compile(r"\\(?:text|textbf|textnormal|mathrm|mbox|mathbf|textit)\s*\{([^{}]*)\}")
_UNIT_WORDS = re.compile(r"(?<=[\d}%])\s*(?:[A-Za-z]{2,}\s+)*[A-Za-z]{2,}(?:\^\{?\d\}?)?$")
_NUMBER = re.compile(
    r"^(?P<sign>[+-]?)(?P<int>\d*)(?:\.(?P<frac>\d*))?"
    r"(?:(?:e|E|\\times10\^|\\cdot10\^|\*10\^|\*\*|×10\^)\{?(?P<exp>[+-]?\d+)\}?)?(?P<pct>%?)$"
)
_FRACTION = re.compile(
    r"^(?P<sign>[+-]?)(?P<whole>\d*)\\[dtc]?frac\{(?P<num>[^{}]+)\}\{(?P<den>[^{}]+)\}(?P<pct>%?)$"
)
_SLASH_FRACTION = re.compile(r"^(?P<sign>[+-]?)(?P<num>\d+)/(?P<den>\d+)(?P<pct>%?)$")
_REPEATING = re.compile(
    r"^(?P<sign>[+-]?)(?P<int>\d*)\.(?P<fixed>\d*)"
    r"(?:\\overline\{(?P<bar>\d+)\}|\\overline(?P<bar1>\d)|\\dot\{(?P<dot>\d)\}|\((?P<paren>\d+)\)"
    r"|(?P<dots>\\ldots|\\cdots|\\dots|\.\.\.|…))$"
)
_MULTIPLIERS = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9, "trillion": 10**12,
                "dozen": 12}
_MULTIPLIER_WORDS = re.compile(r"^(?:" + "|".join(_MULTIPLIERS) + r")s?$", re.IGNORECASE)
# Words that change the value of the number they go with, and that `as_number` does not read.
_VALUE_WORDS = re.compile(
    r"(?<![A-Za-z\\])(?:squared|cubed|factorial|power|powers|times|twice|double|triple|half|halves|quarters?"
    r"|thirds?|minus|negative|plus|over|divided|multiplied|inverse|reciprocal|root|roots|percent\s+of|%\s*of"
    r"|not|never|least|most|more|less|fewer|greater|than|under|above|below|nearly|almost|beyond|except)"
    r"(?![A-Za-z])",
    re.IGNORECASE,
)  # the second line: words that make the number a bound or a negation (``at least 5``, ``not 5``)
_ARITHMETIC = re.compile(r"^\d+(?:\.\d+)?(?:[-+*×/÷]\d+(?:\.\d+)?)+$")
_STEP = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?(?:\s*[-+*×/÷]\s*\d+(?:\.\d+)?)+)\s*$")  # starts at a number's start
_STEP_RESULT = re.compile(r"=\s*(?:\$\s*)?(-?\d+(?:\.\d+)?)(?![\d.]\d)")  # one way to split the spaces: linear
_ALIASES = (
    ("\\dfrac", "\\frac"), ("\\tfrac", "\\frac"), ("\\cfrac", "\\frac"), ("\\left", ""), ("\\right", ""),
    ("\\!", ""), ("\\$", ""), ("$", ""), ("\\%", "%"), ("percentage", "%"), ("percent", "%"), ("pct", "%"),
    ("^\\circ", ""), ("^{\\circ}", ""), ("°", ""), ("\\displaystyle", ""), ("\\le", "\\leq"), ("\\leqq", "\\leq"),
    ("\\ge", "\\geq"), ("\\geqq", "\\geq"), ("\\neq", "\\ne"), ("€", ""), ("\\,", " "), ("\\;", " "), ("\\ ", " "),
)


@dataclass(frozen=True)
class Number:
    """An answer read as an exact number: its value, whether it was a percentage (and of a fraction),
    the decimals written (None: no decimal point), and whether it is a decimal approximation."""

    value: Fraction
    percent: bool = False
    decimals: int | None = None
    approximate: bool = False  # written with a decimal point or an exponent
    percent_of_fraction: bool = False  # ``\frac{1}{2}\%``: read exactly, never with the % dropped


def normalise(answer: str) -> str:
    """An answer in canonical spelling: no ``$``, ``\\left``/``\\right``, text wrappers or stray spaces."""
    text = _THOUSANDS.sub("", answer.strip())
    for old, new in _ALIASES:
        text = text.replace(old, new)
    text = _WRAPPERS.sub(r"\1", text)
    text = re.sub(r"(?<=\w)\s+(?=\w)", "\x00", text)
    text = re.sub(r"\s+", "", text).replace("\x00", " ")
    return text.rstrip(".").lower() if re.fullmatch(r"[A-Za-z ]+", text) else text.rstrip(".")


def changes_value(answer: str, gold: str = "") -> bool:
    """Whether the answer has a number and a word that changes its value which the gold does not share
    (``5 squared``, ``minus 5``, ``half of 10``, ``not 5``): such an answer is rejected rather than read as
    5, however long it is (one linear search)."""
    if not re.search(r"\d", answer):
        return False
    shared = {w.lower() for w in _VALUE_WORDS.findall(gold)}
    return any(w.lower() not in shared for w in _VALUE_WORDS.findall(_WRAPPERS.sub(r" \1 ", answer)))


def _multiplier(words: str) -> int | None:
    """The product of the multiplier words that start `words` (``million``, ``hundred thousand``); 1 if none;
    None if a multiplier follows anything else."""
    factor, seen_other = 1, False
    for word in words.split():
        if _MULTIPLIER_WORDS.match(word):
            if seen_other:
                return None
            factor *= _MULTIPLIERS[word.lower().rstrip("s")]
        else:
            seen_other = True
    return factor


def as_number(answer: str) -> Number | None:
    """A plain number (see the module docstring), else None."""
    if len(answer) > MAX_NUMBER_CHARS:
        return None
    text = normalise(answer)
    factor = 1
    words = _UNIT_WORDS.search(text)
    if words:
        factor = _multiplier(words.group())
        if factor is None:
            return None
        text = text[: words.start()]
    text = text.replace(" ", "").replace("\u2212", "-")
    number = _plain_number(text)
    if number is None or factor == 1:
        return number
    return Number(number.value * factor, number.percent, None, number.approximate, number.percent_of_fraction)


def _plain_number(text: str) -> Number | None:
    fraction = _FRACTION.match(text) or _SLASH_FRACTION.match(text)
    if fraction:
        num, den = _plain_number(fraction["num"]), _plain_number(fraction["den"])
        if num is None or den is None or den.value == 0 or num.percent or den.percent:
            return None
        whole = int(fraction.groupdict().get("whole") or 0)
        value = (whole + num.value / den.value) * (-1 if fraction["sign"] == "-" else 1)
        return Number(value, bool(fraction["pct"]), None, num.approximate or den.approximate, bool(fraction["pct"]))
    repeating = _REPEATING.match(text)
    if repeating:
        return _repeating(repeating)
    match = _NUMBER.match(text)
    if not match or not (match["int"] or match["frac"]):
        return None
    exponent = int(match["exp"] or 0) if len(match["exp"] or "") < 6 else MAX_EXPONENT + 1
    if abs(exponent) > MAX_EXPONENT:
        return None
    digits = (match["int"] or "0") + (match["frac"] or "")
    value = Fraction(int(digits), 10 ** len(match["frac"] or "")) * Fraction(10) ** exponent
    decimals = len(match["frac"]) if match["frac"] and not match["exp"] else None
    return Number(-value if match["sign"] == "-" else value, bool(match["pct"]), decimals,
                  approximate=bool(match["frac"]) or match["exp"] is not None)


def _repeating(match: re.Match) -> Number | None:
    """A repeating decimal's exact value; ``0.333...`` repeats its last digit only when it is written 3 times."""
    fixed = match["fixed"]
    block = match["bar"] or match["bar1"] or match["dot"] or match["paren"]
    if match["dots"]:
        if len(fixed) < 3 or len(set(fixed[-3:])) != 1:
            return None
        fixed, block = fixed[:-1], fixed[-1]
    value = int(match["int"] or 0) + Fraction(int(fixed or 0), 10 ** len(fixed)) + \
        Fraction(int(block), 10 ** len(fixed) * (10 ** len(block) - 1))
    return Number(-value if match["sign"] == "-" else value)


def _close(predicted: Number, gold: Fraction, gold_number: Number, tolerance: float, rounding: bool) -> bool:
    """Equal exactly; within the relative tolerance when the gold is a decimal approximation; or, with
    rounding allowed, the prediction is a non-terminating gold rounded to its decimals (``MIN_ROUNDED_DECIMALS``)."""
    if predicted.value == gold:
        return True
    if gold_number.approximate and abs(predicted.value - gold) <= Fraction(tolerance) * max(abs(gold), abs(predicted.value)):
        return True
    decimals = predicted.decimals
    if not rounding or decimals is None or decimals < MIN_ROUNDED_DECIMALS or _terminates(gold):
        return False
    return abs(predicted.value - gold) * 10**decimals <= Fraction(1, 2)


def _terminates(value: Fraction) -> bool:
    """Whether a fraction has a finite decimal expansion (its denominator has no prime but 2 and 5)."""
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    return denominator == 1


def _percent_readings(number: Number, other: Number) -> set[Fraction]:
    """The values a number may stand for next to `other`: ``25%`` is 25 or 0.25 beside a gold written
    without a percent sign; a percentage of a fraction is only its exact value."""
    if number.percent_of_fraction:
        return {number.value / 100}
    if number.percent and not other.percent:
        return {number.value, number.value / 100}
    return {number.value}


def numbers_match(predicted: str, gold: str, tolerance: float = 1e-6, rounding: bool = False) -> bool | None:
    """Whether two plain numbers are equal (see `_close`; a percentage also matches its fraction),
    or None if either is no number."""
    p, g = as_number(predicted), as_number(gold)
    if p is None or g is None:
        return None
    return any(
        _close(Number(value, p.percent, p.decimals, p.approximate), gold_value, g, tolerance, rounding)
        for value in _percent_readings(p, g) for gold_value in _percent_readings(g, p)
    )


def answers_match(predicted: str, gold: str, tolerance: float = 1e-6, rounding: bool = False) -> bool:
    """Whether a predicted final answer equals the gold one by string or numeric match (no sympy)."""
    numeric = numbers_match(predicted, gold, tolerance, rounding)
    if numeric is not None:
        return numeric
    return normalise(predicted) == normalise(gold)


def evaluate(expression: str) -> Fraction | None:
    """The exact value of ``a op b op c ...`` (``* /`` before ``+ -``; ``\\times``, ``\\cdot``, ``\\div``
    read), or None when it is not such an expression or divides by zero."""
    text = normalise(expression).replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/").replace(" ", "")
    if len(text) > MAX_NUMBER_CHARS or not _ARITHMETIC.match(text):
        return None
    tokens = re.findall(r"\d+(?:\.\d+)?|[-+*×/÷]", text)
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
    Each ``=`` is looked at once, with at most `MAX_STEP_CHARS` before it, so the work is linear in the text.
    """
    correct = total = 0
    for result in _STEP_RESULT.finditer(text):
        before = text[max(0, result.start() - MAX_STEP_CHARS) : result.start()]
        step = _STEP.search(before)
        cut = step is not None and step.start() == 0 and result.start() > MAX_STEP_CHARS
        if step is None or cut or re.match(r"[\w.^/]", before[step.start() - 1 : step.start()] or " "):
            continue
        value, stated = evaluate(step[1].replace(" ", "")), result[1]
        if value is None or len(stated) > MAX_STEP_DIGITS:
            continue
        total += 1
        decimals = len(stated.split(".")[1]) if "." in stated else 0
        correct += abs(value - Fraction(stated)) <= (Fraction(1, 2 * 10**decimals) if decimals else 0)
    return correct, total
