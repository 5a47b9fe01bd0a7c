"""`rlvr verify`: JSONL in, JSONL out, in order, malformed rows reported, the rest scored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RLVR = Path(sys.executable).with_name("rlvr")


def _run(tmp_path: Path, rows: list[str], *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(rows) + "\n")
    result = subprocess.run(
        [str(RLVR), "verify", "--domain", "math", "--input", str(src), "--output", str(dst), *args],
        capture_output=True, text=True, timeout=300,
    )
    out = [json.loads(line) for line in dst.read_text().splitlines()] if dst.exists() else []
    return result, out


def test_rows_are_scored_in_input_order_and_extra_fields_are_kept(tmp_path):
    rows = [
        json.dumps({"id": i, "completion": f"so \\boxed{{{answer}}}", "reference": {"answer": gold}, "tag": "x"})
        for i, (answer, gold) in enumerate([("4", "4"), ("5", "4"), ("\\frac{1}{2}", "0.5"), ("x^2+2x+1", "(x+1)^2")])
    ]
    result, out = _run(tmp_path, rows, "--workers", "1", "--timeout", "10")
    assert result.returncode == 0, result.stderr
    assert [r["id"] for r in out] == [0, 1, 2, 3]
    assert [r["correct"] for r in out] == [True, False, True, True]
    assert [r["reward"] for r in out] == [1.0, 0.0, 1.0, 1.0]
    assert all(r["status"] == "ok" and r["tag"] == "x" and "outcome" in r["breakdown"] for r in out)


def test_a_malformed_row_gets_an_error_and_the_others_still_run(tmp_path):
    rows = [
        "{not json",
        json.dumps({"id": 1, "reference": {"answer": "3"}}),
        json.dumps({"id": 2, "completion": "\\boxed{3}", "reference": {}}),
        json.dumps({"id": 3, "completion": "\\boxed{3}", "reference": {"answer": "3"}}),
    ]
    result, out = _run(tmp_path, rows)
    assert result.returncode == 0, result.stderr
    assert [r["status"] for r in out] == ["error", "error", "error", "ok"]
    assert all(r["message"] for r in out[:3])
    assert out[3]["correct"] is True
    assert '"rows": 4' in result.stderr and '"error": 3' in result.stderr


def test_bad_arguments_are_refused_with_a_usage_message(tmp_path):
    result, _ = _run(tmp_path, ["{}"], "--workers", "0")
    assert result.returncode == 2
    assert "--workers must be >= 1" in result.stderr
