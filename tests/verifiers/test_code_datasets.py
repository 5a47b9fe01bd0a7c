"""Acceptance on real data: HumanEval's canonical solutions pass and stubs fail; MBPP's references pass.

A sample of each runs by default; the full sets run under `-m slow` (and in `benchmarks/sandbox.py`).
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from rlvr_factory.verifiers.code import CodeVerifier
from tests.sandbox.procs import needs_bwrap

DATA = Path(os.environ.get("RLVR_SHARED_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))
HUMANEVAL, MBPP = DATA / "humaneval" / "HumanEval.jsonl.gz", DATA / "mbpp" / "sanitized.jsonl"
pytestmark = needs_bwrap


def _humaneval() -> list[dict]:
    if not HUMANEVAL.exists():
        pytest.skip(f"HumanEval is not at {HUMANEVAL} (set RLVR_SHARED_DATA)")
    with gzip.open(HUMANEVAL, "rt") as rows:
        return [json.loads(row) for row in rows]


def _mbpp() -> list[dict]:
    if not MBPP.exists():
        pytest.skip(f"sanitized MBPP is not at {MBPP} (set RLVR_SHARED_DATA)")
    return [json.loads(row) for row in MBPP.read_text().splitlines()]


def _gold(row: dict) -> str:
    if "entry_point" in row:
        return json.dumps({"format": "humaneval", "prompt": row["prompt"], "test": row["test"],
                           "entry_point": row["entry_point"]})
    return json.dumps({"format": "mbpp", "test_list": row["test_list"], "test_imports": row["test_imports"]})


@pytest.fixture(scope="module")
def verifier():
    v = CodeVerifier()  # the defaults: 3 s per program
    yield v
    v.close()


def _check_humaneval(verifier, rows):
    canonical = [verifier.score(r["canonical_solution"], _gold(r)) for r in rows]
    assert [r["task_id"] for r, s in zip(rows, canonical) if not s.correct] == []
    assert not any(s.breakdown["hack_suspected"] for s in canonical)
    stubs = [verifier.score("    return None\n", _gold(r)) for r in rows]
    assert sum(s.correct for s in stubs) <= 2


def _check_mbpp(verifier, rows, allowed_failures):
    scores = [verifier.score(r["code"], _gold(r)) for r in rows]
    failures = {r["task_id"]: s.status for r, s in zip(rows, scores) if not s.correct}
    assert len(failures) <= allowed_failures, failures


def test_a_sample_of_humaneval(verifier):
    _check_humaneval(verifier, _humaneval()[::3])  # 55 tasks


def test_a_sample_of_mbpp(verifier):
    rows = _mbpp()[::5]  # 52 tasks
    _check_mbpp(verifier, rows, allowed_failures=0)


@pytest.mark.slow
def test_all_of_humaneval(verifier):
    _check_humaneval(verifier, _humaneval())


@pytest.mark.slow
def test_all_of_mbpp(verifier):
    rows = _mbpp()
    _check_mbpp(verifier, rows, allowed_failures=len(rows) // 100)  # at least 99% pass
