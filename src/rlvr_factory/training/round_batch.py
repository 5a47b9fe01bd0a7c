"""A round's batch as typed Arrow columns: the `rollouts` and `scored` tables on disk.

One row is one episode. Its nested data are Arrow types, not JSON text inside a string column:

    turns              list<struct<action, observation, reward, finish_reason, action_tokens, observation_tokens>>
    prompt_ids, completion_ids, loss_mask        list<int64>      (loss_mask: 1 on the policy's tokens)
    logprobs                                     list<double>     (sampling log-probs, per completion token)
    turn_prompt_ids                              list<list<int64>> (per-turn layout: each action's context)
    info, reward_breakdown                       struct<numbers: map<string, double>, labels: map<string, string>>
    verdict            struct<reward, correct, status, breakdown, message>  (null: the verify station judges `answer`)

A breakdown (and a step's `info`) mixes numbers with a few strings (the CAD verifier's `cad_status`,
a `reason`): Parquet has no column whose values are either, so the numbers and the strings are two
maps, and `from_arrow` gives each row its one dict back, keys sorted. Verification adds `reward`,
`correct`, `reward_breakdown` and `status` to the rollouts' columns; the update reads the table as
it is. `RoundTableDataset` persists it: no node encodes or decodes JSON.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import numpy as np
import pandas as pd
import pyarrow as pa

NUMBERS = pa.map_(pa.string(), pa.float64())
LABELS = pa.map_(pa.string(), pa.string())
MIXED = pa.struct([("numbers", NUMBERS), ("labels", LABELS)])  # a dict of numbers and strings
IDS = pa.list_(pa.int64())
TURN = pa.struct([
    ("action", pa.string()), ("observation", pa.string()), ("reward", pa.float64()), ("finish_reason", pa.string()),
    ("action_tokens", pa.int64()), ("observation_tokens", pa.int64()),
])
VERDICT = pa.struct([
    ("reward", pa.float64()), ("correct", pa.bool_()), ("status", pa.string()), ("breakdown", MIXED),
    ("message", pa.string()),
])

# Every column a round's table may have, with its type; a column not named here keeps the type Arrow infers.
COLUMNS: dict[str, pa.DataType] = {
    "round": pa.int64(), "task_id": pa.string(), "domain": pa.string(), "sample_index": pa.int64(),
    "prompt": pa.string(), "completion": pa.string(), "prompt_tokens": pa.int64(), "completion_tokens": pa.int64(),
    "finish_reason": pa.string(), "policy_version": pa.int64(), "prompt_ids": IDS, "completion_ids": IDS,
    "loss_mask": IDS, "logprobs": pa.list_(pa.float64()), "num_turns": pa.int64(), "turns": pa.list_(TURN),
    "turn_prompt_ids": pa.list_(IDS), "info": MIXED, "out_of_budget": pa.bool_(), "answer": pa.string(),
    "verdict": VERDICT, "error": pa.string(),
    # added by verification
    "reward": pa.float64(), "correct": pa.bool_(), "reward_breakdown": MIXED, "status": pa.string(),
}
MIXED_COLUMNS = ("info", "reward_breakdown")


def split_mixed(values: Mapping[str, Any] | None) -> dict[str, dict] | None:
    """A dict of numbers and strings as its two maps (booleans and integers, numpy's too, are numbers)."""
    if values is None:
        return None
    reals, labels = {}, {}
    for key, value in values.items():
        if isinstance(value, (numbers.Real, np.bool_)):
            reals[str(key)] = float(value)
        else:
            labels[str(key)] = None if value is None else str(value)
    return {"numbers": reals, "labels": labels}


def join_mixed(stored: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The one dict of `split_mixed`'s two maps, keys sorted."""
    if stored is None:
        return None
    return dict(sorted({**(stored["numbers"] or {}), **(stored["labels"] or {})}.items()))


def _stored_verdict(verdict: Mapping[str, Any] | None) -> dict | None:
    return None if verdict is None else {**verdict, "breakdown": split_mixed(verdict.get("breakdown") or {})}


def _loaded_verdict(verdict: Mapping[str, Any] | None) -> dict | None:
    return None if verdict is None else {**verdict, "breakdown": join_mixed(verdict["breakdown"]) or {}}


def _missing(value: Any) -> bool:
    return value is None or isinstance(value, float) and math.isnan(value)


def to_arrow(frame: pd.DataFrame) -> pa.Table:
    """A round's table as an Arrow table of the typed columns (`COLUMNS`; others as inferred)."""
    stored = frame.copy(deep=False)
    for name in MIXED_COLUMNS:
        if name in stored:
            stored[name] = [split_mixed(None if _missing(v) else v) for v in stored[name]]
    if "verdict" in stored:
        stored["verdict"] = [_stored_verdict(None if _missing(v) else v) for v in stored["verdict"]]
    unknown = [c for c in stored.columns if c not in COLUMNS]
    inferred = pa.Schema.from_pandas(stored[unknown], preserve_index=False) if unknown else pa.schema([])
    schema = pa.schema([pa.field(c, COLUMNS[c]) if c in COLUMNS else inferred.field(c) for c in stored.columns])
    table = pa.Table.from_pandas(stored, schema=schema, preserve_index=False)
    # pandas' conversion reads a NaN as a missing value; inside a list or a struct (a turn's reward, a
    # verdict's, a log-prob) a NaN is a value, so the nested columns are converted again as Python data.
    for index, field in enumerate(schema):
        if field.name in COLUMNS and pa.types.is_nested(field.type):
            values = [None if _missing(v) else v for v in stored[field.name]]
            table = table.set_column(index, field, pa.array(values, type=field.type, from_pandas=False))
    return table


def from_arrow(table: pa.Table) -> pd.DataFrame:
    """A round's table as the pipeline reads it: one dict per breakdown, `info` and verdict."""
    frame = table.to_pandas(maps_as_pydicts="strict")
    for name in MIXED_COLUMNS:
        if name in frame:
            frame[name] = [join_mixed(v) for v in frame[name]]
    if "verdict" in frame:
        frame["verdict"] = [_loaded_verdict(v) for v in frame["verdict"]]
    return frame
