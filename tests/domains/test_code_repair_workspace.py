"""Code-repair test runs: what a failed test's call gave, said in the sandbox and bounded whatever the value,
and a row's tests that never run on the host."""

import json
import time
import tracemalloc

import pytest

from rlvr_factory.domains.code_repair_workspace import Workspace, WorkspaceRunner, render_run
from tests.sandbox.procs import needs_bwrap

pytestmark = needs_bwrap

TESTS = ("assert add(2, 3) == 5",)


@pytest.fixture(scope="module")
def runner():
    return WorkspaceRunner({"limits": {"timeout_s": 5.0, "cpu_s": 5, "memory_mb": 1024}})


def workspace(module: str, tests=TESTS, imports=()) -> Workspace:
    return Workspace({"solution.py": module}, ("solution.py",), tests, tests, tuple(imports))


def observed(runner, module: str) -> tuple[str, float, int]:
    """The visible tests' report on `module`, the seconds the run took, and the peak memory it took here."""
    ws = workspace(module)
    tracemalloc.start()
    started = time.perf_counter()
    try:
        run = runner.run(ws, ws.files, ws.visible_tests)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return render_run(run, 400), time.perf_counter() - started, peak


def test_what_a_call_returned_is_shown_as_its_repr(runner):
    report, _, _ = observed(runner, "def add(a, b):\n    return [a, (b, 'x'), {a: None}]\n")
    assert "FAIL assert add(2, 3) == 5: got [2, (3, 'x'), {2: None}]" in report


class TestAnyValueBecomesABoundedObservation:
    """A value the workspace returns is described in the sandbox: the host never receives it whole."""

    def test_a_huge_string(self, runner):
        report, seconds, peak = observed(runner, "def add(a, b):\n    return 'x' * 40_000_000\n")
        assert "got 'xxxxxxxx" in report and len(report.splitlines()[1]) < 150
        assert peak < 4_000_000 and seconds < 5

    def test_a_huge_list(self, runner):
        report, seconds, peak = observed(runner, "def add(a, b):\n    return list(range(3_000_000))\n")
        assert "got [0, 1, 2, 3, " in report and len(report.splitlines()[1]) < 150
        assert peak < 4_000_000 and seconds < 5

    def test_an_int_too_long_to_print(self, runner):
        report, _, _ = observed(runner, "def add(a, b):\n    return 7 ** 200_000\n")
        assert "got <int of 561471 bits>" in report

    def test_an_object_whose_repr_hangs_or_raises(self, runner):
        module = ("class Hangs:\n    def __repr__(self):\n        while True:\n            pass\n"
                  "class Raises:\n    def __repr__(self):\n        raise RuntimeError('no')\n"
                  "def add(a, b):\n    return [Hangs(), Raises()]\n")
        report, seconds, _ = observed(runner, module)
        assert "got [<sandboxed Hangs object>, <sandboxed Raises object>]" in report and seconds < 5

    def test_text_that_is_not_utf_8(self, runner):
        report, _, _ = observed(runner, "def add(a, b):\n    return ['\\ud800', b'\\xff\\xfe']\n")
        assert "got ['\\ud800', b'\\xff\\xfe']" in report
        report.encode("utf-8")

    def test_an_exception_with_a_huge_message(self, runner):
        report, _, peak = observed(runner, "def add(a, b):\n    raise ValueError('y' * 10_000_000)\n")
        assert "FAIL assert add(2, 3) == 5: raised ValueError: yyyy" in report and peak < 4_000_000


def test_a_test_line_and_its_imports_run_only_in_the_sandbox(runner, tmp_path):
    canary, other = tmp_path / "canary.txt", tmp_path / "other.txt"
    ws = workspace("def add(a, b):\n    return a + b\n",
                   tests=(f"assert open({str(canary)!r}, 'w').write('x') == 1", "assert add(2, 3) == 5"),
                   imports=(f"import os; open({str(other)!r}, 'w').write('x')",))
    run = runner.run(ws, ws.files, ws.visible_tests)
    assert not canary.exists() and not other.exists()
    assert run.score is not None


def test_the_held_out_verdict_records_what_the_start_passed(runner):
    ws = Workspace({"solution.py": "def add(a, b):\n    return a - b\n"}, ("solution.py",), TESTS,
                   ("assert add(0, 0) == 0", "assert add(2, 3) == 5", "assert add(1, 1) == 2"))
    fixed = {"solution.py": "def add(a, b):\n    return a + b\n"}
    assert runner.passed_before(ws) == 1
    score = runner.held_out(ws, fixed).score
    assert score.correct and score.breakdown["passed_before"] == 1.0 and score.breakdown["process"] == 1.0
    assert json.loads(json.dumps(score.breakdown)) == score.breakdown
