"""The sandbox works wherever Python is installed: a fresh virtual environment under /tmp (the
sandbox's own /tmp would hide it), reached through a symlink, with nothing else of /tmp exposed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.sandbox.procs import needs_bwrap

pytestmark = needs_bwrap

SRC = str(Path(__file__).resolve().parents[2] / "src")
HOST_SCRIPT = """
import json, sys
sys.path.insert(0, SRC)
from rlvr_factory.sandbox import Limits, Sandbox
probe = "import json, os, sys; print(json.dumps([sys.prefix, os.path.exists(SECRET), sorted(os.listdir('/tmp'))]))"
report = {}
with Sandbox(limits=Limits(timeout_s=20)) as box:
    first = box.run(["python3", "-c", probe])
    box.run(["sh", "-c", "touch /tmp/left-behind; chmod 0 /tmp/* 2>/dev/null; rm -rf /tmp/* 2>/dev/null; true"])
    again = box.run(["python3", "-c", probe])
    with box.load("def double(x):\\n    return 2 * x\\n") as program:
        report["call"] = program.call("double", 21)
    report.update(first=[first.status, first.exit_code, first.stdout.decode(), first.stderr.decode()],
                  again=[again.status, again.exit_code, again.stdout.decode(), again.stderr.decode()])
print(json.dumps(report))
"""


def _fresh_venv(parent: Path) -> Path:
    venv = parent / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return venv


def _run_host(python: Path, secret: Path) -> dict:
    script = HOST_SCRIPT.replace("SRC", repr(SRC), 1).replace("SECRET", repr(str(secret)), 1)
    done = subprocess.run([str(python), "-c", script], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def scratch():
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="rlvr-venv-test-") as directory:
        yield Path(directory)


def _check(report: dict, prefix: Path) -> None:
    for run in ("first", "again"):  # also after a run that tried to remove the installation's mount point
        status, exit_code, stdout, stderr = report[run]
        assert (status, exit_code) == ("exited", 0), stderr
        seen_prefix, secret_visible, tmp_listing = json.loads(stdout)
        assert seen_prefix == str(prefix) and not secret_visible
        assert tmp_listing == [Path(prefix).relative_to("/tmp").parts[0]]  # the way to the venv, nothing else
    assert report["call"] == 42


def test_a_sandbox_started_from_a_fresh_venv_under_tmp_runs_its_programs(scratch):
    venv = _fresh_venv(scratch)
    secret = scratch / "secret.txt"
    secret.write_text("not for the sandbox")
    _check(_run_host(venv / "bin" / "python", secret), venv)


def test_a_venv_reached_through_a_symlink_works_too(scratch):
    real = _fresh_venv(scratch / "volume")
    link = scratch / "link"
    link.symlink_to(real.parent)
    secret = scratch / "volume" / "secret.txt"
    secret.write_text("not for the sandbox")
    _check(_run_host(link / "venv" / "bin" / "python", secret), link / "venv")
