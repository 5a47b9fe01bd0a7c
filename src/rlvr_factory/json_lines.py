"""Reading JSON Lines that anyone may have written: each line is one value or one reason it is not.

A file is split at ``\\n`` bytes only (never at U+2028, U+2029 or other characters `str.splitlines`
breaks at, which JSON allows inside strings), and each line is read alone, so one bad line is one
error and the others are still read. A line is refused, with a one-line reason, when it is not
UTF-8, starts with a byte-order mark, is not JSON, is nested deeper than Python's recursion limit,
or holds ``NaN``, ``Infinity``, a number that overflows a float (``1e999999``) or an integer of
more than `MAX_INT_DIGITS` digits. Parsing is linear in the line and never evaluates anything.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_INT_DIGITS = 1000  # a longer integer is refused (Python's own limit, 4300, is a setting anyone may lift)
SHOWN_CHARS = 80  # how much of a refused line its reason quotes
BOM = "\ufeff"


class LineError(ValueError):
    """A line that is not one readable JSON value."""


def _refuse_constant(name: str) -> Any:
    raise LineError(f"{name} is not a number JSON allows")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise LineError(f"the number {text[:SHOWN_CHARS]} is out of a float's range")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise LineError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def parse_line(raw: bytes, number: int) -> Any:
    """The JSON value of one line (without its newline); a `LineError` saying why not (see the module doc)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise LineError(f"line {number} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    if text.startswith(BOM):
        raise LineError(f"line {number} starts with a byte-order mark (U+FEFF); save the file as UTF-8 without one")
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float, parse_int=_bounded_int)
    except RecursionError:
        raise LineError(f"line {number} is nested too deeply to read as JSON") from None
    except LineError as e:
        raise LineError(f"line {number} is refused: {e}") from None
    except ValueError as e:  # JSONDecodeError
        raise LineError(f"line {number} is not JSON ({getattr(e, 'msg', e)}): {text[:SHOWN_CHARS]!r}") from None


def lines(data: bytes) -> list[tuple[int, bytes]]:
    """(line number, bytes without the line end) of every line of `data` that is not blank."""
    return [(number, line.removesuffix(b"\r")) for number, line in enumerate(data.split(b"\n"), 1) if line.strip()]


def read_json_lines(data: bytes) -> list[Any]:
    """The JSON value of each non-blank line; a line that cannot be read becomes ``{"_error": why}``, so
    one bad line is held back with its reason instead of failing the file."""
    rows: list[Any] = []
    for number, line in lines(data):
        try:
            rows.append(parse_line(line, number))
        except LineError as e:
            rows.append({"_error": str(e)})
    return rows
