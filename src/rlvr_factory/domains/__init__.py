"""Domains by name: each is a task source, an environment and a reward behind one interface."""

from __future__ import annotations

from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.domains.base import (
    Domain, Environment, SingleTurnEnvironment, Step, Task, answer_key, environment_for, member, references_of,
    source_rows, tasks_from_frame, tasks_to_frame,
)
from rlvr_factory.domains.cad import CadDomain
from rlvr_factory.domains.code import CodeDomain
from rlvr_factory.domains.extraction import ExtractionDomain
from rlvr_factory.domains.gsm8k import GSM8KDomain
from rlvr_factory.domains.math import MathDomain
from rlvr_factory.domains.mix import DomainMix
from rlvr_factory.domains.registry import (
    DOMAINS, ENTRY_POINT_GROUP, DomainConfig, domain_factory, get_domain, known_domains, register_domain, settings_class,
)
from rlvr_factory.verifiers.score import Score

for _factory in (ArithmeticDomain, CodeDomain, GSM8KDomain, MathDomain, ExtractionDomain, DomainMix, CadDomain):
    register_domain(_factory.name, _factory)

__all__ = [
    "CodeDomain", "DOMAINS", "ENTRY_POINT_GROUP", "Domain", "DomainConfig", "DomainMix", "Environment", "Score", "SingleTurnEnvironment", "Step",
    "Task", "answer_key", "domain_factory", "environment_for", "get_domain", "known_domains", "member",
    "references_of", "register_domain", "settings_class", "source_rows", "tasks_from_frame", "tasks_to_frame",
]
