"""Math answer verification: extract the final answer, then compare it cheapest check first, as a
careful grader would.

Extraction (`math_extraction`): boxes, ``#### n``, answer lines (markdown bold read), else the last
number or math span. Equivalence tries, in order: a normalised string match, an exact numeric
match (`math_numbers`: integers and fractions exactly, a gold written as a decimal within a
relative tolerance), then Math-Verify's symbolic check (sets, intervals, tuples, matrices,
equations). The grader's rules on top:

- a decimal approximation of an exact gold (``0.333`` for 1/3, ``1.414`` for √2) is wrong unless
  the verifier allows `rounding` (a per-domain setting: the domain's ``verifier: {rounding: true}``);
- words that change a number (``5 million``, ``2 dozen``) are read exactly, others (``5 squared``,
  ``minus 5``) reject the answer; a percentage of a fraction is that fraction over 100;
- an equation whose sides differ (``2+2=5``) is no answer, and several answers or a hedge inside
  one (``5 (or 6)``, ``A or B``) score 0 unless the gold itself lists several parts;
- a gold that is a plain number is not answered by an operation on numbers left undone (``12+34``,
  ``(9+1)``, ``\\dbinom{8}{4}``, ``2^{10}``: the question restated, which Math-Verify would evaluate), nor any
  gold by a sum of two or more terms more than it has (``(-k + 4) + (-2 + 3k)`` for ``2k+2``): 0;
- ``\\pm`` and lists of roots (``x = 1, x = 2``, ``\\{2, -2\\}``) match a gold of several parts
  (``2, -2`` or ``\\pm 2``) part for part, order-free; one part more or fewer is wrong; an inequality
  (``-4 \\le x \\le 0``) matches the interval it describes, repeating decimals are exact;
- an answer line's one number with plain words around it is that number (``The answer is
  definitely 42 (apples).``), unless a word hedges, bounds or negates it (``42 or so``, ``not 42``).

``quick_score`` runs only the string and numeric checks, in time linear in the input (every
regular expression it runs on a completion or a gold is linear, or runs on a bounded slice;
tests/verifiers/test_math_redteam.py times 100 kB inputs built against each), so it is safe in the
caller's process; a gold or completion that is not a string is an ``error`` score. ``score`` adds
Math-Verify, which hands the answer to sympy's ``parse_expr`` (an ``eval``) and can be slow on
adversarial input: it runs in the scoring sandbox, in a process forked for that one check and killed
at its time limit (`verifiers.isolation`), with Math-Verify's own signal-based timeouts off.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

from rlvr_factory.verifiers.math_extraction import (
    HEDGE,
    MAX_ANSWERS,
    Answers,
    choice_letter,
    extract_answer,
    find_answers,
    gold_answers,
    last_boxed,
    parts,
    stated_choice,
)
from rlvr_factory.verifiers.math_numbers import (
    answers_match,
    as_number,
    changes_value,
    evaluate,
    normalise,
    numbers_match,
    process_score,
)
from rlvr_factory.verifiers.isolation import Sandboxed
from rlvr_factory.verifiers.score import Score, declare_weights

__all__ = ["Answers", "MathVerifier", "answers_match", "as_number", "extract_answer", "find_answers",
           "gold_answers", "last_boxed", "normalise", "numbers_match", "parts", "process_score", "stated_choice"]


class _TimeoutOffOnPurpose(logging.Filter):
    """Math-Verify warns, once per process, that its own timeout is off; it is off on purpose
    (its signals need the main thread; the caller's wall-clock guard bounds each check)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Timeout is disabled")


for _logger in ("math_verify.parser", "math_verify.grader"):  # in every process that imports this module
    logging.getLogger(_logger).addFilter(_TimeoutOffOnPurpose())

_DECIMAL_COMMA = re.compile(r"-?(?:0,\d+|\d+,(?:\d{1,2}|\d{4,}))")
_DECIMAL_LITERAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.eE])")
_ASSIGNMENT = re.compile(r"^\s*[A-Za-z](?:_\{?\w{1,3}\}?)?\s*=\s*(?=\S)")
_PLUS_MINUS = re.compile(r"\\pm|±")
_RELATION = re.compile(r"(\\leqslant|\\geqslant|\\leq|\\geq|\\le|\\ge|≤|≥|<|>)")
# ``(a, b]``: the lookahead finds the comma, so no two stars share a run (linear on any gold)
_INTERVAL_GOLD = re.compile(r"\\infty|\\cup|^\s*[\[(](?=[^\[\]()]*,)[^\[\]()]*[\])]\s*$")
_COMMANDS = re.compile(r"\\[A-Za-z]+")
_SET = re.compile(r"(?:\\left)?\\\{(.*?)(?:\\right)?\\\}", re.DOTALL)
_SET_BRACES = re.compile(r"\\[{}]")
# an operation on numbers left undone: 12+34, (9+1), 3 \times 4, 2^{10}, \dbinom{8}{4}, 5!
_SUM_SIGN = re.compile(r"(?<=[\w)}\]])\s*[-+]")  # a + or - after an operand: one more term of a sum
_UNEVALUATED = re.compile(r"\d\s*\)?\s*(?:[-+*×÷^]|\\times|\\cdot|\\div)\s*\(?\s*\{?\s*\d|\\[dt]?binom|\d\s*!")


def _distinct(values: list[str], tolerance: float, rounding: bool) -> list[str]:
    """The values with repeats (same spelling or same number) removed, first spelling kept (more than
    MAX_ANSWERS values are kept as they are: comparing them all would take quadratic time)."""
    if len(values) > MAX_ANSWERS:
        return list(values)
    kept: list[str] = []
    for value in values:
        if not any(answers_match(value, seen, tolerance, rounding) for seen in kept):
            kept.append(value)
    return kept


def equation_sides(answer: str) -> list[str]:
    """The sides of an equation (``x = 2 + 3 = 5``: three), split at top-level ``=``; one side if none."""
    sides, depth, start = [], 0, 0
    for i, char in enumerate(answer):
        if char in "{([":
            depth += 1
        elif char in "})]":
            depth -= 1
        elif char == "=" and depth == 0 and answer[i - 1 : i] not in ("<", ">", "!", "="):
            sides.append(answer[start:i])
            start = i + 1
    return [s.strip() for s in [*sides, answer[start:]] if s.strip()]


def _constant(side: str) -> bool:
    """Whether an expression has no variable (only numbers, operators and commands such as ``\\sqrt``)."""
    return not re.search(r"[A-Za-z]", _COMMANDS.sub("", side)) and bool(re.search(r"\d", side))


def sides_differ(answer: str, tolerance: float, rounding: bool) -> bool:
    """Whether an equation states two sides that are plain numbers or arithmetic and differ (``2+2=5``)."""
    values = [v for v in (_side_value(s) for s in equation_sides(answer)) if v is not None]
    return any(not answers_match(values[0], v, tolerance, rounding) for v in values[1:])


def _side_value(side: str) -> str | None:
    """A side as a number string, when it is one (or arithmetic on numbers)."""
    if as_number(side) is not None:
        return side
    value = evaluate(side)
    return None if value is None else f"{value.numerator}/{value.denominator}"


def _set_elements(answer: str) -> str:
    """The elements of an answer that is one set, ``\\{2, -2\\}`` (its order does not matter), else the answer
    (``\\{1\\} \\cup \\{2\\}`` is no one set)."""
    match = _SET.fullmatch(answer.strip())
    depth = 0
    for brace in _SET_BRACES.findall(match[1] if match else ""):
        depth += 1 if brace == "\\{" else -1
        if depth < 0:
            return answer
    return match[1] if match and depth == 0 else answer


def _roots(answer: str) -> list[str]:
    """An answer's parts (a set's elements) with assignments dropped (``x = 1`` is 1) and ``a \\pm b`` expanded."""
    found = []
    for part in parts(_set_elements(answer)):
        part = _ASSIGNMENT.sub("", part)
        pieces = _PLUS_MINUS.split(part)
        if len(pieces) == 2:
            base, offset = pieces[0].strip(), pieces[1].strip()
            found += [f"{base}+{offset}", f"{base}-{offset}"] if base else [offset, f"-{offset}"]
        else:
            found.append(part)
    return found


def as_interval(answer: str) -> str | None:
    """The interval (or union) an inequality in one variable describes (``-4 \\le x < 0`` is ``[-4, 0)``,
    ``x < -1 or x > 2`` is a union), or None when the answer is not such inequalities."""
    pieces = []
    for part in parts(answer):
        tokens = [t.strip().strip("$").strip() for t in _RELATION.split(part)]
        if len(tokens) not in (3, 5) or not all(tokens):
            return None
        variable = [i for i in range(0, len(tokens), 2) if re.fullmatch(r"[A-Za-z]", tokens[i])]
        if len(variable) != 1:
            return None
        lower, upper = _bounds(tokens, variable[0])
        if lower is None or upper is None:
            return None
        pieces.append(f"{lower[1]}{lower[0]}, {upper[0]}{upper[1]}")
    return "\\cup".join(pieces) if pieces else None


def _bounds(tokens: list[str], at: int) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """((lower, bracket), (upper, bracket)) of the variable at `tokens[at]`, from the relations around it."""
    lower, upper = ("-\\infty", "("), ("\\infty", ")")
    for index, op in ((at - 1, tokens[at - 1] if at > 0 else None), (at + 1, tokens[at + 1] if at + 1 < len(tokens) else None)):
        if op is None:
            continue
        bound = tokens[index - 1] if index < at else tokens[index + 1]
        strict = op in ("<", ">")
        below = (op in ("<", "\\le", "\\leq", "\\leqslant", "≤")) == (index < at)  # the bound is below the variable
        if below:
            lower = (bound, "(" if strict else "[")
        else:
            upper = (bound, ")" if strict else "]")
    if len(tokens) == 5 and (lower[0] == "-\\infty" or upper[0] == "\\infty"):
        return None, None  # both relations bound the same side: not an interval
    return lower, upper


@dataclass(frozen=True)
class _Judgement:
    """What extraction found: the predicted answer, the gold answer, and flags for the verdict."""

    predicted: str | None
    gold: str
    marked: bool
    spam: bool = False  # several answers, or a hedge, where the gold has one
    rejected: bool = False  # an equation whose sides differ, or a word that changes the number
    several: bool = False  # the gold lists several parts: compared part by part
    stated: str = ""  # the answer as stated (an equation whole; `predicted` is then its last side)
    symbolic_sides: bool = False  # it equates constants only Math-Verify can compare (\sqrt{4} = 2)


def _mv_parse(text: str) -> list:
    """Math-Verify's parse of a text with its own timeout off (LaTeX, boxed first, then plain expressions)."""
    config = [LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()]
    return parse(text, config, parsing_timeout=None)


def _mv_input(answer: str) -> str:
    """An extracted answer wrapped for Math-Verify: boxed, unless it is prose or already delimited."""
    prose = re.search(r"(?<![\\A-Za-z])[A-Za-z]{2,}\s+[A-Za-z]{2,}", answer)
    return answer if prose or re.search(r"\$|\\\(|\\\[", answer) else f"\\boxed{{{answer}}}"


def _exact_decimals(text: str) -> str:
    """The text with every decimal literal written as the exact fraction it is (``1.414`` as 1414/1000), so
    that Math-Verify compares it exactly instead of rounding it."""
    return _DECIMAL_LITERAL.sub(lambda m: f"\\frac{{{m[1]}{m[2]}}}{{1{'0' * len(m[2])}}}", text)


def _float_rounding(answer: str) -> int:
    """Decimal places to compare floats at: those the answer writes (at least 2), at most Math-Verify's default 6."""
    written = [len(d) for d in re.findall(r"\d?\.(\d+)", answer)]
    return min(6, max(2, min(written))) if written else 6


_WARM_UP = (  # (completion, gold): a polynomial, a set, an interval, radicals, trigonometry, a matrix, an equation
    ("\\boxed{x^2+2x+1}", "(x+1)^2"), ("\\boxed{\\{1,2\\}}", "\\{2,1\\}"), ("\\boxed{[1,2)}", "[1, 2)"),
    ("\\boxed{\\sqrt{2}/2}", "\\frac{\\sqrt2}{2}"), ("\\boxed{\\sin^2 x + \\cos^2 x}", "1"),
    ("\\boxed{\\begin{pmatrix}1\\\\2\\end{pmatrix}}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"), ("\\boxed{y=2x+1}", "y=1+2x"),
    ("\\boxed{\\frac{\\pi}{3}}", "60^\\circ"), ("\\boxed{3+4i}", "3+4i"), ("\\boxed{e^{2}}", "\\exp(2)"),
)


class MathVerifier(Sandboxed):
    """Reward for math: outcome (final answer right), format (an answer stated) and process (steps right).

    `score` runs Math-Verify (sympy's `parse_expr`, which calls `eval`, on model output) in the scoring
    sandbox (`verifiers.isolation`); `quick_score` is parsing only."""

    def __init__(
        self,
        strict: bool = False,
        rounding: bool = False,
        tolerance: float = 1e-6,
        outcome_weight: float = 1.0,
        process_weight: float = 0.0,
        format_weight: float = 0.0,
        max_completion_chars: int = 20000,
        max_answer_chars: int = 1000,
    ) -> None:
        self.strict = strict  # only a boxed answer counts
        self.rounding = rounding  # a decimal rounded from an exact gold (1/3 as 0.333) counts as right
        self.tolerance = tolerance  # relative tolerance of a numeric match against a gold written as a decimal
        self.outcome_weight = outcome_weight  # reward share for the right final answer
        self.process_weight = process_weight  # reward share for correct computations
        self.format_weight = format_weight  # reward share for stating an answer at all
        self.max_completion_chars = max_completion_chars  # longer: status error
        self.max_answer_chars = max_answer_chars  # longer answers: status error

    def _score(self, completion: str, outcome: float, marked: bool, status: str = "ok", spam: bool = False,
               message: str = "") -> Score:
        """A Score with its breakdown; spamming or an error forfeits the outcome."""
        correct_steps, steps = process_score(completion) if status == "ok" else (0, 0)
        outcome = 0.0 if spam or status != "ok" else outcome
        breakdown = {
            "outcome": outcome,
            "format": float(marked),
            "process": correct_steps / steps if steps else 0.0,
            "steps": float(steps),
            "spam": float(spam),
            **declare_weights(outcome=self.outcome_weight, process=self.process_weight, format=self.format_weight),
        }
        reward = (
            self.outcome_weight * outcome
            + self.process_weight * breakdown["process"]
            + self.format_weight * breakdown["format"]
        )
        return Score(reward=reward, correct=outcome == 1.0, status=status, breakdown=breakdown, message=message)

    def _judge(self, completion: str, gold: str) -> _Judgement:
        """Extract the predicted and gold answers, and decide whether the prediction spams, hedges or contradicts itself."""
        golds = _distinct(gold_answers(gold), self.tolerance, self.rounding)
        gold_answer = ", ".join(golds)
        found = find_answers(completion, self.strict)
        if not found.values:
            return _Judgement(None, gold_answer, False)
        if any(len(v) > self.max_answer_chars for v in found.values):
            raise _Oversize(f"a final answer is longer than max_answer_chars={self.max_answer_chars}")
        several = len(golds) > 1 or len(_roots(gold_answer)) > 1  # ``\pm 2`` is two values
        if len(found.values) > MAX_ANSWERS:
            return _Judgement(found.values[-1], gold_answer, found.marked, spam=found.marked)
        distinct = _distinct(list(found.values), self.tolerance, self.rounding)
        predicted = ", ".join(distinct)
        if _INTERVAL_GOLD.search(gold_answer) and _RELATION.search(predicted):
            interval = as_interval(predicted)
            distinct, predicted = ([interval], interval) if interval else (distinct, predicted)
        spam = found.marked and not several and (
            len(distinct) > 1 or len(_distinct(_roots(distinct[0]), self.tolerance, self.rounding)) > 1
            or bool(HEDGE.search(distinct[0])))
        stated = predicted
        rejected = changes_value(predicted, gold_answer) or any(
            sides_differ(p, self.tolerance, self.rounding) for p in parts(predicted))
        symbolic_sides = any(
            len(constant) > 1 and any(_side_value(c) is None for c in constant)
            for constant in ([s for s in equation_sides(p) if _constant(s)] for p in parts(predicted)))
        if not several and "=" not in gold_answer and len(equation_sides(predicted)) > 1:
            predicted = equation_sides(predicted)[-1]  # x = 2 + 3 = 5 states 5
        # a number is answered with a number: `12+34`, `\dbinom{8}{4}` or `2^{10}` restate the question
        rejected = rejected or (not several and as_number(gold_answer) is not None and as_number(predicted) is None
                                and bool(_UNEVALUATED.search(predicted)))
        # a sum left as the question wrote it: `(-k + 4) + (-2 + 3k)` for `2k+2` (two terms more than the gold)
        rejected = rejected or (not several and len(_SUM_SIGN.findall(predicted)) >= len(_SUM_SIGN.findall(gold_answer)) + 2)
        return _Judgement(predicted, gold_answer, found.marked, spam, rejected, several, stated, symbolic_sides)

    def _compare_parts(self, judged: _Judgement) -> bool | None:
        """Part by part, as multisets, when every part of both sides is a plain number; else None."""
        predicted, gold = _roots(judged.predicted), _roots(judged.gold)
        if not all(as_number(p) is not None for p in predicted + gold):
            return None
        remaining = list(gold)
        for part in predicted:
            match = next((g for g in remaining if answers_match(part, g, self.tolerance, self.rounding)), None)
            if match is None:
                return False
            remaining.remove(match)
        return not remaining

    def _quick(self, completion: str, gold: str) -> tuple[Score | None, _Judgement | None]:
        """The fast-path verdict (or None) and the extraction it rests on."""
        if not isinstance(completion, str) or not isinstance(gold, str):
            message = f"completion and gold must be strings, got {type(completion).__name__} and {type(gold).__name__}"
            return self._score("", 0.0, False, status="error", message=message), None
        if len(completion) > self.max_completion_chars or len(gold) > self.max_completion_chars:
            message = f"input longer than max_completion_chars={self.max_completion_chars}"
            return self._score("", 0.0, False, status="error", message=message), None
        try:
            judged = self._judge(completion, gold)
        except _Oversize as e:
            return self._score("", 0.0, False, status="error", message=str(e)), None
        letter = choice_letter(gold)
        if letter is not None and not self.strict:
            picked = stated_choice(last_boxed(completion) or completion)
            return self._score(completion, float(picked == letter), picked is not None), judged
        if judged.spam or judged.rejected or judged.predicted is None:
            return self._score(completion, 0.0, judged.marked, spam=judged.spam), judged
        if max(len(judged.predicted), len(judged.gold)) > self.max_answer_chars:
            message = f"an answer is longer than max_answer_chars={self.max_answer_chars}"
            return self._score(completion, 0.0, judged.marked, status="error", message=message), judged
        numeric = self._compare_parts(judged) if judged.several else None
        if numeric is None:
            numeric = numbers_match(judged.predicted, judged.gold, self.tolerance, self.rounding)
        if numeric is None:
            numeric = normalise(judged.predicted) == normalise(judged.gold) or None
        if numeric is None or not judged.marked or (numeric and judged.symbolic_sides):
            return None, judged
        return self._score(completion, float(numeric), judged.marked), judged

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """A final Score when extraction and the string/numeric checks decide, else None (a symbolic check is needed).

        Never calls sympy or Math-Verify and does bounded work, so it is safe in the caller's process.
        """
        try:
            return self._quick(completion, gold)[0]
        except Exception as e:  # noqa: BLE001 - a verifier never raises on model output
            return self._score("", 0.0, False, status="error", message=f"{type(e).__name__}: {e}")

    def warm_up(self) -> None:
        """Run one check of each kind of answer once, before any row (the scoring server's start-up): sympy imports
        and builds much on first use, which every row process, forked after this, would otherwise pay again."""
        for completion, gold in _WARM_UP:
            self.full_check(completion, gold)

    def full_check(self, completion: str, gold: str) -> Score:
        """Score one completion against the gold answer: the quick checks, then Math-Verify's symbolic check.

        A missing answer is wrong, never an error; oversized input or any internal failure is status ``error``.
        """
        try:
            quick, judged = self._quick(completion, gold)
            if quick is not None:
                return quick
            exact = not self.rounding and not _DECIMAL_LITERAL.search(judged.gold)
            if judged.symbolic_sides and not self._sides_agree(judged.stated, exact):
                return self._score(completion, 0.0, judged.marked)
            # Math-Verify's plain-expression parser reads a decimal comma (1,22); boxed, it is a list
            decimal_comma = _DECIMAL_COMMA.fullmatch(judged.gold)
            gold_parsed = _mv_parse(judged.gold if decimal_comma else _mv_input(judged.gold)) or _mv_parse(gold)
            predicted = _mv_input(", ".join(_roots(judged.predicted)) if judged.several else judged.predicted) \
                if judged.marked else completion
            predicted = _exact_decimals(predicted) if exact else predicted
            correct = verify(gold_parsed, _mv_parse(predicted), float_rounding=_float_rounding(judged.predicted),
                             timeout_seconds=None)
            return self._score(completion, float(correct), judged.marked)
        except Exception as e:  # noqa: BLE001 - a verifier never raises on model output
            return self._score("", 0.0, False, status="error", message=f"{type(e).__name__}: {e}")

    def _sides_agree(self, answer: str, exact: bool) -> bool:
        """Whether the constant sides of an equation in the answer are equal (``\\sqrt{4} = 3`` is not)."""
        for part in parts(answer):
            sides = [s for s in equation_sides(part) if _constant(s)]
            for side in sides[1:]:
                first, other = (_exact_decimals(s) if exact else s for s in (sides[0], side))
                if not verify(_mv_parse(_mv_input(first)), _mv_parse(_mv_input(other)), timeout_seconds=None):
                    return False
        return True


class _Oversize(Exception):
    """A final answer too long to look into."""
