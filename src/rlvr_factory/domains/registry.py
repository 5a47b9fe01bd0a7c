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
"""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points
from typing import Any, Callable, Mapping

from rlvr_factory.domains.base import Domain

ENTRY_POINT_GROUP = "rlvr_factory.domains"
_PACKAGE = "rlvr_factory.domains"
_NOT_DOMAINS = {"base", "registry", "loaders", "curation", "documents", "mix", "calculator", "learned_reward"}  # library modules, not domains

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


def get_domain(params: Mapping[str, Any]) -> Domain:
    """Build the domain that `params["name"]` names, passing it the other keys; with `reward` other
    than `verifier`, scored by the reward model `reward_model` describes."""
    rest = {k: v for k, v in params.items() if k not in ("name", "reward", "reward_model")}
    domain = domain_factory(params.get("name"))(**rest)
    if params.get("reward", "verifier") == "verifier":
        return domain
    from rlvr_factory.domains.learned_reward import with_learned_reward  # torch-free unless asked for

    return with_learned_reward(domain, params["reward"], params.get("reward_model") or {})
