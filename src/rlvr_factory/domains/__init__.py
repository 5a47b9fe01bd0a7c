"""Domains by name: each is a task source, an environment and a reward behind one interface."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.domains.base import Domain, Task, tasks_from_frame, tasks_to_frame
from rlvr_factory.domains.code import CodeDomain
from rlvr_factory.verifiers.score import Score

DOMAINS: dict[str, Callable[..., Domain]] = {"arithmetic": ArithmeticDomain}
DOMAINS["code"] = CodeDomain


def get_domain(params: Mapping[str, Any]) -> Domain:
    """Build the domain that `params["name"]` names, passing it the other keys."""
    name = params.get("name")
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; known domains: {sorted(DOMAINS)}")
    return DOMAINS[name](**{k: v for k, v in params.items() if k != "name"})


__all__ = ["DOMAINS", "Domain", "Score", "Task", "get_domain", "tasks_from_frame", "tasks_to_frame"]
