"""The preference-pair contract: a prompt, the completion preferred for it and the one rejected.

The `preference_pairs` table (Parquet between stages) has `PAIR_COLUMNS`: `margin` is how much
clearer the preference is than a bare "better" (NaN: not given), `kind` what the source says
about how the rejected completion falls short ("" when it says nothing).

A margin is a finite number in [0, `MAX_MARGIN`]: never a bool (True is an int in Python), a
string ("NaN" and "Infinity" parse as floats), NaN or an infinity (which would silently drop a
pair's term from the loss or blow it up), nor negative (the scores would prefer the rejected
completion). A raw row says "no margin" with null; in the table and in a `PreferencePair` that is NaN.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

PAIR_COLUMNS = ["pair_id", "prompt", "chosen", "rejected", "margin", "domain", "split", "source", "kind"]
MAX_MARGIN = 1e6  # largest margin accepted: any rating scale fits, and a float32 loss stays finite


def finite_number(value: Any, what: str) -> float:
    """`value` as a float when it is a finite real number; ValueError naming `what` for anything else
    (a bool, a string such as "NaN" or "1.5", NaN, an infinity, an int too large for a float)."""
    real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    try:
        number = float(value) if real else math.nan
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{what}: expected a finite number, got {value!r}")
    return number


def margin_value(value: Any) -> float:
    """A raw row's margin: NaN when none is given (None), else a finite number in [0, MAX_MARGIN];
    ValueError saying what is wrong otherwise."""
    if value is None:
        return math.nan
    margin = finite_number(value, "margin")
    if not 0 <= margin <= MAX_MARGIN:
        raise ValueError(f"margin: {margin:g} lies outside [0, {MAX_MARGIN:g}] (a negative margin prefers the "
                         "rejected completion)")
    return margin


def checked_margin(margin: Any, pair_id: str) -> float:
    """A stored margin (NaN: none) that meets the contract, as a float; ValueError naming the pair otherwise."""
    if isinstance(margin, float) and math.isnan(margin):
        return math.nan
    try:
        return margin_value(margin)
    except ValueError as e:
        raise ValueError(f"pair {pair_id!r}: {e}") from None


@dataclass(frozen=True)
class PreferencePair:
    """One preference: `chosen` is preferred to `rejected` as the reply to `prompt`."""

    pair_id: str
    prompt: str
    chosen: str
    rejected: str
    margin: float = math.nan
    domain: str = ""
    split: str = "train"
    source: str = ""
    kind: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "margin", checked_margin(self.margin, self.pair_id))


def pairs_to_frame(pairs: list[PreferencePair]) -> pd.DataFrame:
    """Pairs as a DataFrame with the `preference_pairs` table's columns."""
    return pd.DataFrame([asdict(p) for p in pairs], columns=PAIR_COLUMNS).astype({"margin": float})


def pairs_from_frame(frame: pd.DataFrame) -> list[PreferencePair]:
    """The inverse of `pairs_to_frame`; raises on a table missing contract columns or holding a margin
    that breaks the contract (naming the pair)."""
    missing = [c for c in PAIR_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"preference table lacks columns {missing}; expected {PAIR_COLUMNS}")
    return [
        PreferencePair(str(r.pair_id), str(r.prompt), str(r.chosen), str(r.rejected), r.margin,
                       str(r.domain), str(r.split), str(r.source), str(r.kind))
        for r in frame.itertuples(index=False)
    ]
