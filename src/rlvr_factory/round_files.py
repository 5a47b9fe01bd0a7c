"""Round k's name (`round_007`: its nodes', datasets' and files' prefix), in one place, and every round's
file of a per-round folder, read back in round order (the summary's and the report's input)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

ROUND = "round"  # the namespace of the declared round; round k runs as `round_{k:03d}`
_ROUND_K = re.compile(rf"{ROUND}_(\d+)(?:\.|$)")


def round_name(k: int) -> str:
    """Round k's namespace: its nodes' and datasets' prefix (`round_007.rollout`, `round_007.scored`)."""
    return f"{ROUND}_{k:03d}"


def round_of(name: str) -> int | None:
    """The round whose node, dataset or file `name` is (`round_007.scored`, `round_007`: 7); None for any other."""
    match = _ROUND_K.match(name)
    return int(match.group(1)) if match else None


def each_round(partitions: dict[str, Any], rounds: int, what: str) -> Iterator[Any]:
    """Rounds 0 .. rounds-1 of a per-round folder (a Kedro `PartitionedDataset`'s `{round_NNN: load}`),
    loaded one at a time, in order (a run of thousands of rounds never holds them all); files of other
    runs' later rounds are left alone. A missing round is an error that names it, raised before any is
    loaded (a run killed before it wrote it resumes with `rl.resume_from`)."""
    names = [round_name(k) for k in range(rounds)]
    missing = [n for n in names if n not in partitions]
    if missing:
        raise FileNotFoundError(f"{what}: no {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} "
                                f"(of rl.rounds={rounds}); did the run reach its last round?")
    return (partitions[n]() for n in names)
