"""Procedural bugs: typical mistakes planted in correct programs by rewriting their syntax tree.

Kinds (`KINDS`): `operator_swap` (+ for -, and for or, == for !=, < for >, ...), `off_by_one`
(< for <=, an index, slice bound or range argument moved by one), `wrong_constant` (another
number, True for False), `swapped_args` (the first two arguments of a call exchanged) and
`deleted_branch` (an `if` statement removed). `sites(source)` lists where each kind applies,
in a fixed order, and `mutate(source, picks)` applies chosen sites; the mutant is rendered with
`ast.unparse`, as is the correct program it is compared with, so the two differ only where a
mutation is. `repair_patch` writes the search/replace blocks that undo the mutations; `wrong_fix` a plausible
repair that is wrong (the first edit of a demonstration that reads the tests' feedback).
"""

from __future__ import annotations

import ast
import builtins
import copy
import difflib
import keyword
import random
import re
from dataclasses import dataclass
from typing import Sequence

from rlvr_factory.domains.code_repair_edits import Block, apply_edits, occurrences
from rlvr_factory.verifiers.code import parse

KINDS = ("operator_swap", "off_by_one", "wrong_constant", "swapped_args", "deleted_branch")
_SWAPS: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.FloorDiv: ast.Mod,
    ast.Mod: ast.FloorDiv, ast.And: ast.Or, ast.Or: ast.And, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_LOOSER: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}


@dataclass(frozen=True)
class Site:
    """Where one mutation applies: its kind and its position among the program's sites (`sites` order)."""

    kind: str
    index: int


class _Mutator(ast.NodeTransformer):
    """Walks a tree in a fixed order, numbering the mutation sites; applies those in `picks`."""

    def __init__(self, picks: set[int] = frozenset()) -> None:
        self.picks, self.found = picks, []

    def _site(self, kind: str) -> bool:
        self.found.append(Site(kind, len(self.found)))
        return self.found[-1].index in self.picks

    def _bounded(self, node: ast.AST) -> bool:  # an int constant that is an index, slice bound or range argument
        return getattr(node, "_rlvr_bound", False)

    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node  # a docstring: nothing to mutate
        return self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        for part in ([node.slice.lower, node.slice.upper] if isinstance(node.slice, ast.Slice) else [node.slice]):
            if isinstance(part, ast.Constant):
                part._rlvr_bound = True
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        if isinstance(node.func, ast.Name) and node.func.id == "range":
            for arg in node.args:
                if isinstance(arg, ast.Constant):
                    arg._rlvr_bound = True
        self.generic_visit(node)
        if len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]) \
                and ast.dump(node.args[0]) != ast.dump(node.args[1]) and self._site("swapped_args"):
            node.args[0], node.args[1] = node.args[1], node.args[0]
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if type(node.op) in _SWAPS and self._site("operator_swap"):
            node.op = _SWAPS[type(node.op)]()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        if self._site("operator_swap"):
            node.op = _SWAPS[type(node.op)]()
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        op = type(node.ops[0])
        if op in _SWAPS and self._site("operator_swap"):
            node.ops[0] = _SWAPS[op]()
        if op in _LOOSER and self._site("off_by_one"):
            node.ops[0] = _LOOSER[op]()
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            if self._site("wrong_constant"):
                node.value = not value
        elif isinstance(value, (int, float)) and not isinstance(value, complex):
            kind = "off_by_one" if self._bounded(node) and isinstance(value, int) else "wrong_constant"
            if self._site(kind):
                node.value = value + 1 if kind == "off_by_one" or value == 0 else value * 2
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        deleted: set[int] = set()  # removed after the children are visited, so that site numbers never shift
        for name in ("body", "orelse"):
            statements = getattr(node, name, None)
            if isinstance(statements, list) and len(statements) > 1 and not isinstance(node, ast.Module):
                deleted |= {id(s) for s in statements if isinstance(s, ast.If) and self._site("deleted_branch")}
        super().generic_visit(node)
        for name in ("body", "orelse"):
            statements = getattr(node, name, None)
            if deleted and isinstance(statements, list):
                setattr(node, name, [s for s in statements if id(s) not in deleted])
        return node


def sites(source: str) -> list[Site]:
    """Every place a mutation applies in the program, in a fixed order."""
    mutator = _Mutator()
    mutator.visit(ast.parse(source))
    return mutator.found


def mutate(source: str, picks: Sequence[int]) -> str:
    """The program with the mutations at the sites numbered `picks` applied, rendered by `ast.unparse`."""
    mutator = _Mutator(set(picks))
    tree = ast.fix_missing_locations(mutator.visit(copy.deepcopy(ast.parse(source))))
    return ast.unparse(tree) + "\n"


def canonical(source: str) -> str:
    """The program as `ast.unparse` renders it (what mutants are compared with); ValueError when it does
    not parse or is too large or too deeply nested to work on (parsed, never run)."""
    tree = parse(source, "the program")
    try:
        return ast.unparse(tree) + "\n"
    except RecursionError:
        raise ValueError("the program is too deeply nested to render") from None


PATCH_SEARCH = ("shortest", "lines")
_TOKEN = re.compile(r"\w+|\s+|[^\w\s]+")  # identifiers and numbers, runs of blanks, runs of operator characters


def repair_patch(path: str, broken: str, fixed: str, search: str = "shortest") -> str:
    """Search/replace blocks that turn `broken` into `fixed`, one per changed hunk of lines.

    `search="lines"`: each SEARCH is whole lines, widened by a line above and below until it occurs
    once. `search="shortest"` (the default): a hunk that changes one line into one line gets the fewest
    whole tokens around the change that occur once in the file (`a - b` -> `a + b`, or only `-` where it
    is the file's one minus), widened token by token, to whole lines only when no part of the line is
    unique; other hunks get whole lines. One block for the whole span when hunks interact."""
    if search not in PATCH_SEARCH:
        raise ValueError(f"patch search must be one of {list(PATCH_SEARCH)}, got {search!r}")
    old, new = broken.splitlines(keepends=True), fixed.splitlines(keepends=True)
    hunks = [op for op in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not hunks:
        raise ValueError("the two programs are the same; there is nothing to repair")
    for blocks in (_blocks(path, old, new, [[h] for h in hunks], broken, search),
                   _blocks(path, old, new, [hunks], broken, "lines")):
        try:
            if apply_edits({path: broken}, blocks, [path])[path] == fixed:
                return "".join(b.render() for b in blocks)
        except ValueError:
            pass
    return Block(path, broken, fixed).render()  # the whole file (its one occurrence)


def _blocks(path: str, old: list[str], new: list[str], groups: list[list[tuple]], text: str,
            search_kind: str) -> list[Block]:
    blocks = []
    for group in groups:
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        if search_kind == "shortest" and len(group) == 1 and i2 - i1 == 1 and j2 - j1 == 1:
            found = _shortest_block(path, old[i1], new[j1], text)
            if found is not None:
                blocks.append(found)
                continue
        before = 0
        while True:  # widen by a line above and below until the search text is unique (or the file is used)
            lo, hi = max(i1 - before, 0), min(i2 + before, len(old))
            search = "".join(old[lo:hi])
            replace = "".join(old[lo:i1]) + "".join(new[j1:j2]) + "".join(old[i2:hi])
            if search.endswith("\n") and replace.endswith("\n"):  # the format's last line has no newline
                search, replace = search[:-1], replace[:-1]
            if (search.strip() and occurrences(text, search) == 1) or (lo == 0 and hi == len(old)):
                break
            before += 1
        blocks.append(Block(path, search, replace))
    return blocks


def _shortest_block(path: str, old_line: str, new_line: str, text: str) -> Block | None:
    """The block with the fewest whole tokens of `old_line` around its change that occur once in `text`
    (a token is added on the left, then on the right, in turn, a blank with the token beyond it); None when
    even the whole line (without its newline) is not unique."""
    old_line, new_line = old_line.rstrip("\n"), new_line.rstrip("\n")
    prefix = 0
    while prefix < min(len(old_line), len(new_line)) and old_line[prefix] == new_line[prefix]:
        prefix += 1
    suffix = 0
    while (suffix < min(len(old_line), len(new_line)) - prefix
           and old_line[len(old_line) - 1 - suffix] == new_line[len(new_line) - 1 - suffix]):
        suffix += 1
    start, end = prefix, len(old_line) - suffix
    spans = [m.span() for m in _TOKEN.finditer(old_line)]
    if not spans:
        return None
    lo = next((k for k, (a, b) in enumerate(spans) if a <= start < b), len(spans) - 1)
    hi = next((k for k, (a, b) in enumerate(spans) if a < end <= b), lo)
    if end <= start and lo > 0 and spans[lo][0] == start:  # an insertion at a token's start: the token before it
        lo = hi = lo - 1
    lo, hi = min(lo, hi), max(lo, hi)
    left = True
    while True:
        a, b = spans[lo][0], spans[hi][1]
        search = old_line[a:b]
        if search.strip() and not search[0].isspace() and not search[-1].isspace() and occurrences(text, search) == 1:
            return Block(path, search, new_line[a:len(new_line) - (len(old_line) - b)])
        if lo == 0 and hi == len(spans) - 1:
            return None
        if (left and lo > 0) or hi == len(spans) - 1:
            lo -= 1
            lo -= lo > 0 and old_line[spans[lo][0]].isspace()  # a blank goes with the token beyond it
        else:
            hi += 1
            hi += hi < len(spans) - 1 and old_line[spans[hi][0]].isspace()
        left = not left


def wrong_fix(broken: str, fixed: str, rng: random.Random) -> str:
    """A plausible wrong repair of `broken`: another mutation on a line the bug is on (chosen with `rng`),
    neither the bug nor its repair; `broken` unchanged when there is none (an edit that changes nothing)."""
    old, new = broken.splitlines(), fixed.splitlines()
    hunks = [op for op in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes() if op[0] != "equal"]
    bug_lines = {i for _, i1, i2, _, _ in hunks for i in range(i1, max(i2, i1 + 1))}
    options = []
    for site in sites(broken):
        other = mutate(broken, [site.index])
        changed = [op for op in difflib.SequenceMatcher(a=old, b=other.splitlines(), autojunk=False).get_opcodes()
                   if op[0] != "equal"]
        if other not in (broken, fixed) and all(i in bug_lines for _, i1, i2, _, _ in changed for i in range(i1, i2)):
            options.append(other)
    return rng.choice(options) if options else broken


_KEEP = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | {"self", "cls"}
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _fresh_name(rng: random.Random, taken: set[str]) -> str:
    """A new identifier: one to three lowercase chunks of 1-5 letters joined by `_`, not a keyword, builtin or
    name in `taken`."""
    while True:
        name = "_".join("".join(rng.choice(_LETTERS) for _ in range(rng.randint(1, 5)))
                        for _ in range(rng.choice((1, 1, 2, 3))))
        if name not in taken and name not in _KEEP and name.isidentifier():
            taken.add(name)
            return name


class _Renamer(ast.NodeTransformer):
    def __init__(self, names: dict[str, str], functions: set[str]) -> None:
        self.names, self.functions = names, functions  # old -> new; the program's own functions (old names)

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.names.get(node.arg, node.arg)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.Call:
        if isinstance(node.func, ast.Name) and node.func.id in self.functions:  # `f(n=1)`, not `sorted(key=...)`
            for kw in node.keywords:
                if kw.arg is not None:
                    kw.arg = self.names.get(kw.arg, kw.arg)
        return self.generic_visit(node)

    def _renamed_def(self, node: ast.AST) -> ast.AST:
        node.name = self.names.get(node.name, node.name)
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _renamed_def


def rename_identifiers(program: str, tests: Sequence[str], rng: random.Random) -> tuple[str, list[str]]:
    """The program and its tests with every name the program binds inside its functions and classes (arguments,
    assigned and loop variables, nested functions) replaced by a fresh random identifier drawn with `rng`,
    consistently in both; the top-level functions and classes keep their names (what the tests call and what
    says what the code is for), as do imported modules, attributes, builtins and keywords. The program is
    rendered by `ast.unparse` (`canonical` form); a call of one of the program's functions with a keyword
    argument (in the program or a test) names the renamed argument, a call of anything else keeps its keywords.
    ValueError when the program or a test does not parse."""
    try:
        tree = ast.parse(program)
        test_trees = [ast.parse(t) for t in tests]
    except SyntaxError as e:
        raise ValueError(f"cannot rename identifiers: {e}") from e
    imported = {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
                if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    bound: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.append(node.name)
        elif isinstance(node, ast.arg):
            bound.append(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.append(node.id)
    attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    public = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    order = [n for n in dict.fromkeys(bound) if n not in _KEEP | imported | attributes | public]
    taken = set(order) | imported | attributes | {n.id for t in [tree, *test_trees] for n in ast.walk(t)
                                                  if isinstance(n, ast.Name)}
    names = {old: _fresh_name(rng, taken) for old in order}
    functions = {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    renamer = _Renamer(names, functions)
    renamed = ast.unparse(ast.fix_missing_locations(renamer.visit(tree))) + "\n"
    return renamed, [ast.unparse(ast.fix_missing_locations(renamer.visit(t))) for t in test_trees]
