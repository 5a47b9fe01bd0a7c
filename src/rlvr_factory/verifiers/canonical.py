"""Canonical forms of short answers, for comparing an answer with a reference exactly (parsing only).

    canonical("+1,000.50") == canonical("1000.5")       # numbers by exact value
    canonical("[1, 2]") == canonical("[1,2]")           # literals by value (bools stay bools)
    canonical(" Monday ", caseless=True) == canonical("monday", caseless=True)

Two answers are the same when their canonical forms are equal: the text NFKC-normalised, format characters
(zero-width spaces and joiners, soft hyphens, byte-order marks) removed, runs of whitespace collapsed and one
pair of enclosing ``$`` dropped; then a number (optional sign, digits with optional thousands commas, optional
decimals, an exponent of at most three digits, or a fraction a/b) is its exact value, and a list of numbers
separated by commas the tuple of theirs; a JSON or Python literal of lists, tuples, sets, dicts, numbers,
strings and booleans is its value with every number exact; anything else is the text itself (case-folded when
`caseless`). Nothing is evaluated: literals are read with `ast.literal_eval` on at most `MAX_CHARS` characters
and `MAX_DEPTH` levels, numbers with a regular expression of bounded length and exponent (``1e999999`` is text,
not a number), so the work is bounded on any input.
"""

from __future__ import annotations

import ast
import json
import math
import re
import unicodedata
from fractions import Fraction
from typing import Hashable

MAX_CHARS = 4096  # a longer answer is compared as text
MAX_DEPTH = 32  # deeper literals are compared as text
MAX_NUMBER_CHARS = 1000  # a longer number is compared as text
_NUMBER = re.compile(r"[+-]?(?:(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d{1,3})?")
_FRACTION = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")
_WHITESPACE = re.compile(r"\s+")
_COMMA = re.compile(r"\s*,\s*")


def clean(text: str) -> str:
    """`text` NFKC-normalised, without format characters (category Cf), whitespace runs collapsed, stripped."""
    text = unicodedata.normalize("NFKC", text)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return _WHITESPACE.sub(" ", text).strip()


def number(text: str) -> Fraction | None:
    """The exact value of a number written plainly (see the module docstring); None for anything else."""
    text = clean(text)
    if len(text) > MAX_NUMBER_CHARS:
        return None
    fraction = _FRACTION.fullmatch(text)
    if fraction:
        return Fraction(int(fraction[1]), int(fraction[2])) if int(fraction[2]) else None
    if not _NUMBER.fullmatch(text):
        return None
    return Fraction(text.replace(",", "").rstrip(".") if "e" not in text.lower() else text.replace(",", ""))


def canonical(text: str, caseless: bool = False) -> Hashable:
    """The canonical form of an answer (see the module docstring)."""
    text = clean(text)
    if len(text) > 2 and text[0] == text[-1] == "$" and "$" not in text[1:-1]:
        text = text[1:-1].strip()  # $\frac{3}{4}$ is \frac{3}{4}
    value = number(text)
    if value is not None:
        return ("number", value)
    values = numbers(text)
    if values is not None:
        return ("numbers", values)
    literal = _literal(text)
    if literal is not None:
        return ("literal", literal)
    return ("text", text.casefold() if caseless else text)


def numbers(text: str) -> tuple[Fraction, ...] | None:
    """The exact values of a list of two or more numbers separated by commas (``0.0, 38.``); None for anything
    else (a number with thousands commas is one number, read by `number` first)."""
    if "," not in text or len(text) > MAX_CHARS:
        return None
    parts = _COMMA.split(text)
    if len(parts) < 2:
        return None
    values = tuple(number(p) for p in parts)
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def same(answer: str, reference: str, caseless: bool = False) -> bool:
    """Whether an answer equals a reference in canonical form."""
    return canonical(answer, caseless) == canonical(reference, caseless)


def _literal(text: str) -> Hashable | None:
    """A container literal's value, frozen (numbers exact, booleans tagged); None when `text` is not one."""
    if not text or text[0] not in "[({" or len(text) > MAX_CHARS:
        return None
    for read in (json.loads, ast.literal_eval):
        try:
            return _freeze(read(text), 0)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError, OverflowError):
            continue
    return None


def _freeze(value: object, depth: int) -> Hashable:
    """A literal value as a hashable one that compares numbers exactly and never a bool equal to a number."""
    if depth > MAX_DEPTH:
        raise ValueError("too deep")
    if isinstance(value, bool) or value is None:
        return ("const", repr(value))
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("not finite")
        return ("number", Fraction(value))
    if isinstance(value, complex):
        return ("complex", repr(value))
    if isinstance(value, str):
        return ("text", clean(value))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_freeze(v, depth + 1) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("set", frozenset(_freeze(v, depth + 1) for v in value))
    if isinstance(value, dict):
        return ("map", frozenset((_freeze(k, depth + 1), _freeze(v, depth + 1)) for k, v in value.items()))
    raise ValueError(f"not a plain literal: {type(value).__name__}")
