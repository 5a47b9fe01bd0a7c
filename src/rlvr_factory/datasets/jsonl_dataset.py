"""A Kedro dataset for JSON Lines files that may not exist yet (the flywheel's logs, pool and regression set)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset

from rlvr_factory.json_lines import read_json_lines


class JSONLinesDataset(AbstractDataset[list, list]):
    """One JSON value per line (`rlvr_factory.json_lines`: a line it cannot read is one ``{"_error": why}``
    row). With `missing_ok`, a file that does not exist loads as no rows."""

    def __init__(self, filepath: str, missing_ok: bool = False, metadata: dict[str, Any] | None = None) -> None:
        self._path = Path(filepath)
        self._missing_ok = missing_ok
        self.metadata = metadata

    def load(self) -> list:
        if not self._path.exists() and self._missing_ok:
            return []
        return read_json_lines(self._path.read_bytes())  # one bad line: one {"_error": why} row

    def save(self, data: list) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._path.write_text("".join(json.dumps(row, sort_keys=True, default=str) + "\n" for row in data),
                              encoding="utf-8")

    def _exists(self) -> bool:
        return self._path.exists()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._path), "missing_ok": self._missing_ok}
