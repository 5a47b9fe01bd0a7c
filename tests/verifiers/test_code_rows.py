"""Red team: task rows (data, as untrusted as answers) that attack the host through the code verifier.

A row's HumanEval prompt and check, and an MBPP row's test lines, imports and set-up, are run only
in the sandbox, in a fresh judge process per check: a row that writes to the host, reads the
host's environment or files, or leaves state for the next row reaches nothing of the host. The
canaries are paths on the host (under pytest's tmp dir); each check here is honest otherwise. A
row too deep or too large to parse is one `error` score, never an exception.
"""

from __future__ import annotations

import builtins
import json
import math

import pytest

from rlvr_factory.verifiers.code import CodeVerifier
from tests.sandbox.procs import needs_bwrap

ADD = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return 0\n"
PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
CHECK = "def check(candidate):\n    assert candidate(2, 3) == 5\n"


def mbpp(*tests: str, imports: tuple[str, ...] = (), setup: str = "") -> str:
    return json.dumps({"format": "mbpp", "test_list": ["assert add(2, 3) == 5", *tests],
                       "test_imports": list(imports), "test_setup": setup})


def humaneval(prompt: str = PROMPT, test: str = CHECK) -> str:
    return json.dumps({"format": "humaneval", "prompt": prompt, "test": test, "entry_point": "add"})


def write(path) -> str:
    """Python that writes `path` (a host path) and is true."""
    return f"open({str(path)!r}, 'w').write('pwned') > 0"


@pytest.fixture(scope="module")
def verifier():
    v = CodeVerifier(limits={"timeout_s": 3.0, "cpu_s": 3})
    yield v
    v.close()


@pytest.fixture
def canary(tmp_path):
    return tmp_path / "canary.txt"


# -- a row that writes to the host ------------------------------------------------------------------


@needs_bwrap
class TestARowCannotTouchTheHost:
    def test_a_test_line(self, verifier, canary):
        score = verifier.score(ADD, mbpp(f"assert {write(canary)}"))
        assert not canary.exists()
        assert score.status == "ok"

    def test_a_test_import_and_the_set_up(self, verifier, canary):
        other = canary.with_name("other.txt")
        verifier.score(ADD, mbpp(imports=(f"import os; {write(canary)}",), setup=write(other)))
        assert not canary.exists() and not other.exists()

    def test_a_humaneval_prompt(self, verifier, canary):
        verifier.score("    return a + b\n", humaneval(prompt=f"{write(canary)}\n{PROMPT}"))
        assert not canary.exists()

    def test_a_humaneval_check(self, verifier, canary):
        check = f"def check(candidate):\n    {write(canary)}\n    assert candidate(2, 3) == 5\n"
        verifier.score("    return a + b\n", humaneval(test=check))
        assert not canary.exists()

    def test_a_test_line_that_shells_out(self, verifier, canary):
        verifier.score(ADD, mbpp(f"assert __import__('os').system('touch {canary}') == 0 or True"))
        assert not canary.exists()


# -- a row that reads the host ----------------------------------------------------------------------


@needs_bwrap
class TestARowSeesNothingOfTheHost:
    def test_its_environment(self, verifier, monkeypatch):
        monkeypatch.setenv("RLVR_ROW_PROBE", "host")
        # an honest program passes unless the row's line sees the host's variable
        score = verifier.score(ADD, mbpp("assert __import__('os').environ.get('RLVR_ROW_PROBE') != 'host'"))
        assert score.correct

    def test_its_files(self, verifier, tmp_path):
        secret = tmp_path / "secret.txt"
        secret.write_text("hunter2")
        score = verifier.score(ADD, mbpp(f"assert open({str(secret)!r}).read() == 'hunter2'"))
        assert score.breakdown["passed"] == 1.0 and not score.correct

    def test_its_working_directory(self, verifier, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        (tmp_path / "expected.txt").write_text("0")  # what the wrong program returns
        score = verifier.score(WRONG, mbpp("assert add(1, 1) == int(open('expected.txt').read())"))
        assert score.breakdown["passed"] == 0.0


# -- a row that leaves state for the next one ---------------------------------------------------------


@pytest.fixture
def restored():
    """Undo what the old, in-process judge let a row patch in this very process."""
    saved = (math.isclose, builtins.abs)
    yield
    math.isclose, builtins.abs = saved


@needs_bwrap
class TestARowLeavesNothingForTheNext:
    def test_a_patched_module(self, verifier, restored):
        verifier.score(ADD, mbpp(imports=("import math",), setup="math.isclose = lambda *a, **k: True"))
        score = verifier.score(WRONG, mbpp("assert math.isclose(add(1, 1), 2)", imports=("import math",)))
        assert score.breakdown["passed"] == 0.0

    def test_patched_builtins(self, verifier, restored):
        verifier.score(ADD, mbpp(setup="import builtins\nbuiltins.abs = lambda x: 0"))
        score = verifier.score(WRONG, mbpp("assert abs(add(1, 1) - 2) < 1e-9"))
        assert score.breakdown["passed"] == 0.0

    def test_a_file_in_tmp(self, verifier, tmp_path):
        marker = f"/tmp/rlvr-row-state-{tmp_path.name}"
        verifier.score(ADD, mbpp(setup=f"open({marker!r}, 'w').write('1')"))
        score = verifier.score(ADD, mbpp(f"assert not __import__('os').path.exists({marker!r})"))
        assert score.correct


# -- a row too deep or too large to parse -------------------------------------------------------------


class TestAMalformedRowIsAnErrorScore:
    def test_deeply_nested_json(self, verifier):
        score = verifier.score(ADD, "[" * 100_000 + "]" * 100_000)
        assert score.status == "error" and "JSON" in score.message

    def test_a_test_line_too_deep_to_parse(self, verifier):
        score = verifier.score(ADD, mbpp("assert " + "-" * 200_000 + "1"))
        assert score.status == "error" and "not valid Python" in score.message

    def test_a_row_too_large_to_parse(self, verifier):
        score = verifier.score(ADD, mbpp("assert add(1, 1) == 2  # " + "x" * 2_000_000))
        assert score.status == "error" and "characters" in score.message

    def test_test_imports_that_are_not_strings(self, verifier):
        gold = json.dumps({"format": "mbpp", "test_list": ["assert add(1, 1) == 2"], "test_imports": [3]})
        assert verifier.score(ADD, gold).status == "error"


@needs_bwrap
def test_a_set_up_that_fails_in_the_sandbox_is_an_error_score_that_says_why(verifier):
    score = verifier.score(ADD, mbpp(imports=("import no_such_module_here",)))
    assert score.status == "error" and score.reward == 0.0 and "ModuleNotFoundError" in score.message
