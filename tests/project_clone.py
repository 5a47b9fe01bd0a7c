"""A fresh clone of this project at a tiny size: every file git tracks (or would track), the tiny
parameters written into `conf/base`, committed in a new repository. What a user gets from
`git clone`, shrunk so a whole run takes seconds."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.pipelines.conftest import PROJECT_ROOT, TINY_PARAMS
from tests.test_dvc import environment, git, write_params

RESULTS = PROJECT_ROOT / "scripts/results.py"


def project_files() -> list[str]:
    """The files a clone of the working tree holds: tracked, or untracked and not ignored."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=PROJECT_ROOT,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    return [path for path in listed if (PROJECT_ROOT / path).is_file()]


def clone_tiny_project(repo: Path) -> Path:
    """The project's files in `repo`, with TINY_PARAMS in conf/base, committed on `main`; without the
    default configuration's dvc.lock, which records results the tiny one does not write."""
    for path in (p for p in project_files() if p != "dvc.lock"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(PROJECT_ROOT / path, repo / path)
    write_params(repo, TINY_PARAMS)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tiny project")
    return repo


def results(repo: Path, *args: str) -> subprocess.CompletedProcess:
    """`python scripts/results.py <args>` on `repo`, as a user runs it there."""
    env = environment() | {"PYTHONPATH": str(repo / "src")}
    return subprocess.run([sys.executable, str(repo / "scripts/results.py"), *args], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=1800)


def user_environment() -> dict[str, str]:
    """A new user's shell in a clone: nothing that turns telemetry off, no MLflow override."""
    skip = ("DO_NOT_TRACK", "KEDRO_DISABLE_TELEMETRY", "MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI", "KEDRO_ENV",
            "TQDM_DISABLE", "THP_MEM_ALLOC_ENABLE")
    return {k: v for k, v in environment().items() if k not in skip} | {"PYTHONPATH": "src"}


@dataclass
class RefreshedProject:
    """A tiny clone whose dvc.lock and results come from `results.py refresh`, committed."""

    repo: Path
    check_before: subprocess.CompletedProcess  # `check --fast` on the clone as it came
    refresh: subprocess.CompletedProcess


def refreshed_project(repo: Path) -> RefreshedProject:
    """Clone the tiny project into `repo`, refresh its results and commit what refresh names."""
    clone_tiny_project(repo)
    before = results(repo, "check", "--fast")
    done = results(repo, "refresh")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    git(repo, "add", *done.stdout.rsplit("git add ", 1)[1].split(" && ")[0].split())
    git(repo, "commit", "-q", "-m", "results")
    return RefreshedProject(repo, before, done)
