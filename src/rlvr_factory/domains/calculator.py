"""The calculator tool: a bounded evaluator of arithmetic expressions (never `eval`) and its call syntax.

An action calls the tool with ``<calc>37*48</calc>``; the answer comes back as the next
observation, ``<result>1776</result>``, or ``<result>error: ...</result>`` when the call is
malformed, too long, or asks for too much. The evaluator parses ``+ - * / ^ **``, unary
signs, parentheses and decimal literals with a recursive-descent parser and computes exact
fractions; every limit is checked before the work it bounds, so no input can make it slow or
big: the expression's length, its nesting depth, the digits of every literal and every
intermediate result, and the size of a power's result before it is computed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

OPEN, CLOSE = "<calc>", "</calc>"
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?)|(\*\*|[-+*/^()]))")


class CalculatorError(ValueError):
    """An expression the calculator refuses, with the reason shown to the model."""


@dataclass(frozen=True)
class CalculatorLimits:
    max_chars: int = 64  # longest expression accepted
    max_depth: int = 16  # deepest nesting of parentheses and unary signs
    max_digits: int = 32  # digits of any literal, intermediate or result (numerator and denominator)
    max_exponent: int = 64  # largest |exponent| of a power


def _digits(value: Fraction) -> int:
    return max(len(str(abs(value.numerator))), len(str(value.denominator)))


class _Parser:
    """expr := term (('+'|'-') term)*; term := unary (('*'|'/') unary)*;
    unary := ('+'|'-') unary | power; power := atom (('^'|'**') unary)?; atom := number | '(' expr ')'."""

    def __init__(self, text: str, limits: CalculatorLimits) -> None:
        self.limits = limits
        self.tokens = self._tokenize(text)
        self.position = 0
        self.depth = 0

    def _tokenize(self, text: str) -> list[str]:
        tokens, at = [], 0
        while at < len(text):
            match = _TOKEN.match(text, at)
            if match is None:
                if text[at:].strip() == "":
                    break
                raise CalculatorError(f"unexpected character {text[at:].lstrip()[0]!r}")
            number, operator = match.groups()
            if number is not None and len(number.replace(".", "")) > self.limits.max_digits:
                raise CalculatorError(f"a number longer than {self.limits.max_digits} digits")
            tokens.append(number if number is not None else operator)
            at = match.end()
        if not tokens:
            raise CalculatorError("empty expression")
        return tokens

    def _peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def _take(self) -> str:
        token = self._peek()
        if token is None:
            raise CalculatorError("the expression ends too early")
        self.position += 1
        return token

    def _checked(self, value: Fraction) -> Fraction:
        if _digits(value) > self.limits.max_digits:
            raise CalculatorError(f"a result longer than {self.limits.max_digits} digits")
        return value

    def _nested(self) -> None:
        self.depth += 1
        if self.depth > self.limits.max_depth:
            raise CalculatorError(f"nested deeper than {self.limits.max_depth} levels")

    def parse(self) -> Fraction:
        value = self.expression()
        if self._peek() is not None:
            raise CalculatorError(f"unexpected {self._peek()!r}")
        return value

    def expression(self) -> Fraction:
        value = self.term()
        while self._peek() in ("+", "-"):
            operator, right = self._take(), self.term()
            value = self._checked(value + right if operator == "+" else value - right)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self._peek() in ("*", "/"):
            operator, right = self._take(), self.unary()
            if operator == "/" and right == 0:
                raise CalculatorError("division by zero")
            value = self._checked(value * right if operator == "*" else value / right)
        return value

    def unary(self) -> Fraction:
        if self._peek() in ("+", "-"):
            self._nested()
            sign = self._take()
            value = self.unary()
            self.depth -= 1
            return -value if sign == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self._peek() not in ("^", "**"):
            return base
        self._take()
        exponent = self.unary()
        if exponent.denominator != 1:
            raise CalculatorError("a power needs a whole exponent")
        if abs(exponent) > self.limits.max_exponent:
            raise CalculatorError(f"an exponent larger than {self.limits.max_exponent}")
        if base == 0 and exponent < 0:
            raise CalculatorError("division by zero")
        if _digits(base) > 1 and (_digits(base) - 1) * abs(exponent) >= self.limits.max_digits:
            raise CalculatorError(f"a result longer than {self.limits.max_digits} digits")
        return self._checked(base ** int(exponent))

    def atom(self) -> Fraction:
        token = self._take()
        if token == "(":
            self._nested()
            value = self.expression()
            if self._peek() != ")":
                raise CalculatorError("unbalanced parentheses")
            self._take()
            self.depth -= 1
            return value
        if token[0].isdigit():
            return Fraction(token)
        raise CalculatorError(f"unexpected {token!r}")


def evaluate(expression: str, limits: CalculatorLimits = CalculatorLimits()) -> Fraction:
    """The exact value of an arithmetic expression; `CalculatorError` says why one is refused."""
    if len(expression) > limits.max_chars:
        raise CalculatorError(f"an expression longer than {limits.max_chars} characters")
    return _Parser(expression, limits).parse()


def format_value(value: Fraction) -> str:
    """An integer as itself, any other value as a reduced fraction ``p/q``."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


@dataclass(frozen=True)
class ToolCall:
    """What an action asked the calculator: the expression, or why the call is malformed."""

    expression: str | None
    error: str | None = None


def find_call(action: str) -> ToolCall | None:
    """The action's calculator call (the first one), a malformed call, or None when it calls nothing."""
    opens, closes = action.count(OPEN), action.count(CLOSE)
    if opens == 0 and closes == 0:
        return None
    start = action.find(OPEN)
    end = action.find(CLOSE, start + len(OPEN)) if start >= 0 else -1
    nested = start >= 0 and end >= 0 and action.find(OPEN, start + len(OPEN), end) >= 0
    if opens != closes or start < 0 or end < 0 or nested or action.find(CLOSE, 0, start) >= 0:
        return ToolCall(None, "unbalanced calc tags")
    return ToolCall(action[start + len(OPEN) : end])


def answer_call(call: ToolCall, limits: CalculatorLimits = CalculatorLimits()) -> tuple[str, bool]:
    """The observation for a call, ``<result>...</result>``, and whether the call failed."""
    if call.expression is None:
        return f"<result>error: {call.error}</result>", True
    try:
        return f"<result>{format_value(evaluate(call.expression, limits))}</result>", False
    except CalculatorError as e:
        return f"<result>error: {e}</result>", True
