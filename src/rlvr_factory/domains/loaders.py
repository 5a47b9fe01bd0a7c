"""Read a data set's records: local JSONL (`.jsonl`, `.jsonl.gz`), Parquet, or a Hugging Face dataset.

A source is a path or a Hugging Face id. Local files are read directly; a directory saved
with `datasets.Dataset.save_to_disk` and hub ids (``openai/gsm8k``, with `config` and
`split`) go through `datasets`. A JSONL line that is not a JSON object is kept as a record
`{"_error": ...}` so the curate stage quarantines it with its line number instead of losing it.
"""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.curation import validate_row

ERROR_KEY = "_error"  # a record that could not be read carries the reason under this key
SHARED_DATA_ENV = "RLVR_SHARED_DATA"


def shared_data_dir() -> Path:
    """The team's external data folder: `$RLVR_SHARED_DATA`, else `../shared/data` from the working directory."""
    return Path(os.environ.get(SHARED_DATA_ENV, "../shared/data"))


def resolve(source: str) -> str:
    """`source` with a leading `shared:` replaced by the shared data folder (`shared:gsm8k/test.jsonl`)."""
    return str(shared_data_dir() / source.removeprefix("shared:")) if source.startswith("shared:") else source


def required_text(record: dict[str, Any], key: str) -> str:
    """`record[key]`, which must be a non-empty string (else ValueError naming the field)."""
    value = record.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"field {key!r} must be a non-empty string, got {value!r}")
    return value


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.name.endswith(".gz") else open
    records = []
    with opener(path, "rt", encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                record = {ERROR_KEY: f"line {number} is not JSON: {e.msg}"}
            except (RecursionError, ValueError) as e:  # nested too deep; a number too long to read
                record = {ERROR_KEY: f"line {number} cannot be read: {type(e).__name__}: {str(e)[:120]}"}
            if not isinstance(record, dict):
                record = {ERROR_KEY: f"line {number} is a JSON {type(record).__name__}, not an object"}
            records.append(record)
    return records


def _read_hf(source: str, config: str | None, split: str | None, **load_args: Any) -> list[dict[str, Any]]:
    try:
        import datasets
    except ImportError as e:
        raise ImportError("reading a Hugging Face dataset needs `datasets`: pip install 'rlvr_factory[data]'") from e
    if (Path(source) / "dataset_info.json").exists() or (Path(source) / "dataset_dict.json").exists():
        data = datasets.load_from_disk(source)  # saved with `save_to_disk`
    else:
        data = datasets.load_dataset(source, config, split=split, **load_args)
    if isinstance(data, datasets.DatasetDict):
        if split is None:
            raise ValueError(f"{source} has splits {list(data)}; say which one with `split`")
        data = data[split]
    return [dict(r) for r in data]


def read_records(
    path: str, config: str | None = None, split: str | None = None, **load_args: Any
) -> list[dict[str, Any]]:
    """The records of one source (`path`: a file, a dataset directory or a hub id), in file order.

    `.jsonl` / `.jsonl.gz` / `.parquet` files are read directly; anything else (a directory
    saved with `save_to_disk`, a folder of data files, a hub id) goes through `datasets`, with
    `config`, `split` and any other `load_dataset` arguments (e.g. `data_files`).
    """
    if load_args.get("trust_remote_code"):
        raise ValueError("trust_remote_code would run the data set's own loading code on this host, outside the "
                         "sandbox (docs/security.md); load its data files instead (a .jsonl or .parquet path)")
    source = resolve(str(path))
    path = Path(source)
    if path.suffix == ".parquet" or path.name.endswith((".jsonl", ".jsonl.gz")):
        if not path.exists():
            raise FileNotFoundError(f"data source {path} does not exist (is {SHARED_DATA_ENV} set?)")
        if path.suffix == ".parquet":
            return pd.read_parquet(path).to_dict("records")
        return _read_jsonl(path)
    return _read_hf(source, config, split, **load_args)


def split_sources(sources: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Sources per split as `read_records` argument blocks: a bare path or hub id becomes `{"path": ...}`."""
    return {split: dict(s) if isinstance(s, dict) else {"path": s} for split, s in sources.items()}


def mapped_records(
    sources: dict[str, dict[str, Any]], limit: dict[str, int], to_row: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[tuple[str, int, dict[str, Any]]]:
    """(split, index, row) for every record of every split (the first `limit[split]` when set), in order.

    Each row holds `split`, `source` (`path#index`) and `to_row(record)`; a record that could not
    be read or mapped (`to_row` raised ValueError, TypeError or KeyError) keeps the reason in
    `_error` and the record itself in `record`, for the curate stage to quarantine.
    """
    out = []
    for split, spec in sources.items():
        for index, record in enumerate(read_records(**spec)[: limit.get(split)]):
            row = {"split": split, "source": f"{spec['path']}#{index}"}
            try:
                if ERROR_KEY in record:
                    raise ValueError(record[ERROR_KEY])
                row.update(to_row(record))
            except (ValueError, TypeError, KeyError) as e:
                row.update({ERROR_KEY: str(e), "record": json.dumps(record, default=str)[:2000]})
            out.append((split, index, row))
    return out


class LoadedDomain:
    """The shared part of a domain read from a data set: sources per split, raw rows, tasks.

    `sources` maps a split to a source (a path / hub id, or a block with `path`, `config`,
    `split` and other `load_dataset` arguments); `limit` optionally keeps the first N records
    of a split; `verifier` holds the keyword arguments of the subclass's `verifier_class`. A
    subclass says how one record becomes a task row (`record_to_row`, raising ValueError with
    the reason for a record it cannot map).
    """

    name = "loaded"
    verifier_class: Callable[..., Any]

    def __init__(
        self,
        sources: dict[str, Any],  # split -> a .jsonl(.gz) / .parquet path, a saved datasets directory or a hub id (`shared:` is $RLVR_SHARED_DATA)
        limit: dict[str, int] | None = None,  # split -> at most this many records (null: all)
        verifier: dict[str, Any] | None = None,  # the verifier's settings (MathVerifier's for gsm8k and math)
    ) -> None:
        if not sources:
            raise ValueError(f"domain {self.name!r} needs `sources`: a split -> path or hub id mapping")
        self.sources = split_sources(sources)
        self.limit = dict(limit or {})
        self.verifier = self.verifier_class(**(verifier or {}))

    def record_to_row(self, record: dict[str, Any]) -> dict[str, Any]:
        """`prompt`, `reference` and `difficulty` (None: unknown) of one record."""
        raise NotImplementedError

    def rows(self) -> list[dict[str, Any]]:
        """Every record of every split as a raw task row; a record that cannot be mapped keeps its reason in `_error`."""
        return [
            {"task_id": f"{self.name}-{split}-{index:05d}", "domain": self.name, **row}
            for split, index, row in mapped_records(self.sources, self.limit, self.record_to_row)
        ]

    def generate_tasks(self) -> list[Task]:
        """The valid tasks of every source; raises on the first row that breaks the task contract
        (the curate stage instead quarantines such rows)."""
        tasks = []
        for row in self.rows():
            task, reason = validate_row(row, {self.name: self})
            if task is None:
                raise ValueError(f"{row.get('source')}: {reason}; run the curate stage to quarantine bad rows")
            tasks.append(task)
        return tasks

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Train-split prompts with their worked solutions, drawn (seeded, with replacement) `size` times."""
        pool = [t for t in self.generate_tasks() if t.split == "train" and t.prompt not in exclude]
        if not pool:
            raise ValueError(f"domain {self.name!r} has no train tasks outside `exclude` to pre-train on")
        rng = random.Random(seed)
        return [f"{t.prompt}\n{self.demonstration(t)}" for t in (rng.choice(pool) for _ in range(size))]
