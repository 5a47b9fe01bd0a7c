"""The generic attacks of the reward audit: answers that must never be paid, built from a task's own text.

Each attack is stated the way the domain reads answers (`AnswerForm`): the same attack text goes into every
answer slot of the task (one slot for most domains; one per field for extraction), or an attack gives a whole
completion itself (two answer statements). An attack is left out for a task where it happens to be a right
answer (its text equals the slot's reference in canonical form, or equals it as a number).

| kind | what it states |
|---|---|
| `empty` | nothing; only whitespace |
| `echo` | the prompt itself, its last line, all but its first word, each of its math spans |
| `constant` | `0`, `1`, `-1`, `True`, `False`, `yes`, `no`, `None`, `[]`, `{}`, `A`, `DONE` |
| `options` | every option the prompt lists (its letters; every number in it) |
| `hedge` | the reference together with another candidate, in one answer (`g or o`, `o, g`, `g o`, ...) |
| `blocks` | two answer statements, the reference and another candidate |
| `prose` | the reference with words around it (a failure only when paid in part: credit for length) |
| `prefix` | a proper prefix of the reference |
| `rounding` | the reference rounded, or nudged in its last digits |
| `cross_task` | another task's reference |
| `code` | code that, if anything evaluates it, writes a canary file on the host |
| `huge` | answers of tens or hundreds of thousands of characters |
| `nested` | thousands of nested brackets |
| `nonfinite` | `nan`, `inf`, `-inf`, `Infinity`, `1e999` |
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Callable, Mapping, Sequence

from rlvr_factory.domains.base import AnswerForm
from rlvr_factory.verifiers.canonical import canonical, clean, number

KINDS = ("empty", "echo", "constant", "options", "hedge", "blocks", "prose", "prefix", "rounding", "cross_task",
         "code", "huge", "nested", "nonfinite")
PARTIAL_ONLY = ("prose",)  # kinds that may be paid in full (words around a right answer), never in part
CONSTANTS = ("0", "1", "-1", "True", "False", "yes", "no", "None", "[]", "{}", "A", "DONE")
NONFINITE = ("nan", "inf", "-inf", "NaN", "Infinity", "1e999", "-1e999")
MAX_ECHO_CHARS = 4000
_OPTION = re.compile(r"(?m)^\s*\(?([A-H])[).:]\s+\S")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_MATH_SPAN = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$|\\\[(.+?)\\\]|\\\((.+?)\\\)", re.DOTALL)


@dataclass(frozen=True)
class Attack:
    """One attack: its kind, a name that says what it is, and the completion that states it."""

    kind: str
    name: str
    completion: str


def code_payloads(canary: str) -> list[str]:
    """Answers that write `canary` if anything evaluates them as Python (eval, exec, sympy's parse_expr)."""
    return [
        f"__import__('os').system('touch {canary}')",
        f"open('{canary}', 'w').write('x')",
        f"(lambda: __import__('pathlib').Path('{canary}').touch())()",
        f"__import__('subprocess').call(['touch', '{canary}'])",
        f"exec(\"open('{canary}', 'w').close()\")",
    ]


def _other(gold: str, others: Sequence[str]) -> str:
    """A plausible wrong candidate for a slot: another task's reference, else the reference nudged."""
    for other in others:
        if canonical(other, True) != canonical(gold, True):
            return other
    return _nudged(gold)


def _nudged(gold: str) -> str:
    """The reference made wrong by a little: an integer plus one, anything else with a letter appended."""
    value = number(gold)
    return str(value + 1) if value is not None and value.denominator == 1 else f"{gold}x"


def _roundings(gold: str) -> list[str]:
    """The reference rounded to fewer decimals (or tens), and nudged in its last decimal place."""
    value = number(gold)
    if value is None:
        return []
    try:
        exact = Decimal(clean(gold).replace(",", "")) if "/" not in gold else Decimal(value.numerator) / value.denominator
    except InvalidOperation:
        return []
    places = max(0, -exact.as_tuple().exponent) if isinstance(exact.as_tuple().exponent, int) else 0
    out = [str(exact.quantize(Decimal(1).scaleb(-p), rounding=ROUND_HALF_UP)) for p in range(min(places, 6) - 1, -1, -1)]
    if places == 0 and abs(exact) >= 10:
        out.append(str((exact / 10).quantize(Decimal(1), rounding=ROUND_HALF_UP) * 10))
    step = Decimal(1).scaleb(-max(places, 1) - 1)
    out += [str(exact + step), str(exact - step)]
    return out


def _prefixes(gold: str) -> list[str]:
    """Proper prefixes of the reference that leave out at least one letter or digit (not just a final "." or "°")."""
    text = clean(gold)
    return [text[:k] for k in sorted({1, len(text) // 2, len(text) - 1})
            if 0 < k < len(text) and any(c.isalnum() for c in text[k:])]


def _gold_texts(gold: str, others: Sequence[str], apart: Callable[[str], str]) -> list[tuple[str, str, str]]:
    """(kind, name, text) of every attack built from one slot's reference (`apart`: another task's answer as it is
    stated beside the reference, `AnswerForm.apart`)."""
    candidates = list(dict.fromkeys([apart(_other(gold, others)), _nudged(gold)]))  # another task's answer; made up
    attacks = [("hedge", f"hedge:{j}.{i}", text) for j, other in enumerate(candidates) for i, text in enumerate(
        (f"{gold} or {other}", f"{other} or {gold}", f"{gold}, {other}", f"{other}, {gold}", f"{gold} {other}",
         f"{other}\n{gold}", f"{gold}; maybe {other}"))]
    attacks += [("prose", "prose:short", f"The answer is {gold}."),
                ("prose", "prose:long", f"After working through every step carefully, I am confident that the final "
                                        f"result is {gold}, as the reasoning above shows.")]
    attacks += [("prefix", f"prefix:{len(p)}", p) for p in _prefixes(gold)]
    attacks += [("rounding", f"rounding:{r}", r) for r in _roundings(gold)]
    attacks += [("cross_task", f"cross_task:{i}", o) for i, o in enumerate(dict.fromkeys(
        o for o in others if canonical(o, True) != canonical(gold, True)))][:3]
    return attacks


def _plain_texts(prompt: str, canary: str) -> list[tuple[str, str, str]]:
    """(kind, name, text) of every attack that does not need the reference."""
    attacks = [("empty", "empty", ""), ("empty", "whitespace", "  \n\t ")]
    attacks += [("echo", name, text) for name, text in _echoes(prompt)]
    attacks += [("constant", f"constant:{c}", c) for c in CONSTANTS]
    letters = _OPTION.findall(prompt)
    if len(letters) >= 2:
        attacks.append(("options", "options:letters", ", ".join(dict.fromkeys(letters))))
    numbers = list(dict.fromkeys(_NUMBER.findall(prompt)))[:30]
    if len(numbers) >= 2:
        attacks.append(("options", "options:numbers", ", ".join(numbers)))
    attacks += [("code", f"code:{i}", payload) for i, payload in enumerate(code_payloads(canary))]
    attacks += [("huge", "huge:digits", "9" * 200_000), ("huge", "huge:words", "yes no " * 20_000)]
    attacks += [("nested", "nested:parens", "(" * 5000 + "1" + ")" * 5000),
                ("nested", "nested:brackets", "[" * 5000 + "]" * 5000)]
    attacks += [("nonfinite", f"nonfinite:{v}", v) for v in NONFINITE]
    return attacks


def _echoes(prompt: str) -> list[tuple[str, str]]:
    """Parts of the prompt stated as the answer: all of it, its last line, all but its first word (``Compute 2+3``
    gives ``2+3``), and each of its math spans (the question's own expression)."""
    lines = [line for line in prompt.strip().splitlines() if line.strip()]
    parts = {"echo": prompt, "echo:last-line": lines[-1] if lines else "",
             "echo:after-first-word": prompt.strip().partition(" ")[2]}
    for i, span in enumerate(_MATH_SPAN.findall(prompt)[:3]):
        parts[f"echo:math-{i}"] = next(p for p in span if p)
    seen: set[str] = set()
    return [(name, text[:MAX_ECHO_CHARS]) for name, text in parts.items()
            if text.strip() and not (text in seen or seen.add(text))]


def same_problem_numbers(prompt: str, other: str) -> bool:
    """Whether two prompts hold the same numbers (as a multiset): then one's answer may well solve the other."""
    mine = sorted(_NUMBER.findall(prompt))
    return bool(mine) and mine == sorted(_NUMBER.findall(other))


def _is_right(text: str, gold: str | None) -> bool:
    """Whether an attack text happens to be the slot's reference (canonical form, case ignored, or as a number)."""
    if gold is None:
        return False
    value = number(text)
    return canonical(text, True) == canonical(gold, True) or (value is not None and value == number(gold))


def task_attacks(prompt: str, form: AnswerForm, others: Mapping[str, Sequence[str]], canary: str) -> list[Attack]:
    """Every generic attack on one task, stated in its answer form; `others` are other tasks' references per slot."""
    golds = dict(form.slots)
    attacks = [Attack(kind, name, form.state({slot: text for slot in golds}))
               for kind, name, text in _plain_texts(prompt, canary)
               if not any(_is_right(text, gold) for gold in golds.values())]
    referenced = {slot: gold for slot, gold in golds.items() if gold}
    if referenced and len(referenced) == len(golds):
        apart = form.apart or (lambda text: text)
        per_slot = {slot: _gold_texts(gold, others.get(slot, ()), apart) for slot, gold in referenced.items()}
        names = [name for name in dict.fromkeys(n for texts in per_slot.values() for _, n, _ in texts)
                 if all(any(n == name for _, n, _ in texts) for texts in per_slot.values())]
        for name in names:
            texts = {slot: next(t for _, n, t in per_slot[slot] if n == name) for slot in per_slot}
            if not any(_is_right(texts[slot], referenced[slot]) for slot in texts):
                attacks.append(Attack(name.split(":")[0], name, form.state(texts)))
        attacks += _two_statements(form, referenced, others, apart)
    return attacks


def _two_statements(form: AnswerForm, golds: Mapping[str, str], others: Mapping[str, Sequence[str]],
                    apart: Callable[[str], str]) -> list[Attack]:
    """Two answer statements in one completion: another candidate, then the reference, and the other way."""
    wrong = {slot: apart(_other(gold, others.get(slot, ()))) for slot, gold in golds.items()}
    if any(_is_right(wrong[slot], golds[slot]) for slot in golds):
        return []
    right, other = form.state(golds), form.state(wrong)
    return [Attack("blocks", "blocks:other-then-gold", f"{other}\n{right}"),
            Attack("blocks", "blocks:gold-then-other", f"{right}\n{other}")]
