"""The code judge: assert counting, describing any value within bounds, and a judge its program cannot reach."""

from __future__ import annotations

import ast
import collections
import decimal
import fractions
import json
import time

import pytest

from rlvr_factory.sandbox.agent import Remote
from rlvr_factory.verifiers.code import CodeVerifier
from rlvr_factory.verifiers.code_judge import describe, instrument
from tests.sandbox.procs import needs_bwrap

PLAIN = [0, -5, True, None, 1.5, float("nan"), 2j, "abc", "a'b\"c", "\ud800", b"\xff\x00", bytearray(b"xy"),
         [1, [2, [3]]], (1,), (), (1, 2), {1: 2, "a": [3]}, set(), {1}, frozenset(), frozenset({2}), [], {},
         "x" * 200, list(range(100)), decimal.Decimal("1.50"), decimal.Decimal("-0.001"), decimal.Decimal("NaN"),
         fractions.Fraction(3, 4), collections.deque([1, 2]), collections.Counter("aab")]


class TestDescribe:
    @pytest.mark.parametrize("value", PLAIN, ids=range(len(PLAIN)))
    def test_a_plain_value_is_its_repr_cut_to_the_limit(self, value):
        assert describe(value) == repr(value)[:80]

    def test_huge_values_are_described_without_being_printed(self):
        nested = []
        for _ in range(100_000):
            nested = [nested]
        values = ["y" * 50_000_000, list(range(5_000_000)), {i: i for i in range(1_000_000)}, nested]
        started = time.perf_counter()
        shown = [describe(v) for v in values]
        assert time.perf_counter() - started < 0.1
        assert all(len(s) == 80 for s in shown) and shown[3] == "[" * 80
        assert describe(10 ** 100_000) == "<int of 332193 bits>"

    def test_other_objects_are_named_by_their_type_and_nothing_of_theirs_runs(self):
        class Hostile:
            def __repr__(self):
                raise RuntimeError("never called")

        assert describe(Hostile()) == "<Hostile object>"
        assert describe(Remote(1, "Evil" * 100, True)) == "<sandboxed " + ("Evil" * 100)[:69]
        assert describe([Hostile()], limit=10) == "[<Hostile "


class TestInstrument:
    def test_every_assert_is_counted_in_field_order_inside_compound_statements(self):
        source = ("def check(c):\n    assert c(1)\n    for x in range(2):\n        assert c(2)\n    else:\n"
                  "        assert c(3)\n    try:\n        assert c(4)\n    except ValueError:\n        assert c(5)\n"
                  "    finally:\n        assert c(6)\n    match 1:\n        case 1:\n            assert c(7)\n")
        tree, count = instrument(source, first=10)
        numbered = {}  # the argument of c in each rewritten assert -> its number
        for node in ast.walk(tree):
            for body in [getattr(node, name) for name in ("body", "orelse", "finalbody") if isinstance(
                    getattr(node, name, None), list)]:
                for attempt, record in zip(body, body[1:]):
                    if isinstance(attempt, ast.Try) and isinstance(record, ast.Expr):
                        test = attempt.body[0].value.args[0]
                        numbered[test.args[0].value] = record.value.args[0].value
        assert count == 7 and numbered == {k: 9 + k for k in range(1, 8)}
        compile(tree, "<t>", "exec")

    def test_a_diagnosed_comparison_keeps_its_left_side(self):
        seen = []

        class Verdict:
            def begin(self, index):
                pass

            def left(self, index, value):
                seen.append(value)
                return value

            def failed(self, index, error):
                return False

            def record(self, index, ok):
                seen.append(ok)

        tree, count = instrument("assert 2 + 2 == 5", first=7, diagnose=True)
        exec(compile(tree, "<t>", "exec"), {"_rlvr_": Verdict()})
        assert count == 1 and seen == [4, False]


ADD = {"format": "mbpp", "test_list": ["assert add(1, 2) == 'refused'"], "test_imports": []}


@pytest.fixture(scope="module")
def verifier():
    v = CodeVerifier(limits={"timeout_s": 3.0, "cpu_s": 3})
    yield v
    v.close()


def refused(verifier, body: str) -> bool:
    """Whether `body` (the body of add(a, b), which returns 'refused' when its attempt failed) was refused."""
    program = f"import ctypes, os, signal\ndef add(a, b):\n{body}"
    return verifier.score(f"```python\n{program}```", json.dumps(ADD)).correct


@needs_bwrap
class TestTheJudgeIsOutOfTheProgramsReach:
    def test_its_memory(self, verifier):
        assert refused(verifier, "    try:\n        open(f'/proc/{os.getppid()}/mem', 'rb').read(1)\n"
                                 "        return 'read'\n    except OSError:\n        return 'refused'\n")

    def test_its_descriptors(self, verifier):
        assert refused(verifier, "    try:\n        os.listdir(f'/proc/{os.getppid()}/fd')\n        return 'listed'\n"
                                 "    except OSError:\n        return 'refused'\n")

    def test_tracing_it(self, verifier):
        assert refused(verifier, "    libc = ctypes.CDLL(None, use_errno=True)\n"
                                 "    return 'refused' if libc.ptrace(16, os.getppid(), 0, 0) == -1 else 'traced'\n")

    def test_the_program_keeps_only_its_stdio_and_its_two_pipes(self, verifier):
        assert refused(verifier, "    fds = os.listdir('/proc/self/fd')\n"  # the listing's own descriptor too
                                 "    return 'refused' if len(fds) == 6 else fds\n")

    def test_the_program_s_memory_never_holds_the_tests(self, verifier):
        task = {"format": "mbpp", "test_imports": [],
                "test_list": ["assert add(1, 2) == 'refused'", "assert 'the-hidden-answer' != 'x'"]}
        program = ("import gc\ndef add(a, b):\n    hidden = 'the-hidden-' + 'answer'\n"
                   "    seen = any(isinstance(o, str) and hidden in o and o is not hidden for o in gc.get_objects())\n"
                   "    return 'seen' if seen else 'refused'\n")
        score = verifier.score(f"```python\n{program}```", json.dumps(task))
        assert score.breakdown["passed"] == 2.0
