"""Huge pages for PyTorch's CPU allocations: importing the project turns them on before torch allocates
(rlvr_factory/__init__.py), the environment can turn them off, and a process that allocated first is
told (benchmarks/cpu_allocator.py measures what they save)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import rlvr_factory

THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
pytestmark = pytest.mark.skipif(not THP.exists() or "[never]" in THP.read_text(),
                                reason="the kernel has no transparent huge pages (not Linux, or THP set to never)")
SRC = str(Path(__file__).resolve().parents[1] / "src")


def _run(code: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    done = subprocess.run([sys.executable, "-c", code], env=clean | {"PYTHONPATH": SRC} | env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _probe(code: str, **env: str) -> str:
    return _run(code, **env).stdout.strip()


def test_importing_the_project_turns_huge_pages_on_before_torch_allocates():
    assert _probe("import rlvr_factory, torch, os; print(rlvr_factory.cpu_huge_pages(), os.environ['THP_MEM_ALLOC_ENABLE'])") == "True 1"
    # also when torch and transformers were imported first, as tests/conftest.py and notebooks do
    assert _probe("import torch, transformers; import rlvr_factory; print(rlvr_factory.cpu_huge_pages())") == "True"


def test_the_environment_turns_them_off():
    assert _probe("import rlvr_factory; print(rlvr_factory.cpu_huge_pages())", THP_MEM_ALLOC_ENABLE="0") == "False"


def test_a_tensor_allocated_before_the_import_keeps_them_off_and_the_run_warns():
    code = ("import logging, torch; torch.ones(8); import rlvr_factory; from rlvr_factory.hooks import RunConsoleHook; "
            "from kedro.pipeline import Pipeline; logging.basicConfig(level=logging.INFO, format='%(message)s'); "
            "print(rlvr_factory.cpu_huge_pages(), flush=True); "
            "RunConsoleHook().before_pipeline_run({}, Pipeline([]), None)")
    done = _run(code)
    output = " ".join((done.stdout + done.stderr).split())  # the logger may wrap the message
    assert done.stdout.splitlines()[0] == "False"
    assert "get no huge pages in this process" in output and "export THP_MEM_ALLOC_ENABLE=1" in output


def test_this_test_process_has_them():
    # tests/conftest.py imports the project first, so the suite samples with huge pages too
    assert rlvr_factory.cpu_huge_pages() is True
