"""The preference-pair contract: a prompt, the completion preferred for it and the one rejected.

The `preference_pairs` table (Parquet between stages) has `PAIR_COLUMNS`: `margin` is how much
clearer the preference is than a bare "better" (NaN: not given), `kind` what the source says
about how the rejected completion falls short ("" when it says nothing).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import pandas as pd

PAIR_COLUMNS = ["pair_id", "prompt", "chosen", "rejected", "margin", "domain", "split", "source", "kind"]


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


def pairs_to_frame(pairs: list[PreferencePair]) -> pd.DataFrame:
    """Pairs as a DataFrame with the `preference_pairs` table's columns."""
    return pd.DataFrame([asdict(p) for p in pairs], columns=PAIR_COLUMNS).astype({"margin": float})


def pairs_from_frame(frame: pd.DataFrame) -> list[PreferencePair]:
    """The inverse of `pairs_to_frame`; raises on a table missing contract columns."""
    missing = [c for c in PAIR_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"preference table lacks columns {missing}; expected {PAIR_COLUMNS}")
    return [
        PreferencePair(str(r.pair_id), str(r.prompt), str(r.chosen), str(r.rejected), float(r.margin),
                       str(r.domain), str(r.split), str(r.source), str(r.kind))
        for r in frame.itertuples(index=False)
    ]
