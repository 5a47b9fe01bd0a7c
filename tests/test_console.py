"""`rlvr verify`: JSONL in, JSONL out, in order, malformed rows reported, the rest scored."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

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
    assert result.returncode == 1, result.stderr  # some rows could not be judged
    assert [r["status"] for r in out] == ["error", "error", "error", "ok"]
    assert all(r["message"] for r in out[:3])
    assert out[3]["correct"] is True
    assert '"rows": 4' in result.stderr and '"error": 3' in result.stderr


def test_bad_arguments_are_refused_with_a_usage_message(tmp_path):
    result, _ = _run(tmp_path, ["{}"], "--workers", "0")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "rlvr verify: argument --workers: must be a whole number >= 1, got '0' (see rlvr verify --help)"]


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
    result, out = _verify_code(tmp_path, rows, "--workers", "2", "--timeout", "1", "--allow-errors")
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


# Any line at all: each bad line is an error row with a message, every good row is still scored.

GOOD = json.dumps({"id": "good", "completion": "\\boxed{4}", "reference": {"answer": "4"}})
BAD_LINES = {
    "invalid_utf8": b'{"id": "x", "completion": "\xff\xfe\xfd"}',
    "deep_nesting": b"[" * 100_000 + b"]" * 100_000,
    "a_5000_digit_number": b'{"id": ' + b"9" * 5000 + b', "completion": "1"}',
    "binary": bytes(b for b in range(256) if b != 10) * 4,
    "nul_bytes_in_json": b'{"id": 1,\x00 "completion": "x"}',
    "deep_reference": b'{"completion": "1", "reference": ' + b'{"a": ' * 50_000 + b"1" + b"}" * 50_000 + b"}",
}


def _verify_bytes(tmp_path: Path, data: bytes, *args: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_bytes(data)
    result = subprocess.run([str(RLVR), "verify", "--input", str(src), "--output", str(dst), *args],
                            capture_output=True, text=True, timeout=300)
    return result, [json.loads(line) for line in dst.read_text().splitlines()] if dst.exists() else []


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_a_line_of_any_bytes_is_an_error_row_and_the_good_rows_are_kept(tmp_path, kind):
    data = GOOD.encode() + b"\n" + BAD_LINES[kind] + b"\n" + GOOD.encode() + b"\n"
    result, out = _verify_bytes(tmp_path, data, "--workers", "1")
    assert [r["status"] for r in out] == ["ok", "error", "ok"], result.stderr
    assert out[1]["message"] and out[1]["reward"] == 0.0
    assert out[0]["correct"] and out[2]["correct"]
    assert result.returncode == 1 and "Traceback" not in result.stderr


def test_allow_errors_exits_zero_and_a_clean_file_exits_zero(tmp_path):
    data = GOOD.encode() + b"\n{oops\n"
    assert _verify_bytes(tmp_path, data, "--allow-errors")[0].returncode == 0
    assert _verify_bytes(tmp_path, GOOD.encode() + b"\n")[0].returncode == 0


def test_stdin_and_stdout_are_dash(tmp_path):
    done = subprocess.run([str(RLVR), "verify", "--input", "-", "--output", "-"], input=GOOD + "\n",
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(done.stdout)["correct"] is True


def test_a_missing_input_is_a_one_line_error(tmp_path):
    done = subprocess.run([str(RLVR), "verify", "--input", str(tmp_path / "nope.jsonl"), "--output",
                           str(tmp_path / "out.jsonl")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"rlvr verify: cannot read --input {str(tmp_path / 'nope.jsonl')!r}: No such file or directory"]


def test_the_help_lists_every_registered_domain_with_a_line_of_help():
    from rlvr_factory.domains import known_domains

    shown = subprocess.run([str(RLVR), "verify", "--help"], capture_output=True, text=True, timeout=120).stdout
    listed = {line.split()[0]: line for line in shown.split("domains:\n")[1].splitlines() if line.strip()}
    assert set(listed) == set(known_domains())
    assert all(len(line.split()) > 2 for line in listed.values())


def test_every_registered_domain_is_accepted_extraction_included(tmp_path):
    from rlvr_factory.domains import ExtractionDomain

    task = ExtractionDomain(splits={"train": 1}).generate_tasks()[0]
    right = ExtractionDomain.demonstration(None, task)  # type: ignore[arg-type]  # uses only the task
    rows = [{"id": "right", "completion": right, "reference": task.reference},
            {"id": "wrong", "completion": "{}", "reference": task.reference}]
    result, out = _verify_bytes(tmp_path, "".join(json.dumps(r) + "\n" for r in rows).encode(), "--domain", "extraction")
    assert result.returncode == 0, result.stderr
    assert [r["correct"] for r in out] == [True, False]
    mixed = [{"completion": "\\boxed{7}", "reference": {"answer": "7", "domain": "arithmetic"}},
             {"completion": right, "reference": {**task.reference, "domain": "extraction"}}]
    result, out = _verify_bytes(tmp_path, "".join(json.dumps(r) + "\n" for r in mixed).encode(), "--domain", "mix")
    assert [r["correct"] for r in out] == [True, True], result.stderr


def test_infra_error_rows_say_why(tmp_path):
    rows = [{"id": "a", "completion": "    return x + 1\n", "reference": HUMANEVAL}]
    result, out = _verify_code(tmp_path, rows, "--backend", "docker", "--workers", "1")
    assert out[0]["status"] == "infra_error" and "sandbox" in out[0]["message"]
    assert result.returncode == 1


SLOW = {"format": "mbpp", "test_list": ["assert slow(1) == 1"], "test_imports": []}
SLOW_PROGRAM = "```python\nimport time\ndef slow(x):\n    time.sleep(0.4)\n    return x\n```"


def test_rows_are_written_as_they_finish_and_resume_continues_a_killed_run(tmp_path):
    rows = [{"id": i, "completion": SLOW_PROGRAM + "\n" * i, "reference": SLOW} for i in range(8)]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    command = [str(RLVR), "verify", "--domain", "code", "--input", str(src), "--output", str(dst), "--workers", "1"]
    running = subprocess.Popen(command, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while (not dst.exists() or dst.read_text().count("\n") < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    running.kill()
    running.wait()
    written = dst.read_text().count("\n")
    assert 3 <= written < 8, "the rows came out only at the end, or the run finished before the kill"
    with dst.open("a") as out:
        out.write('{"id": 9, "rew')  # a row cut short by the kill
    resumed = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stderr.strip().splitlines()[-1])
    assert summary["resumed_after"] == written and summary["rows"] == 8
    out = [json.loads(line) for line in dst.read_text().splitlines()]
    assert [r["id"] for r in out] == list(range(8)) and all(r["correct"] for r in out)


# red team: numbers that disable a limit, an output that destroys its input, a resume that mixes two files,
# references of any shape


@pytest.mark.parametrize(("flag", "value"), [
    ("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "-inf"), ("--timeout", "1e999"), ("--timeout", "0"),
    ("--timeout", "-1"), ("--workers", "0"), ("--workers", "-3"), ("--workers", "nan"), ("--workers", "1.5"),
])
def test_verify_refuses_a_non_finite_or_non_positive_number_in_one_line(tmp_path, flag, value):
    result, out = _run(tmp_path, [GOOD], f"{flag}={value}")
    assert result.returncode == 2 and out == []
    assert result.stderr.strip().splitlines() == [
        f"rlvr verify: argument {flag}: must be a "
        f"{'finite number of seconds > 0' if flag == '--timeout' else 'whole number >= 1'}, got {value!r} "
        "(see rlvr verify --help)"]


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "nan"), ("--timeout", "inf"), ("--timeout", "0"),
                                             ("--memory-mb", "nan"), ("--memory-mb", "8")])
def test_sandbox_run_refuses_a_non_finite_or_too_small_limit_in_one_line(flag, value):
    result = _sandbox(f"{flag}={value}", "--", "true")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith(f"rlvr sandbox run: argument {flag}: must be")


def _verify_paths(src: Path | str, dst: Path | str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(RLVR), "verify", "--input", str(src), "--output", str(dst), *args],
                          capture_output=True, text=True, timeout=300)


def test_an_output_that_is_the_input_under_any_name_is_refused_and_the_input_kept(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(GOOD + "\n")
    (tmp_path / "link.jsonl").symlink_to(src)
    (tmp_path / "hard.jsonl").hardlink_to(src)
    (tmp_path / "sub").mkdir()
    for output in (src, tmp_path / "link.jsonl", tmp_path / "hard.jsonl", f"{tmp_path}/sub/../in.jsonl"):
        for resume in ((), ("--resume",)):
            result = _verify_paths(src, output, *resume)
            assert result.returncode == 2 and "is the input file" in result.stderr, (output, resume)
            assert len(result.stderr.strip().splitlines()) == 1
            assert src.read_text() == GOOD + "\n"


def test_resume_onto_an_output_written_from_another_input_is_refused_and_nothing_is_written(tmp_path):
    first, second, out = tmp_path / "first.jsonl", tmp_path / "second.jsonl", tmp_path / "out.jsonl"
    rows = [json.dumps({"id": i, "completion": f"\\boxed{{{i}}}", "reference": {"answer": str(i)}}) for i in range(4)]
    first.write_text("\n".join(rows[:2]) + "\n")
    second.write_text("\n".join([rows[0], rows[3], rows[2]]) + "\n")  # the same length, another second row
    assert _verify_paths(first, out).returncode == 0
    written = out.read_text()
    refused = _verify_paths(second, out, "--resume")
    assert refused.returncode == 2 and "were not written from" in refused.stderr
    assert out.read_text() == written
    longer = tmp_path / "longer.jsonl"
    longer.write_text("\n".join(rows[:2] + ["{broken", rows[3]]) + "\n")  # the same first rows, then more
    assert _verify_paths(longer, out, "--resume", "--allow-errors").returncode == 0
    assert [r.get("id") for r in map(json.loads, out.read_text().splitlines())] == [0, 1, None, 3]


MALFORMED_REFERENCES = {
    "a_list_answer": {"answer": ["2", "3"]}, "a_number_answer": {"answer": 2}, "a_null_answer": {"answer": None},
    "a_nested_answer": {"answer": {"a": [[["2"]]]}}, "a_list_reference": ["2"], "a_number_reference": 2,
    "no_reference": None, "a_reference_without_answer": {"solution": "2"},
}


def _right_row(domain: str) -> dict:
    """A row of `domain` whose completion is right."""
    from rlvr_factory.domains import ExtractionDomain

    if domain == "extraction":
        task = ExtractionDomain(splits={"train": 1}).generate_tasks()[0]
        return {"completion": ExtractionDomain.demonstration(None, task), "reference": task.reference}  # type: ignore[arg-type]
    return {"completion": "\\boxed{4}", "reference": {"answer": "4", **({"domain": "arithmetic"} if domain == "mix" else {})}}


@pytest.mark.parametrize("domain", ["math", "gsm8k", "arithmetic", "extraction", "mix"])
def test_a_malformed_reference_is_one_error_row_and_every_row_after_it_is_written(tmp_path, domain):
    rows = [{"id": name, "completion": "\\boxed{2}", "reference": reference}
            for name, reference in MALFORMED_REFERENCES.items()]
    data = "".join(json.dumps(r) + "\n" for r in [*rows, _right_row(domain)])
    result, out = _verify_bytes(tmp_path, data.encode(), "--domain", domain, "--workers", "1")
    assert "Traceback" not in result.stderr and result.returncode == 1
    assert [r["status"] for r in out] == ["error"] * len(rows) + ["ok"]
    assert out[-1]["correct"] and all(r["message"].startswith("invalid reference") for r in out[: len(rows)])


def test_nan_and_infinity_in_an_input_row_make_it_an_error_row(tmp_path):
    data = b'{"id": NaN, "completion": "\\\\boxed{4}", "reference": {"answer": "4"}}\n' \
           b'{"id": 1, "completion": "\\\\boxed{4}", "reference": {"answer": "4"}, "w": 1e999}\n' + GOOD.encode() + b"\n"
    result, out = _verify_bytes(tmp_path, data, "--workers", "1")
    assert [r["status"] for r in out] == ["error", "error", "ok"], result.stderr
    assert "NaN is not a number JSON allows" in out[0]["message"] and "out of a float's range" in out[1]["message"]
