"""How each reasoning-gym family's answers are judged: exactly, or by its own scorer on a screened answer.

reasoning-gym's scorers were written to be generous, and several pay for answers that do not solve the task
(measured by `rlvr audit`; docs/security.md has the table): partial credit in proportion to length for any
text that contains the reference (the base class's default), a matching prefix normalised by the shorter
string (`coin_flip`: ``0`` and ``0.3`` earn full credit for 0.3125), truthiness (`game_of_life_halting`: any
non-empty answer), a tolerance where the answer is exact (`decimal_arithmetic`, `number_sorting` within 1,
`pool_matrix` within 1%), a small reward for any parseable junk, and one universal answer for every task
(`puzzle24` checks that four numbers in range make 24, not that they are the task's numbers). Some hand the
answer to `eval` or sympy's `parse_expr`. So:

* **exact** (every family not in `SCORED`): the answer must equal the reference answer in canonical form
  (`verifiers.canonical`: Unicode, spacing, numbers by exact value, literals by value; case ignored for the
  `CASELESS` families, whose scorers ignore it too). The family's scorer never sees model output, and the
  check is pure parsing in the caller's process.
* **scored** (`SCORED`, each with why): families with several valid answers, or answer forms only their scorer
  reads. The answer must pass the family's `screen` (parsing only: the form the whole answer must take, the
  names it may use, and for `puzzle24`/`countdown` that it uses exactly the task's numbers), then the scorer
  runs in the scoring sandbox and pays full credit only: partial credit is 0. For move sequences (`MINIMAL`),
  a sequence that already solved the task before its end is a hedge and earns nothing.
* **quarantined** (`QUARANTINED`, each with why): families no rule makes sound; the curate stage holds them
  back with the reason.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Callable, Mapping

MAX_SCREENED_CHARS = 2000  # a longer answer to a scored family is refused before its scorer

# Families judged by their own scorer, and why exact comparison with the reference would be wrong.
SCORED: dict[str, str] = {
    "advanced_geometry": "coordinates and angles are compared rounded to the places the prompt asks for",
    "arc_agi": "grids are read in several board formats",
    "bitwise_arithmetic": "a value may be written in hex, binary, octal or decimal",
    "calendar_arithmetic": "weekdays and counts in several forms",
    "complex_arithmetic": "a complex number is written in several forms (3+2i, (3 + 2i), 2i+3 is refused)",
    "countdown": "any expression over the task's numbers that hits the target is a solution",
    "cryptarithm": "any letter-to-digit mapping that satisfies the sum is a solution",
    "fraction_simplification": "a fraction is written as a/b or \\frac{a}{b}",
    "graph_color": "any proper colouring is a solution",
    "group_anagrams": "groups and their members in any order",
    "intermediate_integration": "any antiderivative (any constant, any equivalent form) is a solution",
    "jugs": "any sequence of pours that measures the target is a solution",
    "kakurasu": "any grid that meets the row and column sums is a solution",
    "knight_swap": "any swap of the optimal length is a solution",
    "knights_knaves": "assignments in any order and wording",
    "n_queens": "any placement among the task's valid solutions",
    "palindrome_generation": "any palindrome of the given letters is a solution",
    "palindrome_partitioning": "partitions in any order",
    "polynomial_equations": "roots in any order",
    "polynomial_multiplication": "any equivalent form of the product",
    "prime_factorization": "factors in any order and notation",
    "puzzle24": "any expression over the task's four numbers that makes 24 is a solution",
    "quantum_lock": "any button sequence of the optimal length that reaches the target is a solution",
    "rearc": "grids are read in several board formats",
    "rubiks_cube": "any move sequence that solves the cube is a solution",
    "shortest_path": "any valid path of the shortest length is a solution",
    "simple_integration": "any antiderivative (any constant, any equivalent form) is a solution",
    "sokoban": "any move sequence that solves the level is a solution",
    "tower_of_hanoi": "any valid sequence of optimal length is a solution",
    "word_ladder": "any ladder of known words is a solution",
}

# Exact families whose scorers ignore case (and so does the exact comparison).
CASELESS = frozenset({
    "bitwise_arithmetic", "color_cube_rotation", "dice", "family_relationships", "figlet_font", "letter_jumble",
    "needle_haystack", "spell_backward", "zebra_puzzles", "calendar_arithmetic",
})

# Scored families where one task's solution can also solve another task (the scorer checks it against the task's
# own puzzle): the audit's cross-task attack is no attack for them.
SHARED_SOLUTIONS: dict[str, str] = {
    "graph_color": "a colouring of another graph can be a proper colouring of this one too",
    "jugs": "a pour sequence for other jugs can end with this task's target in a jug too (only the end counts)",
    "n_queens": "a placement that completes another board can complete this one too",
}

# Scored families whose answers are move sequences: a sequence that has already solved the task before its
# end carries another candidate after the solution (a hedge), and earns nothing.
MINIMAL = frozenset({"sokoban"})

# Families no rule here makes sound, and why (held back at curate time).
QUARANTINED: dict[str, str] = {
    "propositional_logic": "its scorer pays any formula the premises entail, and generated premises can be "
                           "inconsistent (then every formula over the variables is paid) or be restated as "
                           "the conclusion",
}

_ARITHMETIC = re.compile(r"[\d\s+\-*/()]+")
_FORMULA = re.compile(r"[A-Za-z0-9\s+\-*/^().,]+")
_FUNCTIONS = frozenset({"sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "sinh", "cosh", "tanh",
                        "exp", "log", "ln", "sqrt", "pi", "E", "C", "Abs"})
_FORMS = {  # the whole answer must be one of these
    "advanced_geometry": re.compile(r"-?\d+(?:\.\d+)?°?|\(\s*-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?\s*\)"),
    "complex_arithmetic": re.compile(r"\(?\s*[+-]?\s*(?:\d+(?:\.\d+)?)?\s*i?(?:\s*[+-]\s*(?:\d+(?:\.\d+)?)?\s*i?)?\s*\)?"),
    "fraction_simplification": re.compile(r"\$?\s*(?:\\d?frac\s*\{\s*\d+\s*\}\s*\{\s*\d+\s*\}|\d+\s*/\s*\d+)\s*\$?"),
    "knights_knaves": re.compile(r"[A-Z]\w* is an? \w+(?:(?:, and |, | and )[A-Z]\w* is an? \w+)*\.?"),  # its scorer
    # skips words it does not know, so another candidate after the answer would go unread
    "n_queens": re.compile(r"[Q_\s]+"),
    "palindrome_generation": re.compile(r"[A-Za-z]+"),
    "polynomial_equations": re.compile(r"-?\d+(?:\.\d+)?(?:\s*,\s*-?\d+(?:\.\d+)?)*"),  # its scorer skips parts
    # that are not numbers, so a junk part beside the roots would go unread
    "quantum_lock": re.compile(r"[A-C](?: → [A-C])*"),  # the prompt's form: A → B → C
    "sokoban": re.compile(r"[UDLR]+"),
}


def screen(family: str, answer: str, entry: Mapping[str, Any]) -> str | None:
    """Why a scored family's answer may not reach its scorer (None: it may); parsing only."""
    if len(answer) > MAX_SCREENED_CHARS:
        return f"the answer is longer than {MAX_SCREENED_CHARS} characters"
    check = _SCREENS.get(family)
    return check(answer, entry.get("metadata") or {}) if check else None


def _over_numbers(answer: str, metadata: Mapping[str, Any]) -> str | None:
    """An arithmetic expression (digits, + - * /, parentheses; no powers) over exactly the task's numbers."""
    if not _ARITHMETIC.fullmatch(answer) or "**" in answer or "//" in answer:
        return "not an arithmetic expression of digits, + - * / and parentheses"
    if answer.count("(") > 20:
        return "too deeply parenthesised"
    numbers = metadata.get("numbers")
    used = Counter(int(n) for n in re.findall(r"\d+", answer))
    if not isinstance(numbers, (list, tuple)) or used != Counter(int(n) for n in numbers):
        return "it does not use exactly the task's numbers"
    return None


def _formula(answer: str, metadata: Mapping[str, Any]) -> str | None:
    """A formula in the task's variables, numbers, operators and common functions (what sympy may read)."""
    if not _FORMULA.fullmatch(answer) or "__" in answer:
        return "not a formula of letters, digits, operators and parentheses"
    variables = metadata.get("variables") or [metadata.get("variable") or "x"]
    allowed = _FUNCTIONS | {str(v) for v in variables}
    names = set(re.findall(r"[A-Za-z_]\w*", answer))
    if names - allowed:
        return f"it uses names outside the task's variable and common functions: {sorted(names - allowed)[:5]}"
    return None


def _form(pattern: re.Pattern) -> Callable[[str, Mapping[str, Any]], str | None]:
    def check(answer: str, metadata: Mapping[str, Any]) -> str | None:
        if not pattern.fullmatch(answer) or not any(c.isalnum() for c in answer):
            return "not in the form this family's answers take"
        return None
    return check


_SCREENS: dict[str, Callable[[str, Mapping[str, Any]], str | None]] = {
    "puzzle24": _over_numbers,
    "countdown": _over_numbers,
    "simple_integration": _formula,
    "intermediate_integration": _formula,
    "polynomial_multiplication": _formula,
    **{family: _form(pattern) for family, pattern in _FORMS.items()},
}
