"""Where preference pairs come from: local files or Hugging Face datasets, or the embedded generator."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, Mapping

from rlvr_factory.domains.base import Domain, Task
from rlvr_factory.domains.curation import DecontaminationConfig
from rlvr_factory.domains.loaders import mapped_records, split_sources
from rlvr_factory.preferences.formats import record_to_pair
from rlvr_factory.preferences.synthetic import SyntheticPairs, synthetic_rows
from rlvr_factory.schema import Block, NonNegativeInt, PositiveInt


def loaded_rows(sources: Mapping[str, Any], fmt: str = "auto", limit: Mapping[str, int] | None = None,
                name: str = "pairs") -> list[dict[str, Any]]:
    """Raw pair rows of every split's source (a path, hub id or `read_records` block), each with a
    `pair_id` (`<name>-<split>-<index>`), its split and source; an unreadable record keeps the reason."""
    return [
        {"pair_id": f"{name}-{split}-{index:05d}", **row}
        for split, index, row in mapped_records(split_sources(dict(sources)), dict(limit or {}),
                                                partial(record_to_pair, fmt=fmt))
    ]


@dataclass(frozen=True)
class PreferencesConfig(Block):
    sources: dict[str, Any] | None = None  # null: the embedded pairs; else split -> path (JSONL/Parquet) or HF dataset
    format: Literal["auto", "native", "conversational", "ultrafeedback", "hh"] = "auto"  # record format of the sources
    limit: dict[str, NonNegativeInt] = field(default_factory=dict)  # split -> at most this many records
    max_length: PositiveInt | None = None  # tokens of prompt + completion a pair may have; null: the base model's context
    validation_from_train: NonNegativeInt = 200  # pairs moved from train to validation when the sources hold none out
    seed: int = 0  # validation carving
    decontamination: DecontaminationConfig = field(default_factory=DecontaminationConfig)  # train pairs vs eval prompts
    embedded: SyntheticPairs = field(default_factory=SyntheticPairs)  # the embedded pairs: worked demonstration vs a flawed one


def raw_pair_rows(preferences: PreferencesConfig, domain: Domain, tasks: list[Task]) -> list[dict[str, Any]]:
    """The `preferences` block's raw rows: its `sources` when given, else pairs generated from `tasks`
    (the embedded default, `preferences.embedded`)."""
    if preferences.sources:
        return loaded_rows(preferences.sources, preferences.format, preferences.limit)
    return synthetic_rows(domain, tasks, preferences.embedded)
