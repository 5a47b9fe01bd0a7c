"""Find a domain by the name in its parameter block.

`get_domain({"name": ..., **kwargs})` builds the domain whose name is, in this order:
1. a `"module:attr"` path (any importable module, e.g. a file on `sys.path`);
2. registered in `DOMAINS` (the built-ins, and `register_domain` at run time);
3. a module of this package, `rlvr_factory.domains.<name>` (its `DOMAIN` attribute, else
   the class in it whose `name` is `<name>`), so a new built-in is just a new module;
4. an entry point of the group `rlvr_factory.domains` (third-party packages declare
   ``[project.entry-points."rlvr_factory.domains"] chess = "my_pkg.chess:ChessDomain"``).
The other keys of the block are passed to the domain's constructor, except `reward` and
`reward_model`: `reward: model` (or component weights) scores the domain with a learned reward
model (`domains/learned_reward.py`); `reward: verifier`, the default, with its own verifier.

The block is typed: `DomainConfig` holds `name`, `reward`, `reward_model` and `settings`, the
domain's own keys as an instance of `settings_class(factory)`, a dataclass with one field per
argument of the domain's constructor, typed by its annotation and defaulted by its default. So
an unknown key, a value of the wrong type or a missing required argument fails when the run
starts, naming the key, and nodes read `domain.settings.seed`. A constructor that takes
`**kwargs` has its settings kept as a checked mapping. A mix's members are checked the same way.
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import importlib
import inspect
import io
import re
import textwrap
import tokenize
import typing
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Annotated, Any, Callable, Literal, Mapping, Union, get_args, get_origin

from rlvr_factory.domains.base import Domain
from rlvr_factory.schema import (
    ConfigError, check_numbers, check_value, field_default, is_union, parse, to_dict, unknown_key,
)

ENTRY_POINT_GROUP = "rlvr_factory.domains"
_PACKAGE = "rlvr_factory.domains"
_NOT_DOMAINS = {"base", "registry", "loaders", "curation", "documents", "mix", "calculator", "learned_reward", "gym_text"}  # library modules, not domains

DOMAINS: dict[str, Callable[..., Domain]] = {}


def register_domain(name: str, factory: Callable[..., Domain]) -> None:
    """Make `factory` (a class or function taking the block's keys) the domain called `name`."""
    DOMAINS[name] = factory


def _load_attr(path: str) -> Callable[..., Domain]:
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot load domain {path!r}: {e}; give an importable 'module:attr'") from e


def _from_package(name: str) -> Callable[..., Domain] | None:
    if name in _NOT_DOMAINS or not name.isidentifier():
        return None
    try:
        module = importlib.import_module(f"{_PACKAGE}.{name}")
    except ModuleNotFoundError as e:
        if e.name == f"{_PACKAGE}.{name}":
            return None
        raise
    if hasattr(module, "DOMAIN"):
        return module.DOMAIN
    found = [
        obj for obj in vars(module).values()
        if inspect.isclass(obj) and obj.__module__ == module.__name__ and getattr(obj, "name", None) == name
    ]
    return found[0] if len(found) == 1 else None


def _from_entry_points(name: str) -> Callable[..., Domain] | None:
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name:
            return point.load()
    return None


def known_domains() -> list[str]:
    """Every domain name `get_domain` can resolve without a `module:attr` path."""
    return sorted(set(DOMAINS) | {p.name for p in entry_points(group=ENTRY_POINT_GROUP)})


def domain_factory(name: str) -> Callable[..., Domain]:
    """The class (or function) that builds the domain called `name`."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a domain block needs a 'name' (one of {known_domains()}), got {name!r}")
    factory = (
        _load_attr(name) if ":" in name
        else DOMAINS.get(name) or _from_package(name) or _from_entry_points(name)
    )
    if factory is None:
        raise ValueError(
            f"unknown domain {name!r}; known domains: {known_domains()}. Add a module "
            f"rlvr_factory/domains/{name}.py, an entry point in the group {ENTRY_POINT_GROUP!r}, "
            "or name it as 'module:attr'"
        )
    return factory


EXTRA_KEYS = ("name", "reward", "reward_model")  # read by the registry, not passed to the domain's constructor
_SCALARS = (bool, int, float, str, type(None), Any)
Reward = Union[Literal["verifier", "model"], dict[str, float]]  # the domain's verifier, the learned reward, or weights of both


def _setting_type(tp: Any) -> Any:
    """A constructor annotation as a type `schema.parse` checks: abstract `Mapping` / `Sequence` as
    `dict` / `list`, a type it cannot check (a class, a callable) as `Any` (numbers still checked)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return Annotated[(_setting_type(args[0]), *tp.__metadata__)]
    if is_union(tp):
        return Union[tuple(_setting_type(a) for a in args)]
    if origin is Literal or tp in _SCALARS or (isinstance(tp, type) and dataclasses.is_dataclass(tp)):
        return tp
    if origin in (dict, collections.abc.Mapping, collections.abc.MutableMapping) or tp in (dict, Mapping):
        return dict[_setting_type(args[0]), _setting_type(args[1])] if len(args) == 2 else dict
    if origin is tuple and args and args[-1] is Ellipsis:
        return tuple[_setting_type(args[0]), ...]
    if origin is tuple and args:
        return tuple[tuple(_setting_type(a) for a in args)]
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence) or tp in (list, tuple):
        return list[_setting_type(args[0])] if args else list
    return Any


def _constructor(factory: Callable[..., Domain]) -> tuple[list[inspect.Parameter], dict[str, Any], bool]:
    """The keyword parameters of `factory`, their annotations (as `_setting_type`s) and whether it takes `**kwargs`."""
    parameters = list(inspect.signature(factory).parameters.values())
    try:
        hints = typing.get_type_hints(factory.__init__ if inspect.isclass(factory) else factory)
    except Exception:  # an annotation that does not resolve: the value is checked as Any
        hints = {}
    named = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in ("self", *EXTRA_KEYS)]
    return named, {p.name: _setting_type(hints.get(p.name, Any)) for p in named}, any(
        p.kind is p.VAR_KEYWORD for p in parameters)


@lru_cache(maxsize=None)
def settings_class(factory: Callable[..., Domain]) -> type | None:
    """The dataclass of a domain's own keys: one field per argument of its constructor, typed by the
    annotation and defaulted by the default (a required argument is a required key); None when the
    constructor takes `**kwargs`, whose keys cannot be listed."""
    named, types, open_ended = _constructor(factory)
    if open_ended:
        return None
    fields = []
    for p in named:
        if p.default is inspect.Parameter.empty:
            fields.append((p.name, types[p.name], field(kw_only=True)))
        elif isinstance(p.default, (dict, list, set)):
            fields.append((p.name, types[p.name], field(default_factory=lambda d=p.default: copy.deepcopy(d), kw_only=True)))
        else:
            fields.append((p.name, types[p.name], field(default=p.default, kw_only=True)))
    owner = getattr(factory, "__qualname__", "Domain").replace(".", "_").replace("<", "").replace(">", "")
    cls = dataclasses.make_dataclass(f"{owner}Settings", fields, frozen=True)
    cls.__module__ = __name__
    cls.__doc__ = f"The keys of {_owner(factory)} (its constructor's arguments)."
    cls.__reduce__ = lambda self: (_settings, (factory, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}))
    cls.factory = factory
    return cls


def settings_docs(factory: Callable[..., Domain]) -> dict[str, str]:
    """Each constructor argument's documentation: the comment on its line of the signature, else the one
    on the line that assigns it (`self.seed = seed  # task generation seed`)."""
    function = factory.__init__ if inspect.isclass(factory) else factory
    try:
        source = textwrap.dedent(inspect.getsource(function))
        comments = {t.start[0]: t.string.lstrip("#").strip() for t in tokenize.generate_tokens(io.StringIO(source).readline)
                    if t.type == tokenize.COMMENT}
    except (OSError, TypeError, tokenize.TokenError, IndentationError):
        return {}
    names = {p.name for p in _constructor(factory)[0]}
    signature, docs, assigned = True, {}, {}
    for number, line in enumerate(source.splitlines(), 1):
        if signature and re.match(r"\s*(\w+)\s*:", line) and number in comments:
            docs.setdefault(re.match(r"\s*(\w+)", line).group(1), comments[number])
        if signature and re.search(r"\)\s*(->.*)?:\s*(#.*)?$", line):
            signature = False
        elif not signature and number in comments and (match := re.match(r"\s*self\.(\w+)\s*=", line)):
            assigned.setdefault(match.group(1), comments[number])
    return {name: docs.get(name) or assigned[name] for name in names if docs.get(name) or name in assigned}


def _settings(factory: Callable[..., Domain], values: dict[str, Any]) -> Any:
    return settings_class(factory)(**values)  # unpickling: the class is rebuilt from the domain's constructor


def _owner(factory: Callable[..., Domain]) -> str:
    return f"{getattr(factory, '__module__', '?')}.{getattr(factory, '__qualname__', repr(factory))}"


def _parse_settings(factory: Callable[..., Domain], options: Mapping[str, Any], key: str) -> Any:
    """The domain's own keys checked against its constructor (see `settings_class`)."""
    cls = settings_class(factory)
    if cls is None:  # **kwargs: any key, numbers still checked
        options = dict(options)
        check_numbers(key, options)
        return options
    names = [f.name for f in dataclasses.fields(cls)]
    for name in options:
        if name not in names:
            raise unknown_key(key, str(name), [*EXTRA_KEYS, *names], f"{_owner(factory)} (its constructor)")
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in options and field_default(f) is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{key}.{missing[0]}", f"required: {_owner(factory)} has no default for "
                                                 f"{', '.join(missing)}")
    checked = getattr(factory, "check_settings", None)  # a domain that checks more (a mix, its members)
    return parse(cls, checked(options, key) if checked else options, key)


@dataclass(frozen=True, init=False)
class DomainConfig:
    """The `domain` block (see the module doc): `DomainConfig(name=..., **its keys)`, as Kedro builds it."""

    name: str = "arithmetic"  # the domain: a built-in, a registered name, an entry point or a 'module:attr' path
    reward: Reward = "verifier"  # `verifier`: the domain's own; `model` or component weights ({verifier: 1.0, rm: 0.5}): a learned reward (docs/preferences.md)
    reward_model: dict[str, Any] = field(default_factory=dict)  # the reward model's arguments (RewardModelVerifier) when `reward` is not `verifier`
    settings: Any = None  # the domain's own keys: a `settings_class(constructor)` instance (a mapping for `**kwargs`)

    def __init__(self, name: str = "arithmetic", reward: Reward = "verifier",
                 reward_model: Mapping[str, Any] | None = None, *, _key: str = "domain", **options: Any) -> None:
        try:
            factory = domain_factory(name)
        except ValueError as e:
            raise ConfigError(f"{_key}.name", str(e)) from e
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "reward", check_value(Reward, reward, f"{_key}.reward"))
        reward_model = dict(reward_model or {})
        check_numbers(f"{_key}.reward_model", reward_model)
        object.__setattr__(self, "reward_model", reward_model)
        object.__setattr__(self, "settings", _parse_settings(factory, options, _key))

    @classmethod
    def from_block(cls, data: Any, key: str = "domain") -> DomainConfig:
        """The block `data` (a mapping with a `name`) checked, for `schema.parse`."""
        if not isinstance(data, Mapping):
            raise ConfigError(key, f"expected a mapping with a `name`, got {data!r}")
        # a block without a `name` is refused (listing the domains): one that replaces another says which it is
        return cls(**{"name": None, **{str(k): v for k, v in data.items()}}, _key=key)

    def to_block(self) -> dict[str, Any]:
        """The block as the YAML writes it, every default filled in: `name`, `reward`, `reward_model` and
        the domain's keys side by side (MLflow's `domain.*` parameters), for `schema.to_dict`."""
        return {"name": self.name, "reward": to_dict(self.reward), "reward_model": to_dict(self.reward_model),
                **to_dict(self.settings)}

    def options(self) -> dict[str, Any]:
        """The keyword arguments of the domain's constructor."""
        if isinstance(self.settings, Mapping):
            return dict(self.settings)
        return {f.name: getattr(self.settings, f.name) for f in dataclasses.fields(self.settings)}

    def __reduce__(self) -> tuple:
        return DomainConfig.from_block, (self.to_block(),)


def get_domain(params: DomainConfig | Mapping[str, Any]) -> Domain:
    """Build the domain the block `params` (a `DomainConfig`, or its mapping) names, passing it its
    keys; with `reward` other than `verifier`, scored by the reward model `reward_model` describes."""
    config = parse(DomainConfig, params, "domain")
    domain = domain_factory(config.name)(**config.options())
    if config.reward == "verifier":
        return domain
    from rlvr_factory.domains.learned_reward import with_learned_reward  # torch-free unless asked for

    return with_learned_reward(domain, config.reward, config.reward_model)
