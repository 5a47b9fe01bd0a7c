"""FigureFolderDataset: named pictures as PNG files of one folder, replaced as a whole."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from rlvr_factory.datasets import FigureFolderDataset


def picture() -> Figure:
    fig = Figure()
    fig.add_subplot(1, 1, 1).plot([0, 1], [1, 0])
    return fig


def test_saving_writes_one_png_per_name_and_replaces_the_previous_pictures(tmp_path):
    dataset = FigureFolderDataset(str(tmp_path / "views"))
    dataset.save({"a.png": picture(), "b.png": picture()})
    assert dataset.load() == ["a.png", "b.png"]
    assert (tmp_path / "views" / "a.png").read_bytes().startswith(b"\x89PNG")
    dataset.save({"c.png": picture()})
    assert dataset.load() == ["c.png"]


def test_no_pictures_leave_an_empty_folder(tmp_path):
    dataset = FigureFolderDataset(str(tmp_path / "views"))
    dataset.save({})
    assert dataset.exists() and dataset.load() == []


@pytest.mark.parametrize("name", ["../escape.png", "sub/a.png", "a.jpg"])
def test_names_must_be_plain_png_file_names(tmp_path, name):
    with pytest.raises(Exception, match="plain file name ending in .png"):
        FigureFolderDataset(str(tmp_path / "views")).save({name: picture()})
    assert not (tmp_path / "escape.png").exists()
