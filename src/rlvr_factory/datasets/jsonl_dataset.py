"""A Kedro dataset for JSON Lines files that may not exist yet (the flywheel's logs, pool and regression set)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset


def read_json_lines(text: str) -> list[Any]:
    """The JSON value of each non-blank line; a line that is not JSON becomes ``{"_error": why}``, so
    one bad line is held back with its reason instead of failing the file."""
    rows: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                rows.append({"_error": f"line {number} is not JSON ({e.msg}): {line[:80]!r}"})
    return rows


class JSONLinesDataset(AbstractDataset[list, list]):
    """One JSON value per line. With `missing_ok`, a file that does not exist loads as no rows."""

    def __init__(self, filepath: str, missing_ok: bool = False, metadata: dict[str, Any] | None = None) -> None:
        self._path = Path(filepath)
        self._missing_ok = missing_ok
        self.metadata = metadata

    def load(self) -> list:
        if not self._path.exists() and self._missing_ok:
            return []
        return read_json_lines(self._path.read_text(encoding="utf-8", errors="replace"))

    def save(self, data: list) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._path.write_text("".join(json.dumps(row, sort_keys=True, default=str) + "\n" for row in data),
                              encoding="utf-8")

    def _exists(self) -> bool:
        return self._path.exists()

    def _describe(self) -> dict[str, Any]:
        return {"filepath": str(self._path), "missing_ok": self._missing_ok}
