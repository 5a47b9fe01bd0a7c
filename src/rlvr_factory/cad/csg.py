"""The CSG language: a strict OpenSCAD subset that a small model can learn to write.

    difference() {
      cube([40, 30, 5]);                        // a box from the origin, sizes in mm
      translate([20, 15, 0]) cylinder(h=5, r=3);  // a hole through it
    }

Primitives: `cube(size)` (a vector `[x, y, z]` or one number; `center=true` centres it on the
origin, else it starts there), `cylinder(h=, r= | d=)` (along +z from the origin; `center=true`
centres it), `sphere(r= | d=)` (centred; `sphere(5)` also works). Transforms take a vector and
apply to the statement (or `{ block }`) that follows: `translate([x, y, z])`, `rotate([ax, ay, az])`
(degrees, about x, then y, then z, as OpenSCAD). Booleans take a block: `union() { ... }`,
`difference() { first; minus the rest; }`, `intersection() { ... }`. Several top-level
statements are their union. `//` starts a comment.

`parse` returns a tree of frozen dataclasses or raises `CsgError` with the line and column
of the first problem and what would have been accepted there; `to_source` prints a tree in the
canonical compact form (`parse(to_source(t)) == t`). Numbers are decimals (no exponents, no
`nan`/`inf`), bounded in magnitude; the program's length, operation count and nesting depth are
bounded (`CsgLimits`), so parsing and building take bounded time and memory.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Union

PRIMITIVES = ("cube", "cylinder", "sphere")
TRANSFORMS = ("translate", "rotate")
BOOLEANS = ("union", "difference", "intersection")
KEYWORDS = PRIMITIVES + TRANSFORMS + BOOLEANS

Vector = tuple[float, float, float]


def require_positive(numbers: Mapping[str, Any], counts: Mapping[str, Any]) -> None:
    """Refuse settings that are not finite positive numbers, or (`counts`) positive whole numbers: a NaN
    bound compares false with everything, so it would silently disable its check."""
    for name, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite positive number, got {value!r}")
    for name, count in counts.items():
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"{name} must be a positive whole number, got {count!r}")


@dataclass(frozen=True)
class CsgLimits:
    """Bounds on a program, checked while parsing."""

    max_chars: int = 8000  # program length in characters
    max_nodes: int = 200  # primitives, transforms and booleans together
    max_depth: int = 24  # nesting of transforms and booleans
    max_abs: float = 10_000.0  # largest magnitude of any number (mm or degrees)

    def __post_init__(self) -> None:
        require_positive({"csg_limits.max_abs": self.max_abs},
                         {f"csg_limits.{k}": getattr(self, k) for k in ("max_chars", "max_nodes", "max_depth")})


class CsgError(ValueError):
    """A program that is not valid CSG: the message says where (line, column) and what was expected."""

    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(f"line {line}, column {column}: {message}")
        self.message, self.line, self.column = message, line, column


@dataclass(frozen=True)
class Cube:
    size: Vector
    center: bool = False


@dataclass(frozen=True)
class Cylinder:
    h: float
    r: float
    center: bool = False


@dataclass(frozen=True)
class Sphere:
    r: float


@dataclass(frozen=True)
class Translate:
    offset: Vector
    child: Node


@dataclass(frozen=True)
class Rotate:
    angles: Vector
    child: Node


@dataclass(frozen=True)
class Combine:
    op: str  # union | difference | intersection
    children: tuple[Node, ...]


Node = Union[Cube, Cylinder, Sphere, Translate, Rotate, Combine]

# -- tokens ---------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"(?P<space>[ \t\r\n]+|//[^\n]*)|(?P<number>\d+(?:\.\d+)?|\.\d+)|(?P<name>[A-Za-z_$][A-Za-z0-9_$]*)"
    r"|(?P<punct>[()\[\]{},;=\-+])"
)

_EXPONENT = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)[eE][+-]?\d*")


@dataclass(frozen=True)
class _Token:
    kind: str  # number | name | punct | end
    text: str
    line: int
    column: int

    def describe(self) -> str:
        return "the end of the program" if self.kind == "end" else repr(self.text)


def _tokens(source: str) -> Iterator[_Token]:
    """The program's tokens, read lazily (so a refusal early in a huge program costs nothing for the rest)."""
    line, line_start, pos = 1, 0, 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        column = pos - line_start + 1
        if match is None:
            raise CsgError(f"unexpected character {source[pos]!r}", line, column)
        kind, text = match.lastgroup, match.group()
        exponent = _EXPONENT.match(source, pos) if kind == "number" else None
        if exponent is not None:
            raise CsgError(f"exponent notation is not accepted ({exponent.group()}): write the number out", line, column)
        if kind == "number" and source[match.end():match.end() + 1] == ".":
            raise CsgError(f"malformed number {text}.", line, column)
        if kind != "space":
            yield _Token(kind, text, line, column)
        newlines = text.count("\n")
        if newlines:
            line += newlines
            line_start = pos + text.rindex("\n") + 1
        pos = match.end()
    yield _Token("end", "", line, pos - line_start + 1)


# -- parser ---------------------------------------------------------------------------------------

Value = Union[float, bool, Vector]
_ARGUMENTS: dict[str, set[str | int]] = {  # what each primitive takes: positional indices and keywords
    "cube": {0, "size", "center"}, "cylinder": {"h", "r", "d", "center"}, "sphere": {0, "r", "d"},
}


class _Parser:
    def __init__(self, source: str, limits: CsgLimits) -> None:
        self.stream = _tokens(source)
        self.ahead: list[_Token] = [next(self.stream)]  # the current token, and the next once peeked at
        self.limits = limits
        self.nodes = 0

    @property
    def token(self) -> _Token:
        return self.ahead[0]

    def peek(self) -> _Token:
        """The token after the current one."""
        if len(self.ahead) == 1:
            self.ahead.append(next(self.stream, self.ahead[0]))
        return self.ahead[1]

    def fail(self, message: str, token: _Token | None = None) -> CsgError:
        token = token or self.token
        return CsgError(message, token.line, token.column)

    def advance(self) -> _Token:
        token = self.token
        if token.kind != "end":
            self.peek()
            self.ahead.pop(0)
        return token

    def expect(self, text: str, context: str) -> _Token:
        if self.token.text != text or self.token.kind not in ("punct",):
            raise self.fail(f"expected {text!r} {context}, found {self.token.describe()}")
        return self.advance()

    def count(self, token: _Token) -> None:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes:
            raise self.fail(f"the program has more than {self.limits.max_nodes} operations; simplify it", token)

    def program(self) -> Node:
        statements = []
        while self.token.kind != "end":
            statements.append(self.statement(depth=0))
        if not statements:
            raise self.fail("the program is empty; write at least one statement, e.g. cube([10, 10, 10]);")
        return statements[0] if len(statements) == 1 else Combine("union", tuple(statements))

    def statement(self, depth: int) -> Node:
        token = self.token
        if depth > self.limits.max_depth:
            raise self.fail(f"statements are nested more than {self.limits.max_depth} levels deep")
        if token.kind != "name":
            hint = " (a statement ends with ';' only after a primitive)" if token.text == ";" else ""
            raise self.fail(f"expected a statement ({', '.join(KEYWORDS)}), found {token.describe()}{hint}")
        if token.text not in KEYWORDS:
            raise self.fail(f"unknown operation {token.text!r}; the language has {', '.join(KEYWORDS)}")
        self.advance()
        self.count(token)
        if token.text in PRIMITIVES:
            node = self.primitive(token)
            self.expect(";", f"after {token.text}(...)")
            return node
        if token.text in TRANSFORMS:
            self.expect("(", f"after {token.text}")
            vector = self.vector(f"{token.text}'s argument")
            self.expect(")", f"after {token.text}'s vector")
            child = self.block(depth + 1) if self.token.text == "{" else self.statement(depth + 1)
            return Translate(vector, child) if token.text == "translate" else Rotate(vector, child)
        self.expect("(", f"after {token.text}")
        self.expect(")", f"after {token.text}( ({token.text} takes no arguments)")
        if self.token.text != "{":
            raise self.fail(f"expected '{{' to open {token.text}'s block, found {self.token.describe()}")
        children = self.children(depth + 1)
        return Combine(token.text, children)

    def children(self, depth: int) -> tuple[Node, ...]:
        opening = self.expect("{", "to open a block")
        children = []
        while self.token.text != "}":
            if self.token.kind == "end":
                raise self.fail(f"the block opened at line {opening.line}, column {opening.column} is never closed")
            children.append(self.statement(depth))
        if not children:
            raise self.fail("empty block: put at least one statement between '{' and '}'")
        self.advance()
        return tuple(children)

    def block(self, depth: int) -> Node:
        children = self.children(depth)
        return children[0] if len(children) == 1 else Combine("union", children)

    def number(self, what: str) -> float:
        sign_token = self.token
        sign = -1.0 if self.token.text == "-" else 1.0
        if self.token.text in ("-", "+"):
            self.advance()
        token = self.token
        if token.kind == "name" and token.text.lower() in ("nan", "inf", "infinity"):
            raise self.fail(f"{what} must be a finite number, found {token.text!r}")
        if token.kind != "number":
            raise self.fail(f"expected a number for {what}, found {token.describe()}")
        self.advance()
        value = sign * float(token.text)
        if not math.isfinite(value) or abs(value) > self.limits.max_abs:
            raise self.fail(f"{what} is {sign_token.text if sign < 0 else ''}{token.text}; numbers must lie within "
                            f"+-{self.limits.max_abs:g}", token)
        return value

    def vector(self, what: str) -> Vector:
        self.expect("[", f"to start {what} (a vector [x, y, z])")
        values = [self.number(f"{what}'s x")]
        for axis in "yz":
            self.expect(",", f"between the components of {what}")
            values.append(self.number(f"{what}'s {axis}"))
        if self.token.text == ",":
            raise self.fail(f"{what} has more than three components")
        self.expect("]", f"to close {what}")
        return (values[0], values[1], values[2])

    def value(self, what: str) -> Value:
        if self.token.text == "[":
            return self.vector(what)
        if self.token.kind == "name" and self.token.text in ("true", "false"):
            return self.advance().text == "true"
        return self.number(what)

    def arguments(self, name: str) -> dict[str | int, tuple[Value, _Token]]:
        """The call's arguments: positional ones under their index, keyword ones under their name
        (each checked against what the primitive takes before its value is read)."""
        self.expect("(", f"after {name}")
        args: dict[str | int, tuple[Value, _Token]] = {}
        position = 0
        while self.token.text != ")":
            if args and self.token.text != ",":
                raise self.fail(f"expected ',' or ')' after {name}'s arguments, found {self.token.describe()}")
            if args:
                self.advance()
            start = self.token
            keyword = start.kind == "name" and self.peek().text == "="
            key: str | int = start.text if keyword else position
            if key not in _ARGUMENTS[name]:
                raise self.fail(self._unexpected_argument(name, key), start)
            if keyword:
                self.advance()
                self.advance()
                if start.text in args:
                    raise self.fail(f"{name} got {start.text}= twice", start)
                args[start.text] = (self.value(f"{name}'s {start.text}"), start)
            else:
                if any(isinstance(k, str) for k in args):
                    raise self.fail(f"a positional argument of {name} follows a keyword argument", start)
                args[position] = (self.value(f"{name}'s argument {position + 1}"), start)
                position += 1
        self.advance()
        return args

    def primitive(self, token: _Token) -> Node:
        name = token.text
        args = self.arguments(name)
        if name == "cube":
            size, at = self._one_of(args, name, (0, "size"), "its size, e.g. cube([10, 20, 5])", token)
            if isinstance(size, bool):
                raise self.fail("cube's size must be a number or a vector [x, y, z]", at)
            vector = size if isinstance(size, tuple) else (size, size, size)
            for axis, v in zip("xyz", vector):
                self._positive(v, f"cube's {axis} size", at)
            return Cube(vector, self._flag(args, "center", name))
        radius = self._radius(args, name, token)
        if name == "sphere":
            return Sphere(radius)
        if "h" not in args:
            raise self.fail("cylinder needs its height h=, e.g. cylinder(h=10, r=5)", token)
        h, at = args["h"]
        return Cylinder(self._positive(h, "cylinder's h", at), radius, self._flag(args, "center", name))

    def _unexpected_argument(self, name: str, key: str | int) -> str:
        if name == "cylinder" and key in ("r1", "r2"):
            return "cones (r1=, r2=) are not part of the language; use r= or d="
        if name == "cylinder" and isinstance(key, int):
            return "cylinder takes keyword arguments only, e.g. cylinder(h=10, r=5)"
        if key == "$fn" or (isinstance(key, str) and key.startswith("$")):
            return f"{key} is not accepted: the verifier fixes the resolution of curved surfaces"
        accepted = {"cube": "size (or one positional value) and center", "cylinder": "h, r or d, and center",
                    "sphere": "r or d (or one positional value)"}[name]
        shown = f"argument {key + 1}" if isinstance(key, int) else f"{key}="
        return f"{name} does not take {shown}; it takes {accepted}"

    def _one_of(self, args: dict, name: str, keys: tuple, what: str, token: _Token) -> tuple[Value, _Token]:
        given = [k for k in keys if k in args]
        if not given:
            raise self.fail(f"{name} needs {what}", token)
        if len(given) > 1:
            raise self.fail(f"{name} got {' and '.join(str(k) for k in given)} for the same thing", args[given[1]][1])
        return args[given[0]]

    def _radius(self, args: dict, name: str, token: _Token) -> float:
        keys = ("r", "d") if name == "cylinder" else (0, "r", "d")
        value, at = self._one_of(args, name, keys, "a radius r= or a diameter d=", token)
        key = next(k for k in keys if k in args)
        radius = self._positive(value, f"{name}'s {'d' if key == 'd' else 'r'}", at)
        return radius / 2 if key == "d" else radius

    def _positive(self, value: Value, what: str, at: _Token) -> float:
        if isinstance(value, (bool, tuple)):
            raise self.fail(f"{what} must be a number", at)
        if value <= 0:
            raise self.fail(f"{what} must be positive, got {value:g}", at)
        return value

    def _flag(self, args: dict, key: str, name: str) -> bool:
        if key not in args:
            return False
        value, at = args[key]
        if not isinstance(value, bool):
            raise self.fail(f"{name}'s {key} must be true or false", at)
        return value


def parse(source: str, limits: CsgLimits | None = None) -> Node:
    """The program's tree; `CsgError` (with line and column) for anything that is not valid CSG."""
    limits = limits or CsgLimits()
    if len(source) > limits.max_chars:
        raise CsgError(f"the program is {len(source)} characters long; the limit is {limits.max_chars}", 1, 1)
    parser = _Parser(source, limits)
    return parser.program()


# -- printing -------------------------------------------------------------------------------------


def format_number(value: float) -> str:
    """A number as the language writes it: no exponent, no trailing zeros (20, 2.5, -0.125)."""
    text = f"{value:.4f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _vector(v: Vector) -> str:
    return "[" + ",".join(format_number(x) for x in v) + "]"


def to_source(node: Node) -> str:
    """The canonical compact source of a tree (what demonstrations show the model)."""
    if isinstance(node, Cube):
        return f"cube({_vector(node.size)}{',center=true' if node.center else ''});"
    if isinstance(node, Cylinder):
        return f"cylinder(h={format_number(node.h)},r={format_number(node.r)}{',center=true' if node.center else ''});"
    if isinstance(node, Sphere):
        return f"sphere(r={format_number(node.r)});"
    if isinstance(node, Translate):
        return f"translate({_vector(node.offset)}){to_source(node.child)}"
    if isinstance(node, Rotate):
        return f"rotate({_vector(node.angles)}){to_source(node.child)}"
    return f"{node.op}(){{" + "".join(to_source(c) for c in node.children) + "}"


def primitives(node: Node) -> int:
    """How many primitives the tree has."""
    if isinstance(node, (Cube, Cylinder, Sphere)):
        return 1
    if isinstance(node, (Translate, Rotate)):
        return primitives(node.child)
    return sum(primitives(c) for c in node.children)
