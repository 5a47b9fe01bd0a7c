"""A Kedro dataset for a round's table (`rollouts`, `scored`) with typed nested Arrow columns."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq
from kedro.io import AbstractDataset

from rlvr_factory.training.round_batch import from_arrow, to_arrow


class RoundTableDataset(AbstractDataset[pd.DataFrame, pd.DataFrame]):
    """One round's episodes as Parquet with the types of `training/round_batch.py`: turns, ids, log-probs,
    `info`, the verdict and the reward breakdown are nested columns (lists, structs, maps), loaded back
    as lists and dicts. The file is written beside its place and renamed into it, so a run killed while
    saving leaves the last whole table or none."""

    def __init__(self, filepath: str, metadata: dict[str, Any] | None = None) -> None:
        self._path = Path(filepath)
        self.metadata = metadata

    def load(self) -> pd.DataFrame:
        return from_arrow(pq.read_table(self._path))

    def save(self, data: pd.DataFrame) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        partial = self._path.with_name(f".{self._path.name}.partial")
        pq.write_table(to_arrow(data), partial)
        os.replace(partial, self._path)

    def _exists(self) -> bool:
        return self._path.exists()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._path)}
