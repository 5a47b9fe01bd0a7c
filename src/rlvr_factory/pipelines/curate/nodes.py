"""Curate: draw the domain's tasks and split them."""

from __future__ import annotations

import logging

import pandas as pd

from rlvr_factory.domains import get_domain, tasks_to_frame

log = logging.getLogger(__name__)


def generate_tasks(domain: dict) -> pd.DataFrame:
    """All tasks of the configured domain, as a `tasks` table."""
    tasks = tasks_to_frame(get_domain(domain).generate_tasks())
    log.info("curate: %d tasks; per split %s", len(tasks), tasks["split"].value_counts().to_dict())
    return tasks


def split_tasks(tasks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The train, validation and test rows of the `tasks` table."""
    splits = tuple(tasks[tasks["split"] == s].reset_index(drop=True) for s in ("train", "validation", "test"))
    for name, frame in zip(("train", "validation", "test"), splits):
        if frame.empty:
            raise ValueError(f"curate produced no {name} tasks; check domain.splits")
    return splits
