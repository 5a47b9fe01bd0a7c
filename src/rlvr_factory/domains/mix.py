"""Several domains trained together, behind the one `Domain` interface.

`DomainMix` dispatches on the domain tag every mixed task carries in its reference
(`reference["domain"]`): its `gold()` wraps the member's gold with that tag and its
verifier (`MixVerifier`) hands each check to the member's verifier, so verification,
the RL nodes and evaluation work on a mix unchanged. The mix's weights set each
member's share of the training pool (`curation.mix_by_weight`) and of the base model's
pre-training corpus.
"""

from __future__ import annotations

import json
import random
from typing import Any, Mapping

from rlvr_factory.domains.base import Domain, Task, row_reference, source_rows
from rlvr_factory.domains.registry import DomainConfig, get_domain
from rlvr_factory.schema import ConfigError, PositiveFloat, check_value
from rlvr_factory.verifiers.isolation import ROUTE
from rlvr_factory.verifiers.score import Score

TAG = "domain"  # the reference key naming a mixed task's member domain


def tag_gold(key: str, gold: str) -> str:
    """A member's gold as the mix's verifier reads it: tagged with the member's key."""
    return json.dumps({TAG: key, "gold": gold})


def _tag_row(key: str, row: dict[str, Any]) -> dict[str, Any]:
    """A raw row labelled with its member's key; a reference that is not a JSON object is left for validation to refuse."""
    reference = row_reference(row)
    tagged = {**reference, TAG: key} if reference is not None else row.get("reference")
    return {**row, "domain": key, "reference": tagged}


class MixVerifier:
    """Routes each (completion, gold) check to the member verifier the gold names; picklable."""

    isolation = ROUTE  # each member's verifier behind its own boundary

    def __init__(self, verifiers: Mapping[str, Any]) -> None:
        self.verifiers = dict(verifiers)

    def _route(self, gold: str) -> tuple[Any, str]:
        tagged = json.loads(gold)
        if tagged[TAG] not in self.verifiers:
            raise ValueError(f"no member domain {tagged[TAG]!r} in this mix ({sorted(self.verifiers)})")
        return self.verifiers[tagged[TAG]], tagged["gold"]

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """The member verifier's cheap verdict, or None."""
        verifier, member_gold = self._route(gold)
        return verifier.quick_score(completion, member_gold)

    def score(self, completion: str, gold: str) -> Score:
        """The member verifier's full check."""
        verifier, member_gold = self._route(gold)
        return verifier.score(completion, member_gold)


class DomainMix:
    """Member domains with weights; `domains` maps a member's key to its parameter block.

    Each block takes an optional `name` (the domain to build; default: the key), a `weight`
    (its share of training tasks and of the pre-training corpus; default 1) and the member's
    own keys. Tasks keep their member's key as their `domain`.
    """

    name = "mix"

    @staticmethod
    def check_settings(options: Mapping[str, Any], key: str) -> dict[str, Any]:
        """The mix's keys with each member's block checked as a domain block of its own (`DomainConfig`,
        named by its key unless it says `name`) and its `weight` as a positive number, every default filled in."""
        domains = options.get("domains")
        if not isinstance(domains, Mapping):
            return dict(options)  # parse reports the type
        if not domains:
            raise ConfigError(f"{key}.domains", "a domain mix needs at least one member")
        members = {}
        for member, block in domains.items():
            where = f"{key}.domains.{member}"
            if not isinstance(block, Mapping):
                raise ConfigError(where, f"expected a mapping (the member's keys and its weight), got {block!r}")
            block = dict(block)
            weight = check_value(PositiveFloat, block.pop("weight", 1.0), f"{where}.weight")
            config = DomainConfig(**{"name": member, **block}, _key=where)
            members[str(member)] = {**config.to_block(), "weight": weight}
        return {**options, "domains": members}

    def __init__(
        self,
        domains: Mapping[str, Mapping[str, Any]],  # key -> the member's block: optional `name` (default: the key), `weight` (default 1) and its keys
        seed: int = 0,  # the mix's own draws (each member has its own seed)
    ) -> None:
        if not domains:
            raise ValueError("a domain mix needs at least one member under 'domains'")
        self.members: dict[str, Domain] = {}
        self.weights: dict[str, float] = {}
        for key, block in domains.items():
            block = dict(block)
            weight = float(block.pop("weight", 1.0))
            if weight <= 0:
                raise ValueError(f"domain {key!r} has weight {weight}; weights must be positive")
            self.weights[key] = weight
            self.members[key] = get_domain({"name": block.pop("name", key), **block})
        self.seed = seed
        self.verifier = MixVerifier({k: d.verifier for k, d in self.members.items()})

    def member(self, key: str) -> Domain:
        """The member domain under `key`."""
        if key not in self.members:
            raise ValueError(f"domain {key!r} is not in this mix; members: {sorted(self.members)}")
        return self.members[key]

    def _tag(self, key: str, task: Task) -> Task:
        return Task(task.task_id, key, task.prompt, {**task.reference, TAG: key}, task.difficulty, task.split,
                    task.source)

    def generate_tasks(self) -> list[Task]:
        """Every member's tasks, tagged with the member's key (the weights apply in curation)."""
        return [self._tag(key, t) for key, d in self.members.items() for t in d.generate_tasks()]

    def rows(self) -> list[dict[str, Any]]:
        """Every member's raw task rows, with the member's key as their domain and in their reference's tag."""
        return [_tag_row(key, row) for key, d in self.members.items() for row in source_rows(d)]

    def gold(self, reference: dict[str, Any]) -> str:
        """The member's gold, tagged with the member's key."""
        if TAG not in reference:
            raise ValueError(f"a mixed task's reference needs a {TAG!r} tag; got keys {sorted(reference)}")
        key = reference[TAG]
        return tag_gold(key, self.member(key).gold(reference))

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The member domain's demonstration."""
        return self.member(task.domain).demonstration(task, worked)

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """The member domain's score."""
        return self.member(reference[TAG]).score(completion, reference)

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Each member's corpus in proportion to its weight, shuffled together (seeded)."""
        total = sum(self.weights.values())
        keys = list(self.members)
        sizes = [int(size * self.weights[k] / total) for k in keys]
        for i in range(size - sum(sizes)):
            sizes[i % len(keys)] += 1
        corpus = [
            text for i, (k, n) in enumerate(zip(keys, sizes))
            for text in self.members[k].pretraining_corpus(n, seed * 1_000 + i, exclude)
        ]
        random.Random(seed).shuffle(corpus)
        return corpus
