#!/usr/bin/env python
"""Keep the committed results true to the code: the results kept in git (the `cache: false`
outputs and metrics of dvc.yaml: metrics.json, summary.json, round_curves.csv) must be what HEAD
writes, and `dvc.lock` must record HEAD's commands, parameters and code and those results.

    python scripts/results.py check --fast   # seconds: dvc.lock against the tree's code, parameters and results
    python scripts/results.py check          # also reproduce HEAD in a fresh clone and compare
    python scripts/results.py refresh        # reproduce HEAD in a fresh clone and bring its results here

Both reproductions run `dvc repro report` (the default run's stages) on the base configuration (`kedro run --env=base`,
writing data/envs/base, where no other run writes) in a temporary clone of HEAD
(about 6 minutes on 2 CPU cores). The data outputs kept in the DVC cache (models, tables) are
not compared: `check` names those a reproduction did not write byte for byte, as information.
`refresh` shares this repository's DVC cache and MLflow store with the clone, checks its outputs
out here afterwards (replacing what `data/envs/base` held, so `dvc status` is clean) and prints the
`git add` that commits the new results, with `data/envs/base/08_reporting/results_cpu.json`: the CPU that
computed them. Floating-point results are reproducible byte for byte on one kind of CPU (its vendor and
the instruction set torch's kernels use: AVX2, AVX-512, ...), not across kinds: a different kind sums in
another order, and the last bits differ (measured: the base model pre-trained on an AVX2 AMD EPYC differs
from the one an earlier machine wrote for the same commit, and every stage after it with it). So `check`
on another kind of CPU than the committed one names the results that differ as information, not
drift; code, parameters and commands must still match everywhere. Exit status: 0 when everything matches, 1 when something drifted (each drift is
named), 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
LOCK = "dvc.lock"
DATA = "data/"
# The default run (`kedro run --pipeline=rlvr`): the report stage and every stage upstream of it. The
# preference stages (reward model, DPO: their own pipelines) are reproduced on demand, `dvc repro preference`.
TARGET = "report"
CPU = "data/envs/base/08_reporting/results_cpu.json"  # the kind of CPU that computed the committed results
CPU_KIND = ("machine", "vendor", "torch_cpu_capability")  # what decides the bytes; the model name is information


def cpu_fingerprint() -> dict[str, str]:
    """This machine's kind of CPU: architecture, vendor, the instruction set torch dispatches to, model name."""
    import platform

    import torch

    info = {"machine": platform.machine(), "vendor": "", "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "model": ""}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "vendor_id" and not info["vendor"]:
                info["vendor"] = value.strip()
            elif key.strip() == "model name" and not info["model"]:
                info["model"] = value.strip()
    except OSError:  # not Linux: the architecture and torch's instruction set still tell kinds apart
        pass
    return info


def same_kind(a: dict | None, b: dict) -> bool:
    """Whether two fingerprints are the same kind of CPU (a missing one is taken to be: compare strictly)."""
    return a is None or all(a.get(k) == b.get(k) for k in CPU_KIND)


def _kind(fingerprint: dict) -> str:
    return f"{fingerprint.get('vendor') or '?'} {fingerprint.get('model') or ''} ({fingerprint.get('machine')}, " \
           f"torch kernels {fingerprint.get('torch_cpu_capability')})".replace("  ", " ")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command; its output, or SystemExit with the command's output when it fails."""
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
        raise SystemExit(f"results: `{' '.join(args)}` failed with status {done.returncode} in {cwd}")
    return done.stdout


def git_kept(repo: Path) -> list[str]:
    """The outputs and metrics dvc.yaml keeps in git (`cache: false`), in order."""
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    kept = []
    for stage in stages.values():
        for entry in [*stage.get("outs", []), *stage.get("metrics", [])]:
            if isinstance(entry, dict):
                kept += [path for path, options in entry.items() if options and options.get("cache") is False]
    return kept


def lock_drift(repo: Path) -> list[str]:
    """What in the tree no longer matches dvc.lock: a stage's command, code or parameters, or a
    result kept in git. Data that is not in git (absent in a fresh clone) is not compared."""
    if not (repo / LOCK).exists():
        return [f"there is no {LOCK}: run `python scripts/results.py refresh` and commit what it prints"]
    kept = set(git_kept(repo))
    status = json.loads(_run(["dvc", "status", "--with-deps", TARGET, "--json"], repo, _dvc_env()) or "{}")
    drift = []
    for stage, changes in status.items():
        for change in changes:
            if isinstance(change, str):
                drift.append(f"stage {stage}: {change}")
                continue
            for kind, paths in change.items():
                for path, state in paths.items():
                    if isinstance(state, dict):  # a parameters file: {key: state}
                        drift += [f"stage {stage}: parameter {key} ({path}) {s} since {LOCK} was written"
                                  for key, s in state.items()]
                    elif path in kept or (kind == "changed deps" and not path.startswith(DATA)):
                        drift.append(f"stage {stage}: {path} {state} since {LOCK} was written")
    return sorted(set(drift))


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key, sub in value.items() for k, v in _leaves(sub, f"{prefix}{key}.").items()}
    if isinstance(value, list):
        return {k: v for i, sub in enumerate(value) for k, v in _leaves(sub, f"{prefix}{i}.").items()}
    return {prefix.rstrip("."): value}


def describe_difference(path: str, committed: bytes, written: bytes, limit: int = 8) -> str:
    """How the file HEAD writes differs from the committed one: the changed values of a JSON or
    YAML file (up to `limit`), else that the bytes differ."""
    load = json.loads if path.endswith(".json") else yaml.safe_load if path.endswith((".yaml", ".yml", ".lock")) else None
    try:
        old, new = _leaves(load(committed)), _leaves(load(written))
    except (TypeError, ValueError, yaml.YAMLError):  # not structured (load is None), or unreadable
        return f"{path}: HEAD writes different bytes"
    changed = [f"{k}: committed {old.get(k, '(none)')}, HEAD writes {new.get(k, '(none)')}"
               for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)]
    if not changed:
        return f"{path}: same values, different bytes (formatting)"
    more = f" (and {len(changed) - limit} more)" if len(changed) > limit else ""
    return f"{path}: " + "; ".join(changed[:limit]) + more


def _committed(repo: Path, path: str) -> bytes | None:
    done = subprocess.run(["git", "show", f"HEAD:{path}"], cwd=repo, capture_output=True)
    return done.stdout if done.returncode == 0 else None


def _lock_entries(lock: bytes) -> tuple[dict[str, Any], set[str]]:
    """A lock's entries by name (`<stage> cmd`, `<stage> params <file>`, `<stage> deps|outs <path>`)
    and the names of its entries for data (`data/...`), whose hashes are what the last
    reproduction happened to write."""
    entries, data = {}, set()
    for stage, record in (yaml.safe_load(lock).get("stages") or {}).items():
        entries[f"{stage} cmd"] = record.get("cmd")
        entries |= {f"{stage} params {path}": values for path, values in (record.get("params") or {}).items()}
        for kind in ("deps", "outs"):
            for item in record.get(kind) or []:
                name = f"{stage} {kind} {item['path']}"
                entries[name] = item.get("md5")
                if item["path"].startswith(DATA):
                    data.add(name)
    return entries, data


def is_result_drift(line: str, kept: list[str]) -> bool:
    """Whether a drift line is about a result's value (a kept file, or its hash in the lock: as the out of the stage
    that writes it, or as the dep of a stage that reads it), not code or parameters."""
    return any(line.startswith(f"{path}:") for path in kept) or (
        line.startswith(f"{LOCK}: ") and any(f" outs {path}:" in line or f" deps {path}:" in line for path in kept))


def compare(clone: Path) -> tuple[list[str], list[str]]:
    """How the lock and results a reproduction wrote in `clone` differ from those its HEAD
    commits: (drift, outputs not reproduced byte for byte).

    Drift is a result kept in git that HEAD writes differently, or a lock entry for a command,
    parameters, code or one of those results. The other data outputs (models, tables, kept in
    the DVC cache, not in git) differ only as the second list: information, not drift.
    """
    kept = git_kept(clone)
    drift, unstable = [], []
    for path in kept:
        committed, written = _committed(clone, path), (clone / path)
        if not written.exists():
            drift.append(f"{path}: the reproduction did not write it")
        elif committed is None:
            drift.append(f"{path}: not committed; HEAD writes it")
        elif committed != written.read_bytes():
            drift.append(describe_difference(path, committed, written.read_bytes()))
    committed_lock = _committed(clone, LOCK)
    if committed_lock is None:
        return drift + [f"{LOCK}: not committed"], unstable
    old, data = _lock_entries(committed_lock)
    new, _ = _lock_entries((clone / LOCK).read_bytes())
    for name in sorted(old.keys() | new.keys()):
        if old.get(name) == new.get(name):
            continue
        if name in data and not any(name.endswith(f" {path}") for path in kept):
            unstable.append(name.split(" ", 2)[2])
        else:
            drift.append(f"{LOCK}: {name}: committed {old.get(name, '(none)')}, HEAD writes {new.get(name, '(none)')}")
    return drift, sorted(set(unstable))


def _dvc_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DVC_")}
    return env | {"DVC_NO_ANALYTICS": "1", "KEDRO_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "true",
                  "MLFLOW_DISABLE_TELEMETRY": "true", "TQDM_DISABLE": "1"} | extra


def reproduce(repo: Path, workdir: Path, share_with_repo: bool) -> Path:
    """A fresh clone of `repo`'s HEAD in `workdir`, reproduced from scratch with `dvc repro`.

    The clone runs its own code (`PYTHONPATH=src`). With `share_with_repo`, its outputs go to
    `repo`'s DVC cache and its MLflow runs to `repo`'s store.
    """
    clone = workdir / "clone"
    _run(["git", "clone", "--quiet", str(repo), str(clone)], workdir)
    shared_data = os.environ.get("RLVR_SHARED_DATA") or str((repo / "../shared/data").resolve())
    env = _dvc_env(PYTHONPATH=str(clone / "src"), RLVR_SHARED_DATA=shared_data)
    env.pop("MLFLOW_TRACKING_URI", None)
    if share_with_repo:
        _run(["dvc", "cache", "dir", "--local", str(repo / ".dvc/cache")], clone, env)
        env["MLFLOW_TRACKING_URI"] = f"sqlite:///{repo}/mlruns/mlflow.db"
    print(f"results: reproducing {_head(repo)[:12]} from scratch in {clone} (dvc repro)", file=sys.stderr)
    subprocess.run(["dvc", "repro", TARGET], cwd=clone, env=env, check=False, stdout=sys.stderr)  # its progress: stderr
    if not (clone / LOCK).exists():
        raise SystemExit(f"results: `dvc repro` in {clone} did not finish (see its output above)")
    return clone


def _head(repo: Path) -> str:
    return _run(["git", "rev-parse", "HEAD"], repo).strip()


def _warn_if_dirty(repo: Path) -> None:
    if _run(["git", "status", "--porcelain", "--untracked-files=no"], repo).strip():
        print("results: the working tree has uncommitted changes; this reproduces HEAD without them", file=sys.stderr)


def check(repo: Path, fast: bool) -> int:
    """Exit status 0 when dvc.lock and the results kept in git are what HEAD writes, else 1."""
    drift = lock_drift(repo)
    if not drift and not fast:
        _warn_if_dirty(repo)
        with tempfile.TemporaryDirectory(prefix="rlvr-results-") as workdir:
            drift, unstable = compare(reproduce(repo, Path(workdir), share_with_repo=False))
        if unstable:
            print("results: not reproduced byte for byte (kept in the DVC cache, not in git; not drift):",
                  ", ".join(unstable), file=sys.stderr)
        committed_cpu, here = _committed(repo, CPU), cpu_fingerprint()
        committed_cpu = json.loads(committed_cpu) if committed_cpu else None
        other_kind = [d for d in drift if is_result_drift(d, git_kept(repo))] if not same_kind(committed_cpu, here) else []
        if other_kind:
            print(f"results: the committed results were computed on {_kind(committed_cpu)}; this is {_kind(here)}, "
                  "another kind of CPU, whose floating-point sums differ in the last bits. Not drift (code, parameters "
                  "and commands match); what this CPU writes instead:", *(f"  {d}" for d in other_kind), sep="\n",
                  file=sys.stderr)
            drift = [d for d in drift if d not in other_kind]
    if drift:
        print("results: the committed results are not what HEAD writes:", *(f"  {d}" for d in drift),
              "Refresh them: python scripts/results.py refresh (then commit what it prints)", sep="\n", file=sys.stderr)
        return 1
    print(f"results: {LOCK} and {', '.join(git_kept(repo))} match HEAD"
          + (" (code, parameters and committed results; `check` without --fast also re-runs it)" if fast else ""))
    return 0


def refresh(repo: Path) -> int:
    """Reproduce HEAD in a fresh clone, bring its dvc.lock and results here and check the
    outputs out of the shared cache; prints the `git add` that commits them."""
    _warn_if_dirty(repo)
    with tempfile.TemporaryDirectory(prefix="rlvr-results-") as workdir:
        clone = reproduce(repo, Path(workdir), share_with_repo=True)
        # and the .gitignore entries DVC writes beside its cached outputs (so `git status` stays clean)
        ignores = sorted(str(p.relative_to(clone)) for p in (clone / DATA).rglob(".gitignore"))
        files = [LOCK, *git_kept(repo), *ignores]
        for path in files:
            (repo / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(clone / path, repo / path)
    (repo / CPU).write_text(json.dumps(cpu_fingerprint(), indent=2) + "\n")
    files.append(CPU)
    _run(["dvc", "checkout", "--force", "--with-deps", TARGET], repo, _dvc_env())
    print(f"results: refreshed for {_head(repo)[:12]}; commit them with\n"
          f"  git add {' '.join(files)} && git commit -m 'Results of {_head(repo)[:12]}'")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="results.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository (default: this one)")
    commands = parser.add_subparsers(dest="command", required=True)
    check_parser = commands.add_parser("check", help="exit 1 when dvc.lock or a committed result drifted from HEAD")
    check_parser.add_argument("--fast", action="store_true", help="compare with dvc.lock only, without re-running")
    commands.add_parser("refresh", help="reproduce HEAD and bring its dvc.lock and results here")
    args = parser.parse_args(argv)
    repo = args.repo.resolve()
    if not (repo / "dvc.yaml").exists():
        parser.error(f"{repo} has no dvc.yaml; pass the repository with --repo")
    return check(repo, args.fast) if args.command == "check" else refresh(repo)


if __name__ == "__main__":
    sys.exit(main())
