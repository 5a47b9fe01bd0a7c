"""Structured extraction from noisy financial documents: invoices, bank statements, short reports.

Each document is drawn from a seed with its ground truth, then rendered as text in one of
several layouts with realistic noise: labels, date formats (``2024-03-05``, ``05.03.2024``,
``5 Mar 2024``, ``March 5, 2024``), number formats by locale (``1,234.50``, ``1.234,50``,
``1'234.50``), currency symbols or codes, and distractor numbers (customer, PO and phone
numbers, page counts). The task names the fields to return as a JSON object; the reward is
`verifiers.fields.FieldsVerifier`.

Difficulty levels keep documents short enough for the embedded model (byte tokens, 256
positions): level 1 asks one field of a short clean invoice; level 2 two fields with
distractors; level 3 three fields of an invoice (with totals), a statement or a report;
level 4 the full set including line items, whose numbers the verifier cross-checks.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any, Callable, Mapping, Sequence

from rlvr_factory.domains.base import AnswerForm, Task, draw_split_tasks
from rlvr_factory.verifiers.fields import (
    CENT, FieldsVerifier, find_json_object, make_gold, normalise_currency, normalise_date, normalise_text, parse_amount,
    parse_rate,
)
from rlvr_factory.verifiers.score import Score

VENDORS = ("Acme Ltd", "Nordwind GmbH", "Blue Fox LLC", "Rossi & Figli", "Kite Labs", "Oak Supply Co",
           "Lumen SA", "Delta Tools", "Pine Media", "Atlas Freight")
PEOPLE = ("J. Smith", "A. Novak", "M. Rossi", "L. Chen", "K. Berg", "S. Patel", "E. Dubois", "T. Okafor")
ITEMS = ("Widgets", "Consulting", "Cables", "Paper", "Licences", "Repairs", "Freight", "Hosting", "Toner")
CURRENCIES = ("USD", "EUR", "GBP", "CHF")
SYMBOL = {"USD": "$", "EUR": "€", "GBP": "£", "CHF": "CHF "}
TAX_RATES = (Decimal("0.05"), Decimal("0.07"), Decimal("0.1"), Decimal("0.2"))
MONTH_ABBR = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTH_NAMES = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
               "November", "December")
SCHEMA = {
    "invoice_number": "id", "vendor": "text", "date": "date", "currency": "currency", "subtotal": "amount",
    "tax_rate": "rate", "tax": "amount", "total": "amount", "line_items": "items", "account_holder": "text",
    "opening_balance": "amount", "total_credits": "amount", "total_debits": "amount", "closing_balance": "amount",
    "company": "text", "year": "id", "revenue": "amount", "expenses": "amount", "net_income": "amount",
}


def format_date(d: date, style: int) -> str:
    """One of five date spellings."""
    return (d.isoformat(), f"{d.day:02d}.{d.month:02d}.{d.year}", f"{d.day} {MONTH_ABBR[d.month - 1]} {d.year}",
            f"{MONTH_NAMES[d.month - 1]} {d.day}, {d.year}", f"{d.year}/{d.month:02d}/{d.day:02d}")[style % 5]


def format_amount(value: Decimal, currency: str, style: int) -> str:
    """A money amount in the currency's customary or a code-prefixed spelling."""
    sign, digits = ("-" if value < 0 else ""), f"{abs(value):,.2f}"
    if currency == "EUR" and style % 2 == 0:
        return f"{sign}{digits.replace(',', ' ').replace('.', ',').replace(' ', '.')} €"
    if currency == "CHF":
        return f"CHF {sign}{digits.replace(',', chr(39))}"
    return f"{sign}{SYMBOL[currency]}{digits}" if style % 2 == 0 else f"{currency} {sign}{digits}"


def _money(rng: random.Random, low: int, high: int) -> Decimal:
    return Decimal(rng.randint(low * 100, high * 100)) / 100


@dataclass(frozen=True)
class Document:
    """A rendered document, its ground-truth fields and the fields a task may ask for."""

    kind: str
    text: str
    truth: dict[str, Any]
    askable: tuple[str, ...]


def _invoice(rng: random.Random, level: int) -> Document:
    currency, style = rng.choice(CURRENCIES), rng.randrange(5)
    day = date(2020, 1, 1) + timedelta(days=rng.randrange(1800))
    items = [(rng.choice(ITEMS), rng.randint(1, 9), _money(rng, 2, 90 if level < 3 else 400))
             for _ in range(1 if level < 3 else rng.randint(2, 3))]
    amounts = [(q * p).quantize(CENT) for _, q, p in items]
    subtotal = sum(amounts, Decimal(0))
    rate = rng.choice(TAX_RATES)
    tax = (subtotal * rate).quantize(CENT)
    truth = {"invoice_number": f"INV-{rng.randint(1000, 99999)}", "vendor": rng.choice(VENDORS),
             "date": day.isoformat(), "currency": currency, "subtotal": f"{subtotal:.2f}",
             "tax_rate": f"{rate * 100:g}%", "tax": f"{tax:.2f}", "total": f"{subtotal + tax:.2f}",
             "line_items": [f"{a:.2f}" for a in amounts]}
    money = lambda v: format_amount(Decimal(v), currency, style)  # noqa: E731
    labels = rng.choice((("Invoice", "Date", "Total"), ("INVOICE NO.", "Issued", "TOTAL DUE"),
                         ("Bill", "Dated", "Amount due")))
    lines = [f"{truth['vendor']}", f"{labels[0]} {truth['invoice_number']}", f"{labels[1]}: {format_date(day, style)}"]
    if level >= 2:
        lines.insert(rng.randrange(1, 4), rng.choice((f"Customer no. {rng.randint(100, 99999)}",
                                                      f"PO {rng.randint(1000, 9999)}", f"Tel 555-{rng.randint(1000, 9999)}")))
        lines += [f"{n} x{q} {money(a)}" for (n, q, _), a in zip(items, amounts)]
    askable = ("invoice_number", "vendor", "date", "total", "currency")
    if level >= 3:
        lines += [f"Subtotal {money(subtotal)}", f"Tax {rate * 100:g}% {money(tax)}"]
        askable += ("subtotal", "tax", "tax_rate")
    lines.append(f"{labels[2]}: {money(subtotal + tax)}")
    if level >= 4:
        lines.append(f"Page 1/{rng.randint(1, 3)} - due in {rng.choice((14, 30, 60))} days")
        askable += ("line_items",)
    return Document("invoice", "\n".join(lines), truth, askable)


def _statement(rng: random.Random, level: int) -> Document:
    currency, style = rng.choice(CURRENCIES), rng.randrange(5)
    end = date(2020, 1, 31) + timedelta(days=rng.randrange(1800))
    opening = _money(rng, 100, 5000)
    moves = [_money(rng, 5, 900) * rng.choice((1, -1)) for _ in range(rng.randint(2, 3))]
    credits = sum((m for m in moves if m > 0), Decimal(0))
    debits = -sum((m for m in moves if m < 0), Decimal(0))
    truth = {"account_holder": rng.choice(PEOPLE), "date": end.isoformat(), "currency": currency,
             "opening_balance": f"{opening:.2f}", "total_credits": f"{credits:.2f}", "total_debits": f"{debits:.2f}",
             "closing_balance": f"{opening + credits - debits:.2f}"}
    money = lambda v: format_amount(Decimal(v), currency, style)  # noqa: E731
    lines = [f"Statement to {format_date(end, style)}", f"Holder: {truth['account_holder']}",
             f"Acct {rng.randint(10**7, 10**8 - 1)}", f"Opening {money(opening)}"]
    lines += [f"{'Credit' if m > 0 else 'Debit'} {money(abs(m))}" for m in moves]
    lines.append(f"Closing {money(opening + credits - debits)}")
    askable = ("account_holder", "date", "currency", "opening_balance", "closing_balance")
    if level >= 4:
        askable += ("total_credits", "total_debits")
    return Document("statement", "\n".join(lines), truth, askable)


def _report(rng: random.Random, level: int) -> Document:
    currency, style = rng.choice(CURRENCIES), rng.randrange(5)
    revenue = _money(rng, 10_000, 900_000)
    expenses = (revenue * Decimal(rng.randint(50, 98)) / 100).quantize(CENT)
    truth = {"company": rng.choice(VENDORS), "year": str(rng.randint(2015, 2024)), "currency": currency,
             "revenue": f"{revenue:.2f}", "expenses": f"{expenses:.2f}", "net_income": f"{revenue - expenses:.2f}"}
    money = lambda v: format_amount(Decimal(v), currency, style)  # noqa: E731
    text = (f"{truth['company']} FY{truth['year']}: revenue {money(revenue)}, costs {money(expenses)}, "
            f"net income {money(revenue - expenses)}. Staff {rng.randint(5, 900)}.")
    return Document("report", text, truth, ("company", "year", "currency", "revenue", "expenses", "net_income"))


def draw_document(rng: random.Random, level: int) -> Document:
    """A random document of a kind the level allows (levels 1-2: invoices only)."""
    kinds: list[Callable[[random.Random, int], Document]] = [_invoice] if level < 3 else [_invoice, _statement, _report]
    return rng.choice(kinds)(rng, level)


def fields_for(rng: random.Random, doc: Document, level: int) -> list[str]:
    """The fields a task asks: `level` of them (1-3), or at level 4 the whole related set."""
    if level >= 4:
        return list(doc.askable)
    count = min(level, len(doc.askable))
    if level == 3 and doc.kind == "invoice":
        return ["subtotal", "tax", "total"]
    return rng.sample(doc.askable, count)


def _canonical(name: str, value: Any) -> Any:
    """How a demonstration writes a field: amounts as numbers, the rest as strings."""
    if SCHEMA[name] == "amount":
        return float(value)
    if SCHEMA[name] == "items":
        return [float(v) for v in value]
    return value


def _cents(value: Any) -> str | None:
    amount = parse_amount(value)[0]
    return None if amount is None else str(amount.quantize(CENT))


class ExtractionDomain:
    """Seeded extraction tasks over generated documents, split into train / validation / test."""

    name = "extraction"
    verifier_class = FieldsVerifier  # the reward, built from the block's `verifier` options

    def __init__(
        self,
        splits: Mapping[str, int],  # tasks per split
        levels: Sequence[int] = (1, 2),  # 1: one field of a short clean invoice; 2: two fields with distractors; up to 4
        seed: int = 0,  # task generation seed
        verifier: Mapping[str, Any] | None = None,  # the field-by-field verifier's settings
    ) -> None:
        if not levels or any(level not in (1, 2, 3, 4) for level in levels):
            raise ValueError(f"extraction levels must be among 1-4, got {levels}")
        self.splits = dict(splits)
        self.levels = sorted(int(level) for level in levels)
        self.seed = seed
        self.verifier = self.verifier_class(**(verifier or {}))

    def _task(self, rng: random.Random, level: int) -> tuple[str, dict[str, Any]]:
        doc = draw_document(rng, level)
        fields = fields_for(rng, doc, level)
        prompt = f"Extract as JSON: {', '.join(fields)}\n{doc.text}"
        reference = {"fields": fields, "values": {f: doc.truth[f] for f in fields}, "currency": doc.truth["currency"],
                     "kind": doc.kind}
        return prompt, reference

    def generate_tasks(self) -> list[Task]:
        """Each split's tasks, levels in equal shares; no prompt appears twice."""
        return draw_split_tasks(self.name, self.splits, self.levels, self.seed, self._task)

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The requested fields' types and true values, and the document's currency; a ValueError saying
        what is wrong for a reference that is not such an object (fields not a list of known names, values
        missing or unreadable)."""
        fields = reference.get("fields") if isinstance(reference, dict) else None
        if not isinstance(fields, list) or not fields or not all(isinstance(f, str) and f in SCHEMA for f in fields):
            raise ValueError(f"an extraction reference needs 'fields': a list of names among {sorted(SCHEMA)}")
        return make_gold({f: SCHEMA[f] for f in fields}, reference.get("values"), reference.get("currency"))

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The answer as compact JSON (extraction has no worked steps, so `worked` changes nothing)."""
        values = task.reference["values"]
        return json.dumps({f: _canonical(f, values[f]) for f in task.reference["fields"]}, separators=(",", ":"))

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """The fields verifier, in this process."""
        return self.verifier.score(completion, self.gold(reference))

    def answer_form(self, task: Task) -> AnswerForm:
        """How the reward audit states an answer: a JSON object with one slot per requested field (its true
        value as the demonstration writes it, as text)."""
        values, fields = task.reference["values"], task.reference["fields"]
        golds = {f: v if isinstance(v := _canonical(f, values[f]), str) else json.dumps(v) for f in fields}
        return AnswerForm(golds, lambda texts: json.dumps({f: texts[f] for f in fields}))

    @staticmethod
    def answer_key(completion: str) -> str | None:
        """The answer's fields, each normalised, as canonical JSON (for majority voting), or None."""
        answer = find_json_object(completion)
        if answer is None:
            return None
        normalisers = {"amount": _cents, "date": normalise_date,
                       "currency": normalise_currency, "rate": lambda v: str(parse_rate(v)),
                       "items": lambda v: json.dumps(v, default=str)}
        return json.dumps({k: normalisers.get(SCHEMA.get(k, "text"), normalise_text)(v) for k, v in answer.items()},
                          sort_keys=True, default=str)

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Documents with their extracted JSON, in plain text, none of whose prompts is in `exclude`."""
        rng = random.Random(seed)
        lines = []
        while len(lines) < size:
            level = self.levels[len(lines) % len(self.levels)]
            prompt, reference = self._task(rng, level)
            if prompt not in exclude:
                task = Task("", self.name, prompt, reference, level, "train", "")
                lines.append(prompt + "\n" + self.demonstration(task))
        return lines
