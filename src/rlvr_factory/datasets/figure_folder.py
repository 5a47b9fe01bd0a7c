"""A Kedro dataset for a folder of named pictures (PNG), replaced as a whole on every save."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.io import AbstractDataset
from matplotlib.figure import Figure


class FigureFolderDataset(AbstractDataset[dict[str, Figure], list[str]]):
    """Saves `{name.png: Figure}` as files of one folder (the folder always exists afterwards, empty when the
    dict is); loads the names of the pictures it holds. Wrap it in kedro-mlflow's `MlflowArtifactDataset`
    to log the folder as an artifact."""

    def __init__(self, path: str, dpi: int = 100, metadata: dict[str, Any] | None = None) -> None:
        self._path = Path(path)
        self._dpi = dpi
        self.metadata = metadata

    def save(self, data: dict[str, Figure]) -> None:
        for name in data:
            if Path(name).name != name or not name.endswith(".png"):
                raise ValueError(f"a picture name must be a plain file name ending in .png, got {name!r}")
        self._path.mkdir(parents=True, exist_ok=True)
        for old in self._path.glob("*.png"):
            old.unlink()
        for name, figure in data.items():
            figure.savefig(self._path / name, dpi=self._dpi)

    def load(self) -> list[str]:
        return sorted(p.name for p in self._path.glob("*.png"))

    def _exists(self) -> bool:
        return self._path.is_dir()

    def _describe(self) -> dict[str, Any]:
        return {"path": str(self._path), "dpi": self._dpi}
