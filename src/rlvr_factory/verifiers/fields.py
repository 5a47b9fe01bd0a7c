"""Structured-extraction reward: a JSON answer checked field by field against the ground truth.

The gold is a JSON string: ``{"schema": {field: type}, "values": {field: value}, "currency": code}``
with types `amount`, `date`, `currency`, `rate`, `text`, `id` and `items` (a list of amounts).
A completion is scored in four parts, all in the breakdown:

* **format**: a JSON object was found (a bare object, or inside a ```json fence); without one the reward is 0;
* **fields**: each requested field is compared after normalisation (`field.<name>`, 1 or 0; `items`
  get the fraction matched): dates to ISO (``5 Mar 2024``, ``March 5, 2024``, ``05.03.2024``,
  ``2024/03/05``; a slash date that could be day- or month-first is ambiguous and never matches),
  amounts to exact cents (``$1,234.50``, ``1.234,50 €``, ``CHF 1'234.50``, ``(12.00)``; a currency
  marker that contradicts the document's currency makes the field wrong), currencies to ISO codes
  (``$`` → USD, ``euro`` → EUR), rates to fractions (``20%`` = ``0.2``), text and ids by case- and
  whitespace-insensitive match;
* **cross-checks** on the answer's own numbers, whenever it states every field of a relation:
  line items sum to the subtotal, tax = rate × subtotal, total = subtotal + tax,
  closing = opening + credits − debits, net income = revenue − expenses (`check.<name>`, 1 or 0);
* **penalties**: `extra_penalty` per field that was not asked for, `check_penalty` per failed cross-check.

reward = max(0, mean field credit − penalties); `correct` only when every field matches, every
applicable check holds and nothing extra was given, so any near miss scores below 1.

An ambiguous answer earns nothing: several JSON objects that differ, or one that repeats a key with
different values (`ambiguous` in the breakdown). Whatever the completion holds (NaN, Infinity,
numbers of any size, any nesting), the verdict comes in time linear in its length and never raises;
numbers beyond `MAX_DIGITS` digits and objects nested deeper than `MAX_DEPTH` are unreadable.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any, Callable

from rlvr_factory.verifiers.isolation import PARSE
from rlvr_factory.verifiers.score import Score

FIELD_TYPES = ("amount", "date", "currency", "rate", "text", "id", "items")
CENT = Decimal("0.01")
MAX_DIGITS = 30  # an amount or rate with more significant or integer digits than this is unreadable
MAX_DEPTH = 32  # a JSON object nested deeper than this is not an answer
MAX_OBJECTS = 20  # JSON objects looked at per completion
MAX_ITEMS = 200  # a longer list of line items is unreadable (matching is quadratic in the items)
MONTHS = {m: i + 1 for i, m in enumerate(
    ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
     "november", "december"))}
CURRENCY_ALIASES = {
    "$": "USD", "us$": "USD", "usd": "USD", "dollar": "USD", "dollars": "USD", "us dollars": "USD",
    "€": "EUR", "eur": "EUR", "euro": "EUR", "euros": "EUR",
    "£": "GBP", "gbp": "GBP", "pound": "GBP", "pounds": "GBP", "sterling": "GBP",
    "chf": "CHF", "fr.": "CHF", "swiss francs": "CHF",
    "¥": "JPY", "jpy": "JPY", "yen": "JPY",
}
_CURRENCY_MARK = re.compile(r"US\$|[$€£¥]|\b(?:USD|EUR|GBP|CHF|JPY)\b", re.IGNORECASE)
_ISO = re.compile(r"^(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})$")
_DMY_DOT = re.compile(r"^(\d{1,2})[.-](\d{1,2})[.-](\d{4})$")
_SLASH = re.compile(r"^(\d{1,2})/(\d{1,2})/(\d{4})$")
_DAY_MONTH = re.compile(r"^(\d{1,2})(?:st|nd|rd|th)?\s+([a-z]+)\.?,?\s+(\d{4})$")
_MONTH_DAY = re.compile(r"^([a-z]+)\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})$")


def normalise_text(value: Any) -> str:
    """Case-folded text with runs of whitespace collapsed and surrounding punctuation stripped."""
    return re.sub(r"\s+", " ", str(value)).strip().strip(".,;:").casefold()


def _month(name: str) -> int | None:
    return next((n for m, n in MONTHS.items() if len(name) >= 3 and m.startswith(name)), None)


def normalise_date(value: Any) -> str | None:
    """A date as ISO ``YYYY-MM-DD``, or None when it cannot be read unambiguously."""
    text = normalise_text(value)
    parts: tuple[int | None, ...] | None = None
    if m := _ISO.match(text):
        parts = (int(m[1]), int(m[2]), int(m[3]))
    elif m := _DMY_DOT.match(text):
        parts = (int(m[3]), int(m[2]), int(m[1]))
    elif m := _SLASH.match(text):
        first, second = int(m[1]), int(m[2])
        if first > 12 >= second:
            parts = (int(m[3]), second, first)
        elif second > 12 >= first:
            parts = (int(m[3]), first, second)
    elif m := _DAY_MONTH.match(text):
        parts = (int(m[3]), _month(m[2]), int(m[1]))
    elif m := _MONTH_DAY.match(text):
        parts = (int(m[3]), _month(m[1]), int(m[2]))
    if parts is None or None in parts:
        return None
    try:
        return date(*parts).isoformat()  # type: ignore[arg-type]
    except ValueError:
        return None


def normalise_currency(value: Any) -> str | None:
    """An ISO 4217 code from a code, symbol or name (``$``, ``euro``, ``GBP``), or None."""
    text = normalise_text(value)
    return CURRENCY_ALIASES.get(text) or (text.upper() if re.fullmatch(r"[a-z]{3}", text) else None)


def _bounded(number: Decimal) -> Decimal | None:
    """The number when it is finite and within MAX_DIGITS digits (before and after the point), else None."""
    if not number.is_finite() or len(number.as_tuple().digits) > MAX_DIGITS or abs(number.adjusted()) > MAX_DIGITS:
        return None
    return number


def _number(text: str) -> Decimal | None:
    text = re.sub(r"[\s'’]", "", text)
    if len(text) > 2 * MAX_DIGITS or not re.fullmatch(r"\d[\d.,]*", text or "x"):
        return None
    if "," in text and "." in text:
        decimal_sep = "," if text.rindex(",") > text.rindex(".") else "."
    elif text.count(",") == 1 and re.search(r",\d{1,2}$", text):
        decimal_sep = ","
    elif text.count(".") == 1:
        decimal_sep = "."
    else:
        decimal_sep = None
    thousands = {",", "."} - {decimal_sep}
    for sep in thousands:
        text = text.replace(sep, "")
    if decimal_sep == ",":
        text = text.replace(",", ".")
    try:
        return _bounded(Decimal(text))
    except InvalidOperation:
        return None


def parse_amount(value: Any) -> tuple[Decimal | None, str | None]:
    """(amount, currency named in it) of a money value: ``$1,234.50``, ``1.234,50 €``, ``(12.00)``, 12.5."""
    if isinstance(value, bool):
        return None, None
    if isinstance(value, (int, float, Decimal)):
        try:
            return _bounded(Decimal(str(value)) if not isinstance(value, int) or abs(value) < 10**MAX_DIGITS
                            else Decimal("Infinity")), None  # str() of a 5000-digit int would raise
        except InvalidOperation:
            return None, None
    if not isinstance(value, str) or len(value) > 10 * MAX_DIGITS:
        return None, None
    marks = {normalise_currency(m) for m in _CURRENCY_MARK.findall(value)}
    currency = marks.pop() if len(marks) == 1 else None
    text = _CURRENCY_MARK.sub("", value).strip()
    negative = text.startswith("-") or (text.startswith("(") and text.endswith(")"))
    number = _number(text.strip("()-+ "))
    if number is None or len(marks) > 0:  # two different currency marks: unreadable
        return None, currency
    return (-number if negative else number), currency


def parse_rate(value: Any) -> Decimal | None:
    """A rate as a fraction: ``20%``, ``20 %``, ``0.2`` and ``20`` all give 0.2."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float, Decimal)):
        return None
    if isinstance(value, (int, float, Decimal)):
        number = parse_amount(value)[0]
        number = number if number is None or number >= 0 else None
        percent = False
    else:
        number, percent = _number(value.strip().rstrip("%").strip().lstrip("+")), value.strip().endswith("%")
    if number is None:
        return None
    return number / 100 if number > 1 or percent else number


def _amount_matches(predicted: Any, gold: Any, currency: str | None) -> bool:
    amount, named = parse_amount(predicted)
    expected, _ = parse_amount(gold)
    if amount is None or expected is None:
        return False
    if named is not None and currency is not None and named != currency:
        return False
    return amount == expected  # exact: 26.241 is not the document's 26.24 (26.240 is)


def _items_credit(predicted: Any, gold: list) -> float:
    """Fraction of gold line items matched one-to-one by the predicted list (extras count against it)."""
    if not isinstance(predicted, list) or len(predicted) > MAX_ITEMS:
        return 0.0
    remaining = [parse_amount(g)[0] for g in gold]
    matched = 0
    for item in predicted:
        amount = parse_amount(item.get("amount") if isinstance(item, dict) else item)[0]
        hit = next((i for i, g in enumerate(remaining)
                    if amount is not None and g is not None and abs(amount - g) < CENT / 2), None)
        if hit is not None:
            remaining.pop(hit)
            matched += 1
    return matched / max(len(gold), len(predicted)) if gold or predicted else 1.0


def field_credit(kind: str, predicted: Any, gold: Any, currency: str | None = None) -> float:
    """Credit (0 to 1) of one predicted field value against the gold value of type `kind`."""
    if kind == "amount":
        return float(_amount_matches(predicted, gold, currency))
    if kind == "items":
        return _items_credit(predicted, gold)
    if kind == "date":
        return float(normalise_date(predicted) is not None and normalise_date(predicted) == normalise_date(gold))
    if kind == "currency":
        return float(normalise_currency(predicted) is not None and normalise_currency(predicted) == normalise_currency(gold))
    if kind == "rate":
        rate, expected = parse_rate(predicted), parse_rate(gold)
        return float(rate is not None and expected is not None and rate == expected)
    if kind in ("text", "id"):
        return float(isinstance(predicted, (str, int)) and normalise_text(predicted) == normalise_text(gold))
    raise ValueError(f"unknown field type {kind!r}; expected one of {FIELD_TYPES}")


def _amounts(answer: dict, *names: str) -> list[Decimal] | None:
    values = [parse_amount(answer.get(n))[0] for n in names]
    return None if any(v is None for v in values) else values  # type: ignore[return-value]


def _items_sum(answer: dict) -> bool | None:
    items = answer.get("line_items")
    subtotal = _amounts(answer, "subtotal")
    if not isinstance(items, list) or subtotal is None:
        return None
    amounts = [parse_amount(i.get("amount") if isinstance(i, dict) else i)[0] for i in items]
    return None not in amounts and abs(sum(amounts) - subtotal[0]) < CENT / 2  # type: ignore[arg-type]


def _tax(answer: dict) -> bool | None:
    values, rate = _amounts(answer, "subtotal", "tax"), parse_rate(answer.get("tax_rate", ""))
    if values is None or rate is None:
        return None
    return abs((values[0] * rate).quantize(CENT) - values[1]) <= CENT


def _relation(names: tuple[str, ...], holds: Callable[..., Decimal]) -> Callable[[dict], bool | None]:
    def check(answer: dict) -> bool | None:
        values = _amounts(answer, *names)
        return None if values is None else abs(holds(*values)) < CENT / 2
    return check


CHECKS: dict[str, Callable[[dict], bool | None]] = {
    "items_sum_to_subtotal": _items_sum,
    "tax_is_rate_times_subtotal": _tax,
    "total_is_subtotal_plus_tax": _relation(("subtotal", "tax", "total"), lambda s, t, tot: s + t - tot),
    "closing_is_opening_plus_credits_minus_debits": _relation(
        ("opening_balance", "total_credits", "total_debits", "closing_balance"), lambda o, c, d, cl: o + c - d - cl),
    "net_income_is_revenue_minus_expenses": _relation(
        ("revenue", "expenses", "net_income"), lambda r, e, n: r - e - n),
}


@dataclass(frozen=True)
class Answer:
    """The JSON answer a completion states: the object (None without one) and whether it is ambiguous
    (several different objects, or a key repeated with different values)."""

    value: dict | None
    ambiguous: bool = False
    objects: int = 0


def _object_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each top-level ``{...}`` with balanced braces outside JSON strings, in one pass;
    spans nested deeper than MAX_DEPTH are dropped."""
    spans, depth, deepest, start, in_string, escaped = [], 0, 0, 0, False, False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = depth > 0
        elif char in "{[":
            if char == "{" and depth == 0:
                start, deepest = i, 0
            if depth or char == "{":
                depth += 1
                deepest = max(deepest, depth)
        elif char in "}]" and depth:
            depth -= 1
            if depth == 0:
                if char == "}" and deepest <= MAX_DEPTH:
                    spans.append((start, i + 1))
                if len(spans) >= MAX_OBJECTS:
                    break
    return spans


class _Conflict(Exception):
    """A JSON object repeats a key with different values."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    value: dict = {}
    for key, item in pairs:
        if key in value and value[key] != item:
            raise _Conflict(key)
        value[key] = item
    return value


def _load(span: str) -> dict | None:
    """The object a span holds (numbers exact; NaN and Infinity unreadable); None if it holds none; _Conflict."""
    try:
        value = json.loads(span, object_pairs_hook=_pairs, parse_float=Decimal, parse_constant=lambda _: None)
    except (ValueError, RecursionError):  # not JSON, or an integer too long to read
        return None
    return value if isinstance(value, dict) else None


def json_answer(text: str) -> Answer:
    """The completion's JSON answer: the one object it states (however often), in prose or a fence."""
    found: list[dict] = []
    ambiguous = False
    for start, end in _object_spans(text):
        try:
            value = _load(text[start:end])
        except _Conflict:
            ambiguous = True
            continue
        if value is not None and value not in found:
            found.append(value)
    if ambiguous or len(found) > 1:
        return Answer(None, True, len(found) + ambiguous)
    return Answer(found[0] if found else None, False, len(found))


def find_json_object(text: str) -> dict | None:
    """The answer's JSON object, or None when there is none or it is ambiguous (see `json_answer`)."""
    return json_answer(text).value


def gold_problem(schema: Any, values: Any) -> str | None:
    """What makes a gold unusable (None: nothing): a schema that is not a mapping of field names to
    `FIELD_TYPES`, a field without a value, or an amount, rate or item list that cannot be read
    (NaN, infinity, more than `MAX_DIGITS` digits, more than `MAX_ITEMS` items)."""
    if not isinstance(schema, dict) or not schema or not isinstance(values, dict):
        return "expected a non-empty schema mapping and a values mapping"
    for name, kind in schema.items():
        if kind not in FIELD_TYPES:
            return f"unknown types: field {name!r} is {str(kind)[:40]!r}, not one of {', '.join(FIELD_TYPES)}"
        if name not in values:
            return f"fields without a value: {name!r}"
        if not _readable(kind, values[name]):
            return f"field {name!r}: {_shown(values[name])} is not a readable {kind}"
    return None


def _shown(value: Any) -> str:
    """A value's start as it reads in a message (an integer too long to print, by its type)."""
    try:
        return repr(str(value)[:40])
    except ValueError:
        return f"an {type(value).__name__} too long to print"


def _readable(kind: str, value: Any) -> bool:
    """Whether a gold value of a numeric kind reads as a finite number (other kinds: always)."""
    if kind == "amount":
        return parse_amount(value)[0] is not None
    if kind == "rate":
        return parse_rate(value) is not None
    if kind == "items":
        return isinstance(value, list) and len(value) <= MAX_ITEMS and all(_readable("amount", v) for v in value)
    return True


def make_gold(schema: dict[str, str], values: dict[str, Any], currency: str | None = None) -> str:
    """The gold string the verifier reads: requested fields with their types and true values."""
    problem = gold_problem(schema, values)
    if problem:
        raise ValueError(f"bad extraction gold: {problem}")
    return json.dumps({"schema": schema, "values": {k: values[k] for k in schema}, "currency": currency},
                      sort_keys=True)


class FieldsVerifier:
    """Reward for structured extraction (see the module docstring); cheap, so `quick_score` does it all."""

    isolation = PARSE  # the project's own parsing, bounded in time and memory

    def __init__(self, extra_penalty: float = 0.1, check_penalty: float = 0.25, max_completion_chars: int = 20000) -> None:
        self.extra_penalty = extra_penalty  # reward lost per field that was not requested
        self.check_penalty = check_penalty  # reward lost per failed cross-check
        self.max_completion_chars = max_completion_chars  # longer completions: status error

    def quick_score(self, completion: str, gold: str) -> Score:
        """The full verdict: no symbolic work is involved."""
        return self.score(completion, gold)

    def score(self, completion: str, gold: str) -> Score:
        """Score one completion against a gold made by `make_gold`; never raises (a bad gold is status error)."""
        if not isinstance(completion, str) or not isinstance(gold, str):
            return Score(reward=0.0, correct=False, status="error", breakdown={"format": 0.0},
                         message=f"completion and gold must be strings, got {type(completion).__name__} and "
                                 f"{type(gold).__name__}")
        if len(completion) > self.max_completion_chars:
            return Score(reward=0.0, correct=False, status="error", breakdown={"format": 0.0},
                         message=f"the completion is longer than max_completion_chars={self.max_completion_chars}")
        try:
            spec = json.loads(gold)
            schema, values, currency = spec["schema"], spec["values"], spec.get("currency")
            problem = gold_problem(schema, values)
            if problem:
                raise ValueError(problem)
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
            return Score(reward=0.0, correct=False, status="error", breakdown={"format": 0.0},
                         message=f"invalid extraction gold: {type(e).__name__}: {e}")
        found = json_answer(completion)
        if found.ambiguous:
            return Score(reward=0.0, correct=False, breakdown={"format": 1.0, "fields": 0.0, "ambiguous": 1.0,
                                                               "objects": float(found.objects)})
        if found.value is None:
            return Score(reward=0.0, correct=False, breakdown={"format": 0.0, "fields": 0.0})
        with localcontext() as context:  # exact room for every bounded amount; no signal becomes an exception
            context.prec, context.traps[InvalidOperation] = 4 * MAX_DIGITS, False
            return self._judge(found.value, schema, values, currency)

    def _judge(self, answer: dict, schema: dict[str, str], values: dict[str, Any], currency: str | None) -> Score:
        breakdown = {"format": 1.0, "ambiguous": 0.0}
        for name, kind in schema.items():
            breakdown[f"field.{name}"] = field_credit(kind, answer[name], values[name], currency) \
                if name in answer else 0.0
        fields = sum(breakdown[f"field.{n}"] for n in schema) / len(schema)
        extras = len(set(answer) - set(schema))
        failed = 0
        for name, check in CHECKS.items():
            holds = check(answer)
            if holds is not None:
                breakdown[f"check.{name}"] = float(holds)
                failed += not holds
        breakdown.update(fields=fields, schema=sum(n in answer for n in schema) / len(schema),
                         extra_fields=float(extras), failed_checks=float(failed))
        reward = max(0.0, fields - self.extra_penalty * extras - self.check_penalty * failed)
        return Score(reward=reward, correct=fields == 1.0 and extras == 0 and failed == 0, breakdown=breakdown)
