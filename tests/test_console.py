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


# `rlvr verify --domain code` and `rlvr sandbox run`

HUMANEVAL = {"format": "humaneval", "prompt": 'def inc(x):\n    """Add one."""\n',
             "test": "def check(candidate):\n    assert candidate(1) == 2\n    assert candidate(-1) == 0\n", "entry_point": "inc"}
MBPP = {"format": "mbpp", "test_list": ["assert double(2) == 4", "assert double(0) == 0"], "test_imports": []}


def _verify_code(tmp_path: Path, rows: list[dict], *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    src, dst = tmp_path / "code.jsonl", tmp_path / "code-out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = subprocess.run(
        [str(RLVR), "verify", "--domain", "code", "--input", str(src), "--output", str(dst), *args],
        capture_output=True, text=True, timeout=300,
    )
    return result, [json.loads(line) for line in dst.read_text().splitlines()] if dst.exists() else []


def test_code_rows_are_run_in_the_sandbox_in_input_order(tmp_path):
    rows = [
        {"id": "a", "completion": "    return x + 1\n", "reference": HUMANEVAL},
        {"id": "b", "completion": "```python\ndef double(x):\n    return x * 2\n```", "reference": MBPP},
        {"id": "c", "completion": "```python\nimport sys\nsys.exit(0)\ndef double(x):\n    return 0\n```", "reference": MBPP},
        {"id": "d", "completion": "    while True:\n        pass\n", "reference": HUMANEVAL},
        {"id": "e", "completion": "    return x\n", "reference": {"format": "humaneval", "prompt": "x"}},
    ]
    result, out = _verify_code(tmp_path, rows, "--workers", "2", "--timeout", "1")
    assert result.returncode == 0, result.stderr
    assert [r["id"] for r in out] == ["a", "b", "c", "d", "e"]
    assert [r["correct"] for r in out] == [True, True, False, False, False]
    assert [r["status"] for r in out] == ["ok", "ok", "ok", "timeout", "error"]
    assert out[2]["breakdown"]["hack_suspected"] == 1.0 and out[0]["breakdown"]["outcome"] == 1.0
    assert "invalid code reference" in out[4]["message"]


def _sandbox(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RLVR), "sandbox", "run", *args], capture_output=True, text=True, timeout=120)


def test_sandbox_run_prints_the_output_and_exits_with_the_code():
    result = _sandbox("--", "python3", "-c", "import sys; print('hi'); print('oops', file=sys.stderr); sys.exit(4)")
    assert (result.returncode, result.stdout, result.stderr) == (4, "hi\n", "oops\n")


def test_sandbox_run_json_reports_the_run():
    result = _sandbox("--json", "--timeout", "0.5", "--memory-mb", "256", "--", "sh", "-c", "echo start; sleep 5")
    report = json.loads(result.stdout)
    assert result.returncode == 124
    assert report["timed_out"] is True and report["stdout"] == "start\n" and report["backend"] == "bubblewrap"
    assert set(report) >= {"exit_code", "stdout", "stderr", "timed_out", "wall_s", "backend"}


def test_sandbox_run_needs_a_command():
    result = _sandbox("--json")
    assert result.returncode == 2 and "needs a command" in result.stderr
