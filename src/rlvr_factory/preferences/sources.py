"""Where preference pairs come from: local files or Hugging Face datasets, or the embedded generator."""

from __future__ import annotations

from functools import partial
from typing import Any, Mapping

from rlvr_factory.domains.base import Domain, Task
from rlvr_factory.domains.loaders import mapped_records, split_sources
from rlvr_factory.preferences.formats import record_to_pair
from rlvr_factory.preferences.synthetic import SyntheticPairs, synthetic_rows


def loaded_rows(sources: Mapping[str, Any], fmt: str = "auto", limit: Mapping[str, int] | None = None,
                name: str = "pairs") -> list[dict[str, Any]]:
    """Raw pair rows of every split's source (a path, hub id or `read_records` block), each with a
    `pair_id` (`<name>-<split>-<index>`), its split and source; an unreadable record keeps the reason."""
    return [
        {"pair_id": f"{name}-{split}-{index:05d}", **row}
        for split, index, row in mapped_records(split_sources(dict(sources)), dict(limit or {}),
                                                partial(record_to_pair, fmt=fmt))
    ]


def raw_pair_rows(preferences: Mapping[str, Any], domain: Domain, tasks: list[Task]) -> list[dict[str, Any]]:
    """The `preferences` block's raw rows: its `sources` when given, else pairs generated from `tasks`
    (the embedded default, `preferences.embedded`)."""
    if preferences.get("sources"):
        return loaded_rows(preferences["sources"], preferences["format"], preferences["limit"])
    embedded = dict(preferences.get("embedded") or {})
    if "splits" in embedded:
        embedded["splits"] = tuple(embedded["splits"])
    return synthetic_rows(domain, tasks, SyntheticPairs(**embedded))
