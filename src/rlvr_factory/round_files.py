"""Every round's file of a per-round folder, read back in round order (the summary's and the report's input)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def each_round(partitions: dict[str, Any], rounds: int, what: str) -> Iterator[Any]:
    """Rounds 0 .. rounds-1 of a per-round folder (a Kedro `PartitionedDataset`'s `{round_NNN: load}`),
    loaded one at a time, in order (a run of thousands of rounds never holds them all); files of other
    runs' later rounds are left alone. A missing round is an error that names it, raised before any is
    loaded (a run killed before it wrote it resumes with `rl.resume_from`)."""
    names = [f"round_{k:03d}" for k in range(rounds)]
    missing = [n for n in names if n not in partitions]
    if missing:
        raise FileNotFoundError(f"{what}: no {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                                f"(of rl.rounds={rounds}); did the run reach its last round?")
    return (partitions[n]() for n in names)
