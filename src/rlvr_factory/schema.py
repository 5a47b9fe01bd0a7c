"""Configuration dataclasses read strictly from plain dicts (YAML blocks), and written back.

A configuration block is a dataclass whose fields hold the defaults, each with a one-line
comment (the documentation, see `field_docs`). `parse(cls, data, key)` builds it from a dict:

- an unknown key fails, naming the key and the closest valid names ("did you mean ...");
- each value is checked against its field's type: `bool`, `int`, `float` (an int or a numeric
  string such as YAML 1.1's `1e-3` is read as a float), `str`, `Literal[...]` (the allowed
  values), `X | None`, `list[X]`, `tuple[X, ...]`, `dict[K, V]`, `Any`, or a nested dataclass;
- `Annotated[int, Range(ge=1)]` (or an alias such as `PositiveInt`) adds bounds;
- every number, typed or inside an `Any` value (a domain's `verifier` options), is checked by `check_number`:
  `nan` and `inf` are refused everywhere, and a setting named as a time limit or a worker count
  (`POSITIVE_NAME`: `timeout...`, `..._s`, `workers`, `..._threads`) must be above 0.

`to_dict(obj)` writes the block back as plain data, every default filled in.

A block whose keys depend on one of its values (the `domain` block, whose keys are its domain's
constructor arguments) defines `from_block(data, key)` and `to_block()`, which `parse` and `to_dict` use.

A top-level block (`rl`, `rollout`, ...) is a `Block`: nodes receive it typed through Kedro's typed
parameters (a node argument annotated `rl: RLConfig` gets the `params:rl` block as an `RLConfig`);
Kedro builds it as `RLConfig(**mapping)` from the project loader's checked parameters, and
`Block.__post_init__` completes the nested blocks, tuples and dicts as `parse` would.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import io
import math
import re
import tokenize
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal, Mapping, Union, get_args, get_origin, get_type_hints


class ConfigError(ValueError):
    """A configuration value that cannot be used: `key` is its dotted path (`rl.update.lr`)."""

    def __init__(self, key: str, problem: str, source: str | None = None) -> None:
        super().__init__(f"{key}{f' ({source})' if source else ''}: {problem}")
        self.key = key
        self.problem = problem
        self.source = source

    def found_in(self, source: str) -> ConfigError:
        """The same error, saying where the key was set (a file, or `--params`)."""
        return ConfigError(self.key, self.problem, source)


@dataclass(frozen=True)
class Range:
    """Bounds on a number: `ge` / `gt` below, `le` / `lt` above (None: unbounded)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def check(self, value: float) -> bool:
        """Whether `value` lies within the bounds."""
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))

    def __str__(self) -> str:
        parts = [f"{op} {bound:g}" for op, bound in ((">=", self.ge), (">", self.gt), ("<=", self.le), ("<", self.lt))
                 if bound is not None]
        return " and ".join(parts)


# Field metadata of a setting the run derives (a round's seed), which the YAML does not set.
SET_BY_RUN = {"set_by_run": True}

PositiveInt = Annotated[int, Range(ge=1)]
NonNegativeInt = Annotated[int, Range(ge=0)]
PositiveFloat = Annotated[float, Range(gt=0)]
NonNegativeFloat = Annotated[float, Range(ge=0)]
Fraction = Annotated[float, Range(ge=0, le=1)]
# Names of settings that are time limits or worker counts: 0 or less would disable the limit or start nothing.
POSITIVE_NAME = re.compile(r"timeout|_s$|(?:^|_)(?:workers|threads)$")


def check_number(key: str, value: Any) -> None:
    """Refuse a number that is not finite, or not above 0 under a `POSITIVE_NAME` (the last part of `key`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    if not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    if value <= 0 and POSITIVE_NAME.search(key.rsplit(".", 1)[-1].split("[")[0]):
        raise ConfigError(key, f"must be > 0 (a time limit or a worker count), got {value!r}")


def check_numbers(key: str, value: Any) -> None:
    """`check_number` on every number in a block of any shape (lists and mappings walked)."""
    if isinstance(value, Mapping):
        for name, item in value.items():
            check_numbers(_join(key, str(name)), item)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            check_numbers(f"{key}[{i}]", item)
    else:
        check_number(key, value)


def closest(name: str, valid: list[str]) -> str:
    """' (did you mean a, b?)' for the valid names closest to a misspelt one, else ''."""
    near = difflib.get_close_matches(name, valid, n=3, cutoff=0.6)
    return f" (did you mean {', '.join(near)}?)" if near else ""


def unknown_key(key: str, name: str, valid: list[str], owner: str) -> ConfigError:
    """The error for a key `name` under `key` that is none of `valid` (the fields of `owner`)."""
    return ConfigError(
        f"{key}.{name}" if key else name,
        f"unknown key{closest(name, valid)}; valid keys: {', '.join(valid)}. "
        f"A new setting is a field of {owner} (docs/configuration.md lists every key).",
    )


class Block:
    """A parameter block Kedro hands to nodes typed (a dataclass mixin; see the module doc).

    Kedro's typed parameters build an annotated block as `cls(**mapping)`, which leaves its nested
    blocks as mappings and its tuples as lists; `__post_init__` converts them as `parse` does, so a
    node reads `rl.update.lr`, never `rl["update"]["lr"]`. A subclass's own `__post_init__` calls this one.
    """

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, (Mapping, list)) and field.name in hints:
                object.__setattr__(self, field.name, check_value(hints[field.name], value, field.name))


def parse(cls: type, data: Mapping[str, Any] | None, key: str = "") -> Any:
    """An instance of the dataclass `cls` from `data`, every key and value checked (see module doc);
    `data` may be one already (a block a node received typed)."""
    if isinstance(data, cls):
        return data
    if hasattr(cls, "from_block"):  # a block whose keys depend on a value (the `domain` block: its `name`)
        return cls.from_block(data, key)
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(key, f"expected a mapping of {cls.__name__}'s keys, got {data!r}")
    hints = _hints(cls)
    names = configurable(cls)
    for name in data:
        if name not in names:
            raise unknown_key(key, str(name), names, f"{cls.__module__}.{cls.__qualname__}")
    values = {name: check_value(hints[name], data[name], _join(key, name)) for name in names if name in data}
    try:
        return cls(**values)
    except (ValueError, TypeError) as e:
        raise e if isinstance(e, ConfigError) else ConfigError(key or cls.__name__, str(e)) from e


def to_dict(obj: Any) -> Any:
    """A configuration dataclass (or a value inside one) as plain data: dicts, lists and scalars."""
    if hasattr(obj, "to_block") and not isinstance(obj, type):
        return obj.to_block()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {name: to_dict(getattr(obj, name)) for name in configurable(type(obj))}
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    return obj


def describe(tp: Any) -> str:
    """A type as a reader of the YAML sees it: `int >= 1`, `one of grpo, rloo`, `float or null`."""
    if get_origin(tp) is Annotated:
        inner, *extras = get_args(tp)
        bounds = [str(e) for e in extras if isinstance(e, Range)]
        return " ".join([describe(inner), *bounds])
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if is_union(tp):
        return " or ".join("null" if a is type(None) else describe(a) for a in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"[{', '.join(describe(a) for a in args)}]"
    if origin in (list, tuple):
        return f"list of {describe(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {describe(args[0])} to {describe(args[1])}" if args else "mapping"
    if dataclasses.is_dataclass(tp):
        return "mapping (below)"
    return {Any: "any", bool: "true/false", int: "int", float: "float", str: "string", dict: "mapping"}.get(
        tp, getattr(tp, "__name__", str(tp)))


def configurable(cls: type) -> list[str]:
    """The fields of the dataclass `cls` that the YAML may set (not those the run derives)."""
    return [f.name for f in dataclasses.fields(cls) if f.init and not f.metadata.get("set_by_run")]


def field_default(field: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory's value, fresh), or `dataclasses.MISSING` for a required field."""
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else dataclasses.MISSING


def field_types(cls: type) -> dict[str, Any]:
    """The resolved type of each field of the dataclass `cls` (bounds kept)."""
    return _hints(cls)


@lru_cache(maxsize=None)
def field_docs(cls: type) -> dict[str, str]:
    """Each field's documentation: the comment at the end of its line in the source of the class
    (or of the base class that declares it)."""
    docs: dict[str, str] = {}
    for base in reversed([c for c in cls.__mro__ if dataclasses.is_dataclass(c)]):
        docs.update(_own_field_docs(base))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    docs: dict[str, str] = {}
    names = {f.name for f in dataclasses.fields(cls)}
    first: str | None = None  # the first name of the statement being read (a field's name in `name: type = ...`)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
            first = None
        elif token.type == tokenize.NAME and first is None:
            first = token.string
        elif token.type == tokenize.COMMENT and first in names and first not in docs:
            docs[first] = token.string.lstrip("#").strip()
    return docs


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls, include_extras=True)


def _join(key: str, name: str) -> str:
    return f"{key}.{name}" if key else name


def is_union(tp: Any) -> bool:
    return get_origin(tp) is Union or isinstance(tp, types.UnionType)


def check_value(tp: Any, value: Any, key: str) -> Any:
    """`value` checked against (and, for numbers and nested blocks, converted to) the type `tp`."""
    if get_origin(tp) is Annotated:
        inner, *extras = get_args(tp)
        value = check_value(inner, value, key)
        for bound in (e for e in extras if isinstance(e, Range)):
            if value is not None and not bound.check(value):
                raise ConfigError(key, f"must be {bound}, got {value!r}")
        return value
    if tp is Any:
        check_numbers(key, value)
        return value
    if is_union(tp):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        for arg in options:
            try:
                return check_value(arg, value, key)
            except ConfigError as e:
                if len(options) == 1 and e.key != key:  # `X | None` where X's error names the key inside it
                    raise
                continue
        raise ConfigError(key, f"expected {describe(tp)}, got {value!r}")
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        if value not in args:
            raise ConfigError(key, f"must be one of {', '.join(repr(a) for a in args)}{closest(str(value), [str(a) for a in args])}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return parse(tp, value, key)
    if origin in (list, tuple) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"expected {describe(tp)}, got {value!r}")
        fixed = origin is tuple and args and args[-1] is not Ellipsis  # tuple[X, Y]: exactly these
        if fixed and len(value) != len(args):
            raise ConfigError(key, f"expected {len(args)} values ({describe(tp)}), got {value!r}")
        items = [check_value(args[i] if fixed else args[0], v, f"{key}[{i}]") for i, v in enumerate(value)] if args else list(value)
        return tuple(items) if origin is tuple or tp is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(key, f"expected {describe(tp)}, got {value!r}")
        if not args:
            return dict(value)
        return {check_value(args[0], k, f"{key}.{k}"): check_value(args[1], v, f"{key}.{k}") for k, v in value.items()}
    return _scalar(tp, value, key)


def _scalar(tp: Any, value: Any, key: str) -> Any:
    """`value` as the scalar type `tp` (numbers checked by `check_number`), else a ConfigError."""
    value = _as_scalar(tp, value, key)
    check_number(key, value)
    return value


def _as_scalar(tp: Any, value: Any, key: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str:
        if isinstance(value, str):
            return value
    elif isinstance(tp, type) and isinstance(value, tp):
        return value
    raise ConfigError(key, f"expected {describe(tp)}, got {value!r}")
