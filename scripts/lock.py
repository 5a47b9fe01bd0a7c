"""The locked environment: every package a run needs, and every package the tests add, pinned
with its hashes, so the same commit installs the same library code next month.

    python scripts/lock.py           # re-resolve after editing pyproject.toml's dependencies
    python scripts/lock.py --upgrade # move every pin to the newest release allowed
    python scripts/lock.py check     # fail, naming the requirement, when a lock disagrees

`requirements.lock` holds what a run needs (the project's dependencies with the CPU torch,
`scripts/install.sh`); `requirements-test.lock` adds the test tools (`scripts/test.sh`). Both are
resolved by uv (`pip install uv`) for CPython 3.11 on x86_64 Linux; the runtime lock is resolved
under the test lock, so the test install only adds packages. A re-resolve keeps every pin that
pyproject.toml still allows. The CPU torch wheel comes from `$PIP_FIND_LINKS` (this machine's
wheel directory) or an index uv is given (`UV_EXTRA_INDEX_URL`, PyTorch's CPU index elsewhere).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
RUNTIME_LOCK = "requirements.lock"
TEST_LOCK = "requirements-test.lock"
# The extras each lock holds: scripts/install.sh's and scripts/test.sh's.
EXTRAS = {RUNTIME_LOCK: ("cpu",), TEST_LOCK: ("cpu", "dev", "data", "notebook", "ui", "ray", "viz", "cad", "reasoning-gym", "textarena", "skyrl-gym", "openenv")}
PYTHON = "3.11"
PLATFORM = "x86_64-manylinux_2_36"  # this Debian image's glibc; cadquery-ocp needs 2.35
COMMAND = "python scripts/lock.py"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def pins(lock_text: str) -> dict[str, str]:
    """The lock's pinned versions by canonical package name."""
    return {canonicalize_name(m[1]): m[2] for line in lock_text.splitlines() if (m := _PIN.match(line))}


def direct(lock_text: str) -> set[str]:
    """The packages the lock holds because pyproject.toml asks for them (uv's `# via` notes)."""
    names, current = set(), None
    for line in lock_text.splitlines():
        if m := _PIN.match(line):
            current = canonicalize_name(m[1])
        elif current and "rlvr-factory (pyproject.toml)" in line:
            names.add(current)
    return names


def requirements(pyproject: dict, extras: tuple[str, ...]) -> list[Requirement]:
    """The project's dependencies plus those of the given extras."""
    project = pyproject["project"]
    listed = list(project["dependencies"])
    for extra in extras:
        listed += project["optional-dependencies"][extra]
    return [Requirement(r) for r in listed]


def disagreements(pyproject: dict, locks: dict[str, str]) -> list[str]:
    """Each way the locks disagree with pyproject.toml or with each other, in words."""
    problems = []
    for name, text in locks.items():
        pinned = pins(text)
        wanted = requirements(pyproject, EXTRAS[name])
        for req in wanted:
            version = pinned.get(canonicalize_name(req.name))
            if version is None:
                problems.append(f"{name} has no pin for `{req}` of pyproject.toml")
            elif not req.specifier.contains(version, prereleases=True):
                problems.append(f"{name} pins {req.name}=={version}, which `{req}` of pyproject.toml excludes")
        stale = direct(text) - {canonicalize_name(r.name) for r in wanted}
        problems += [f"{name} holds {n}, which pyproject.toml no longer asks for" for n in sorted(stale)]
    runtime, test = pins(locks[RUNTIME_LOCK]), pins(locks[TEST_LOCK])
    problems += [f"{RUNTIME_LOCK} pins {n}=={v} but {TEST_LOCK} pins {n}=={test.get(n)}"
                 for n, v in sorted(runtime.items()) if test.get(n) != v]
    return problems


def _uv() -> list[str]:
    if exe := shutil.which("uv"):
        return [exe]
    sys.exit("uv is not installed: `pip install uv`, then run `python scripts/lock.py` again")


def compile_lock(name: str, upgrade: bool) -> None:
    """Resolve one lock with uv, keeping the pins it already has unless `upgrade`."""
    cmd = [*_uv(), "pip", "compile", "pyproject.toml", "--quiet", "--generate-hashes",
           "--python-version", PYTHON, "--python-platform", PLATFORM,
           "--custom-compile-command", COMMAND, "-o", name]
    cmd += [a for extra in EXTRAS[name] for a in ("--extra", extra)]
    cmd += [a for links in os.environ.get("PIP_FIND_LINKS", "").split() for a in ("--find-links", links)]
    if name != TEST_LOCK:
        cmd += ["--constraints", TEST_LOCK]
    if upgrade:
        cmd.append("--upgrade")
    subprocess.run(cmd, cwd=ROOT, check=True)


def read_locks() -> dict[str, str]:
    """The committed locks' text; a missing one is an error naming the command that writes it."""
    missing = [name for name in EXTRAS if not (ROOT / name).exists()]
    if missing:
        sys.exit(f"{', '.join(missing)} missing: run `{COMMAND}`")
    return {name: (ROOT / name).read_text() for name in EXTRAS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", nargs="?", choices=["write", "check"], default="write")
    parser.add_argument("--upgrade", action="store_true", help="move every pin to the newest allowed release")
    args = parser.parse_args()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    if args.action == "write":
        for name in (TEST_LOCK, RUNTIME_LOCK):  # the runtime lock is resolved under the test lock
            compile_lock(name, args.upgrade)
    problems = disagreements(pyproject, read_locks())
    if problems:
        sys.exit("the locks disagree with pyproject.toml:\n  " + "\n  ".join(problems) + f"\nRe-lock: {COMMAND}")
    print(f"{RUNTIME_LOCK} and {TEST_LOCK} agree with pyproject.toml")


if __name__ == "__main__":
    main()
