"""Experiment tracking with MLflow: where the store lives, what links a run to its code and data,
and the round curves as metric histories. Knows nothing about Kedro."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from importlib import metadata
from collections.abc import Iterable, Mapping
from pathlib import Path

from mlflow import MlflowClient
from mlflow.entities import Metric

DVC_ROOT = "DVC_ROOT"  # set by DVC for every stage command: the repository root, the original one even in a temp copy
DVC_EXP_NAME = "DVC_EXP_NAME"  # set by `dvc exp run` (workspace, --temp and --queue alike)
DVC_EXP_BASELINE_REV = "DVC_EXP_BASELINE_REV"  # the commit an experiment starts from
DVC_STAGE = "DVC_STAGE"  # the stage DVC is running
SQLITE_PREFIX = "sqlite:///"
ENV_LOCK = "requirements.lock"  # the locked runtime environment (scripts/lock.py writes it)
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", re.MULTILINE)


def store_root(project_root: str | Path) -> Path:
    """The directory whose `mlruns/` holds the MLflow store.

    Under DVC it is the DVC repository root (`$DVC_ROOT`), which `dvc exp run --temp/--queue`
    points at the original repository, so runs made in a temporary copy land in the same
    store as all others; otherwise it is the project root.
    """
    return Path(os.environ.get(DVC_ROOT) or project_root).resolve()


def artifact_location(tracking_uri: str) -> str | None:
    """Where a new experiment keeps its artifacts: `artifacts/` beside an SQLite store's file,
    or nothing (the tracking server's default) for any other store."""
    if tracking_uri.startswith(SQLITE_PREFIX):
        return str(Path(tracking_uri[len(SQLITE_PREFIX):]).resolve().parent / "artifacts")
    return None


def _git(root: Path, *args: str, stdin: str | None = None) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, input=stdin, capture_output=True, text=True, timeout=30,
                              check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


CONTENT_CHECKED = ("conf", "src", "pyproject.toml", "dvc.yaml")  # compared by content, not only by git's stat cache


def _dirty(root: Path) -> str:
    """`true` when code or configuration differs from HEAD, `false` when not, `unknown` when git
    cannot tell. Besides `git status`, the configuration and code are compared with HEAD by content,
    so that nothing git's index vouches for (its stat cache, assume-unchanged entries) hides an
    edit: the first stage of an in-place `dvc exp run -S` was seen tagged clean."""
    status = _git(root, "status", "--porcelain", "--", ".", ":(exclude)dvc.lock", ":(exclude)data")
    if status is None:
        return "unknown"
    if status:
        return "true"
    listing = _git(root, "ls-tree", "-r", "HEAD", "--", *CONTENT_CHECKED)
    if listing is None:
        return "unknown"
    committed = {path: meta.split()[2] for meta, path in (line.split("\t", 1) for line in listing.splitlines() if line)}
    paths = [path for path in committed if (root / path).is_file()]
    if len(paths) != len(committed):
        return "true"  # a committed file is gone
    hashes = _git(root, "hash-object", "--stdin-paths", stdin="\n".join(paths))
    if hashes is None:
        return "unknown"
    return str(hashes.split() != [committed[path] for path in paths]).lower()


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def environment_tags(lock: Path) -> dict[str, str]:
    """`env.lock_sha256` (the locked environment's file) and `env.locked` (whether every package
    it pins is installed at exactly that version), or nothing where there is no lock."""
    if not lock.exists():
        return {}
    text = lock.read_text()
    locked = all(_installed(name) == version for name, version in _PIN.findall(text))
    return {"env.lock_sha256": hashlib.sha256(text.encode()).hexdigest(), "env.locked": str(locked).lower()}


def lineage_tags(project_root: str | Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Tags that lead from a run back to what reproduces it.

    `git.commit` (also as MLflow's own `mlflow.source.git.commit`, which the UI shows),
    `git.dirty` (code or configuration differs from the commit; DVC's own files do not count:
    `dvc.lock`, rewritten as each stage of a `dvc repro` finishes, and the `data/` layers it
    writes, whose state is the lock), `dvc.lock_sha256` (the lock as this run starts), the
    locked environment's `env.lock_sha256` and `env.locked` (see `environment_tags`) and,
    when DVC runs the command, `dvc.stage`, `dvc.exp_name` and `dvc.exp_baseline_rev`.
    """
    root = Path(project_root)
    env = os.environ if environ is None else environ
    tags = {}
    commit = _git(root, "rev-parse", "HEAD")
    if commit:
        tags.update({"git.commit": commit, "mlflow.source.git.commit": commit, "git.dirty": _dirty(root)})
    lock = root / "dvc.lock"
    if lock.exists():
        tags["dvc.lock_sha256"] = hashlib.sha256(lock.read_bytes()).hexdigest()
    tags.update(environment_tags(root / ENV_LOCK))
    for var, tag in ((DVC_STAGE, "dvc.stage"), (DVC_EXP_NAME, "dvc.exp_name"), (DVC_EXP_BASELINE_REV, "dvc.exp_baseline_rev")):
        if env.get(var):
            tags[tag] = env[var]
    return tags


def round_metric_history(round_history: list[dict], prefix: str = "rl") -> dict[str, list[tuple[int, float]]]:
    """Each numeric round statistic as `<prefix>.<name>`: [(round, value), ...]."""
    history: dict[str, list[tuple[int, float]]] = {}
    for stats in round_history:
        for key, value in stats.items():
            if key != "round" and isinstance(value, (int, float)) and not isinstance(value, bool):
                history.setdefault(f"{prefix}.{key}", []).append((int(stats["round"]), float(value)))
    return history


def log_missing_metrics(run_id: str, history: Mapping[str, Iterable[tuple[int, float]]], client: MlflowClient) -> list[str]:
    """Log each metric's (step, value) points unless the run already has that metric.

    A whole `kedro run` logs the round curves as the rounds finish; a run that only reports
    (a DVC `report` stage) gets them from the persisted history. Returns the names logged.
    """
    present = set(client.get_run(run_id).data.metrics)
    missing = {name: points for name, points in history.items() if name not in present}
    metrics = [Metric(name, value, 0, step) for name, points in missing.items() for step, value in points]
    for start in range(0, len(metrics), 1000):  # MLflow's batch limit
        client.log_batch(run_id, metrics=metrics[start:start + 1000])
    return sorted(missing)
