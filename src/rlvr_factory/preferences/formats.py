"""The common preference data formats, mapped to `prompt, chosen, rejected[, margin]`.

- `native`: string fields `prompt`, `chosen`, `rejected` (optional `margin`, `kind`, `domain`).
- `conversational` (TRL, UltraFeedback binarized): `chosen` / `rejected` are message lists
  (`[{"role": ..., "content": ...}]`), with the prompt as a `prompt` string or message list, or
  as the turns the two conversations share; `score_chosen` - `score_rejected` gives the margin.
- `ultrafeedback` (raw UltraFeedback): an `instruction` and rated `completions`; the best rated
  is chosen, the worst rejected, the difference of their ratings is the margin.
- `hh` (Anthropic HH-RLHF): `chosen` / `rejected` are whole transcripts ("\\n\\nHuman: ...
  \\n\\nAssistant: ..."); the prompt is the dialogue up to the last assistant turn.

`format: auto` recognises each record by its fields. A record that fits no format raises
ValueError with the reason (the curate stage quarantines it), and so does a number that breaks
the contract (`contract.margin_value`): a margin, score or rating that is a bool, a string
("NaN", "Infinity"), NaN or infinite, or a margin that is negative (the scores prefer the
rejected completion). A record with no margin says so with `"margin": None`.
"""

from __future__ import annotations

from typing import Any, Callable

from rlvr_factory.preferences.contract import finite_number, margin_value

FORMATS = ("auto", "native", "conversational", "ultrafeedback", "hh")
HH_HUMAN, HH_ASSISTANT = "\n\nHuman:", "\n\nAssistant:"


def _text(record: Any, key: str) -> str:
    if not isinstance(record, dict):
        raise ValueError(f"expected an object holding {key!r}, got {type(record).__name__}")
    value = record.get(key)
    if not isinstance(value, str):
        raise ValueError(f"field {key!r} must be a string, got {type(value).__name__}")
    return value


def _margin(record: dict[str, Any]) -> float | None:
    """An explicit `margin`, else `score_chosen - score_rejected`, else None (not given)."""
    if record.get("margin") is not None:
        return margin_value(record["margin"])
    if record.get("score_chosen") is not None and record.get("score_rejected") is not None:
        return _gap(finite_number(record["score_chosen"], "score_chosen"),
                    finite_number(record["score_rejected"], "score_rejected"), "score_chosen - score_rejected")
    return None


def _gap(better: float, worse: float, what: str) -> float:
    """The margin of two ratings, as the contract takes it (ValueError naming `what` when it is not)."""
    try:
        return margin_value(better - worse)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


def _native(record: dict[str, Any]) -> dict[str, Any]:
    return {"prompt": _text(record, "prompt"), "chosen": _text(record, "chosen"),
            "rejected": _text(record, "rejected"), "margin": _margin(record)}


def _messages(value: Any, key: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                              and isinstance(m.get("role"), str) for m in value):
        raise ValueError(f"field {key!r} must be a list of {{role, content}} messages")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def render_dialogue(messages: list[dict[str, str]]) -> str:
    """Earlier turns as one prompt: a single user message as it is, several as `Role: content` lines."""
    if len(messages) == 1 and messages[0]["role"] == "user":
        return messages[0]["content"]
    return "\n\n".join(f"{m['role'].capitalize()}: {m['content']}" for m in messages)


def _reply(messages: list[dict[str, str]], key: str) -> str:
    if len(messages) != 1 or messages[0]["role"] != "assistant":
        raise ValueError(f"{key!r} must end in exactly one assistant message after the prompt, "
                         f"got roles {[m['role'] for m in messages]}")
    return messages[0]["content"]


def _conversational(record: dict[str, Any]) -> dict[str, Any]:
    chosen, rejected = _messages(record.get("chosen"), "chosen"), _messages(record.get("rejected"), "rejected")
    prompt = record.get("prompt")
    if isinstance(prompt, list):
        prompt_messages = _messages(prompt, "prompt")
    else:
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        prompt_messages = chosen[:shared]
    if chosen[: len(prompt_messages)] == prompt_messages and len(chosen) > len(prompt_messages):
        chosen = chosen[len(prompt_messages):]  # the conversation repeats the prompt: keep the replies
    if rejected[: len(prompt_messages)] == prompt_messages and len(rejected) > len(prompt_messages):
        rejected = rejected[len(prompt_messages):]
    text = prompt if isinstance(prompt, str) else render_dialogue(prompt_messages)
    return {"prompt": text, "chosen": _reply(chosen, "chosen"), "rejected": _reply(rejected, "rejected"),
            "margin": _margin(record)}


def _rating(completion: Any, index: int) -> float:
    if not isinstance(completion, dict):
        raise ValueError(f"completion {index} must be an object, got {type(completion).__name__}")
    for key in ("overall_score", "score", "rating"):
        if completion.get(key) is not None:
            return finite_number(completion[key], f"completion {index}'s {key}")
    raise ValueError(f"a rated completion needs an overall_score, score or rating; got keys {sorted(completion)}")


def _ultrafeedback(record: dict[str, Any]) -> dict[str, Any]:
    completions = record.get("completions")
    if not isinstance(completions, list) or len(completions) < 2:
        raise ValueError("field 'completions' must list at least two rated completions")
    rated = sorted(((_rating(c, i), i, _text(c, "response")) for i, c in enumerate(completions)),
                   key=lambda r: (-r[0], r[1]))
    (best, _, chosen), (worst, _, rejected) = rated[0], rated[-1]
    if best == worst:
        raise ValueError(f"all {len(rated)} completions are rated {best}: no preference")
    return {"prompt": _text(record, "instruction"), "chosen": chosen, "rejected": rejected,
            "margin": _gap(best, worst, "best rating - worst rating")}


def _split_hh(transcript: str, key: str) -> tuple[str, str]:
    cut = transcript.rfind(HH_ASSISTANT)
    if cut < 0 or HH_HUMAN not in transcript[:cut]:
        raise ValueError(f"{key!r} is not an HH-RLHF transcript (no '\\n\\nHuman:' turn before a '\\n\\nAssistant:' turn)")
    return transcript[:cut], transcript[cut + len(HH_ASSISTANT):].strip()


def _hh(record: dict[str, Any]) -> dict[str, Any]:
    dialogue, chosen = _split_hh(_text(record, "chosen"), "chosen")
    other, rejected = _split_hh(_text(record, "rejected"), "rejected")
    if dialogue != other:
        raise ValueError("the chosen and rejected transcripts differ before the last assistant turn")
    turns = dialogue.strip()
    single = turns.count("Human:") == 1 and "Assistant:" not in turns
    prompt = turns.removeprefix("Human:").strip() if single else turns
    return {"prompt": prompt, "chosen": chosen, "rejected": rejected, "margin": _margin(record)}


_MAPPERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "native": _native, "conversational": _conversational, "ultrafeedback": _ultrafeedback, "hh": _hh,
}


def detect_format(record: dict[str, Any]) -> str:
    """The format a record is written in, from its fields."""
    if "completions" in record and "instruction" in record:
        return "ultrafeedback"
    if isinstance(record.get("chosen"), list) or isinstance(record.get("rejected"), list):
        return "conversational"
    if "prompt" not in record and isinstance(record.get("chosen"), str) and HH_ASSISTANT in record["chosen"]:
        return "hh"
    if {"prompt", "chosen", "rejected"} <= set(record):
        return "native"
    raise ValueError(f"record fits no preference format {FORMATS[1:]}: fields {sorted(record)}")


def _plain(value: Any) -> Any:
    """Arrays (how Parquet hands back list columns: message lists, rated completions) as lists."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or (hasattr(value, "tolist") and getattr(value, "ndim", 0) > 0):
        return [_plain(v) for v in value]
    return value


def record_to_pair(record: dict[str, Any], fmt: str = "auto") -> dict[str, Any]:
    """`prompt, chosen, rejected, margin` (and `kind`, `domain` when the record gives them) of one record."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown preference format {fmt!r}; choose one of {FORMATS}")
    if not isinstance(record, dict):
        raise ValueError(f"a preference record must be an object, got {type(record).__name__}")
    try:
        record = _plain(record)
    except RecursionError:
        raise ValueError("the record is nested too deeply to read") from None
    row = _MAPPERS[detect_format(record) if fmt == "auto" else fmt](record)
    for key in ("kind", "domain"):
        if isinstance(record.get(key), str):
            row[key] = record[key]
    return row
