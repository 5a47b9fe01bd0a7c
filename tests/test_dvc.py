"""`dvc.yaml` on a fresh clone: the stages run, cache, re-run only on what they read, and run as DVC
experiments (in the workspace and in a temporary copy) tracked in MLflow. That a second reproduction
of a commit writes the same bytes is tests/test_results.py's full check."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from tests.pipelines.conftest import PROJECT_ROOT, TINY_PARAMS

pytestmark = pytest.mark.slow

STAGES = ["curate", "base_model", "sft", "rl", "evaluate", "report", "preferences", "reward_model", "preference"]
# Each stage after the stages whose outputs it reads (the RLVR chain, then preferences, RM and DPO).
UPSTREAM = {"base_model": ["curate"], "sft": ["base_model"], "rl": ["sft"], "evaluate": ["rl"], "report": ["evaluate"],
            "preferences": ["base_model"], "reward_model": ["preferences", "sft"], "preference": ["preferences", "evaluate"]}
# What a clone holds: the tracked project files, with data/ and mlruns/ as empty layers.
CLONED = ["conf/base", "conf/logging.yml", "src", "pyproject.toml", "requirements.lock", "dvc.yaml", ".dvc/config", ".dvc/.gitignore",
          ".dvc/plots", ".dvcignore", ".gitignore", ".telemetry"]
RLVR_PARAMS = "conf/base/parameters_rlvr.yml"
EXPERIMENTS = {"lr-low": 1e-4, "lr-high": 1e-2}  # name -> rl.update.lr


def _merge(base: dict, override: dict) -> dict:
    return {k: _merge(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) else v
            for k, v in {**base, **override}.items()}


def write_params(repo: Path, params: dict) -> None:
    """Write nested overrides into the `conf/base/parameters_*.yml` file holding each top-level key."""
    for path in sorted((repo / "conf/base").glob("parameters_*.yml")):
        content = yaml.safe_load(path.read_text())
        if touched := {k: v for k, v in params.items() if k in content}:
            path.write_text(yaml.safe_dump(_merge(content, touched), sort_keys=False))


def environment() -> dict[str, str]:
    """A user's shell in the clone: the clone's own code (a relative PYTHONPATH, so a DVC temp copy
    runs the copy's code) and no MLflow override: the stages must find the store themselves."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_TRACKING", "DVC_"))}
    return env | {"PYTHONPATH": "src", "TQDM_DISABLE": "1", "DVC_NO_ANALYTICS": "1", "KEDRO_DISABLE_TELEMETRY": "1",
                  "DO_NOT_TRACK": "true", "GIT_AUTHOR_NAME": "test", "GIT_AUTHOR_EMAIL": "test@example.com",
                  "GIT_COMMITTER_NAME": "test", "GIT_COMMITTER_EMAIL": "test@example.com"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, env=environment(), check=True, capture_output=True,
                          text=True).stdout.strip()


def dvc(repo: Path, *args: str) -> str:
    """`dvc <args>` in `repo`: its output, or a failure that shows it."""
    done = subprocess.run(["dvc", *args], cwd=repo, env=environment(), capture_output=True, text=True, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0, f"dvc {' '.join(args)} failed ({done.returncode}):\n{output[-6000:]}"
    return output


def stages_run(output: str) -> list[str]:
    return re.findall(r"Running stage '([\w.-]+)'", output)


def in_order(ran: list[str]) -> bool:
    """Every stage ran once, each after the stages it reads from."""
    return sorted(ran) == sorted(STAGES) and all(ran.index(u) < ran.index(s) for s, ups in UPSTREAM.items() for u in ups)


def clone_project(repo: Path) -> Path:
    """The project's tracked files in `repo` with tiny parameters, committed: a fresh clone."""
    for name in CLONED:
        source, target = PROJECT_ROOT / name, repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(source, target)
    for layer in [*(PROJECT_ROOT / "data").glob("0*"), PROJECT_ROOT / "mlruns", PROJECT_ROOT / "conf/local"]:
        (repo / layer.relative_to(PROJECT_ROOT)).mkdir(parents=True, exist_ok=True)
        (repo / layer.relative_to(PROJECT_ROOT) / ".gitkeep").touch()
    # The Model Registry is covered by tests/test_mlflow.py; here each `report` run skips it.
    write_params(repo, _merge(TINY_PARAMS, {"report": {"register_model": False}}))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "tiny project")
    return repo


@dataclass
class Session:
    """What a user's session of DVC commands did, step by step."""

    repo: Path
    ran: dict[str, list[str]] = field(default_factory=dict)
    output: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, bytes] = field(default_factory=dict)
    commits: dict[str, str] = field(default_factory=dict)

    def step(self, name: str, *args: str) -> None:
        self.output[name] = dvc(self.repo, *args)
        self.ran[name] = stages_run(self.output[name])
        self.metrics[name] = (self.repo / "data/envs/base/08_reporting/metrics.json").read_bytes()

    def commit(self, name: str) -> None:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", name)
        self.commits[name] = git(self.repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> Session:
    """Clone, `dvc repro`, again, what one parameter change would re-run, then two
    learning-rate experiments: one in the workspace, one in a temporary copy (`--temp`, the
    executor `--queue` uses too)."""
    s = Session(clone_project(tmp_path_factory.mktemp("dvc") / "repo"))
    s.commits["clone"] = git(s.repo, "rev-parse", "HEAD")
    s.step("repro", "repro")
    s.step("again", "repro")
    s.commit("reproduced")
    for key, value in (("k", 3), ("validation_size", 12)):  # which stages each key makes stale
        write_params(s.repo, {"evaluate": {key: value}})
        s.output[f"status evaluate.{key}"] = dvc(s.repo, "status", "--json")
        git(s.repo, "checkout", "--", "conf")
    for (name, lr), where in zip(EXPERIMENTS.items(), ([], ["--temp"])):
        s.step(name, "exp", "run", *where, "-n", name, "-S", f"{RLVR_PARAMS}:rl.update.lr={lr}")
    s.output["exp show"] = dvc(s.repo, "exp", "show", "--json")
    s.output["exp show --only-changed"] = dvc(s.repo, "exp", "show", "--only-changed", "--md", "--no-pager")
    return s


def _tracking(repo: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{repo}/mlruns/mlflow.db")


def _runs(repo: Path) -> list:
    client = _tracking(repo)
    return client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id], max_results=1000)


def test_repro_in_a_fresh_clone_runs_every_stage_in_order(session):
    assert in_order(session.ran["repro"]), session.ran["repro"]
    lock = yaml.safe_load((session.repo / "dvc.lock").read_text())
    assert set(lock["stages"]) == set(STAGES)
    assert json.loads(session.metrics["repro"])["rounds"] == TINY_PARAMS["rl"]["rounds"]


def test_a_second_repro_runs_nothing(session):
    assert session.ran["again"] == []
    assert "Data and pipelines are up to date" in session.output["again"]


def test_changing_one_parameter_makes_only_the_stages_that_read_it_stale(session):
    # Both keys live in parameters_evaluate.yml: `k` is read by `evaluate` and `preference` (the
    # SFT and DPO policies' pass@k on the test split), the validation
    # set size by `rl` (its per-round validation) and `report` (the SFT baseline on the same tasks),
    # not by `evaluate`. What runs then follows the data: an experiment changing `rl.update.lr`
    # re-runs `rl`, `evaluate` and `report` and nothing upstream.
    changed = {key: json.loads(session.output[f"status evaluate.{key}"]) for key in ("k", "validation_size")}
    k_changed = [{"changed deps": {"conf/base/parameters_evaluate.yml": {"evaluate.k": "modified"}}}]
    assert changed["k"] == {"evaluate": k_changed, "preference": k_changed}
    assert set(changed["validation_size"]) == {"rl", "report"}
    assert session.ran["lr-low"] == ["rl", "evaluate", "report"]


def test_metrics_and_plot_table_are_in_git_and_the_rest_in_the_dvc_cache(session):
    tracked = set(git(session.repo, "ls-files").splitlines())
    assert {"dvc.lock", "data/envs/base/08_reporting/metrics.json", "data/envs/base/08_reporting/summary.json",
            "data/envs/base/08_reporting/plots/round_curves.csv"} <= tracked
    assert not [p for p in tracked if p.startswith("data/") and "/rl_policy/" in p]
    status = git(session.repo, "status", "--porcelain", "--untracked-files=all", "--", "mlruns", "data")
    assert not [line for line in status.splitlines() if line.startswith("??")]  # all else is ignored


def test_dvc_plots_show_renders_the_panels_of_the_round_curve_figure(session, tmp_path):
    dvc(session.repo, "plots", "show", "-o", str(tmp_path))
    page = (tmp_path / "index.html").read_text()
    for title in ("rollout reward and pass rate", "validation greedy accuracy (SFT baseline)", "entropy", "KL",
                  "completion length"):
        assert title in page
    for column in ("reward_mean", "pass_rate", "val_greedy_accuracy", "sft_val_greedy_accuracy", "entropy",
                   "policy_drift_kl", "completion_tokens_mean"):
        assert column in page
    assert "round_curves.png" in page


def test_outputs_push_to_the_default_local_remote_outside_the_repository(session):
    dvc(session.repo, "push")
    remote = session.repo.parent / "rlvr-dvc-remote"  # .dvc/config: ../rlvr-dvc-remote
    assert len([p for p in remote.rglob("*") if p.is_file()]) > 10


def test_experiments_rerun_from_rl_and_dvc_exp_show_tabulates_them(session):
    table = json.loads(session.output["exp show"])
    found = {}
    for baseline in table:
        for experiment in baseline.get("experiments") or []:
            for rev in experiment["revs"]:
                data = rev["data"]
                found[rev["name"]] = (
                    data["params"][RLVR_PARAMS]["data"]["rl"]["update"]["lr"], set(data["metrics"]),
                    data["metrics"]["data/envs/base/08_reporting/summary.json"]["data"],
                )
    for name, lr in EXPERIMENTS.items():
        assert session.ran[name] == ["rl", "evaluate", "report"]
        assert found[name][0] == lr
        assert found[name][1] == {"data/envs/base/08_reporting/summary.json"}  # the table's metrics: the summary only
        assert set(found[name][2]) == {"greedy", "pass@2", "val"} and set(found[name][2]["greedy"]) == {"sft", "rl"}
    # The readable table: the experiments, the parameters they changed and the headline numbers.
    table = session.output["exp show --only-changed"].splitlines()
    header = [c.strip() for c in table[0].strip("|").split("|")]
    assert {"Experiment", "rl.update.lr"} <= set(header)
    assert not [c for c in header if "greedy_accuracy" in c or "difficulty" in c], header  # no report columns
    assert len(header) < 25, header


def test_each_experiment_has_mlflow_runs_in_the_repository_store_tagged_with_its_name_and_commit(session):
    baseline = session.commits["reproduced"]
    for name, lr in EXPERIMENTS.items():
        runs = {r.data.tags["dvc.stage"]: r for r in _runs(session.repo) if r.data.tags.get("dvc.exp_name") == name}
        assert set(runs) == {"rl", "evaluate", "report"}, name
        for run in runs.values():
            assert run.data.tags["git.commit"] == baseline
            assert run.data.tags["dvc.exp_baseline_rev"] == baseline
            assert run.data.tags["git.dirty"] == "true"  # the experiment's parameters differ from the commit
            assert len(run.data.tags["dvc.lock_sha256"]) == 64
            assert float(run.data.params["rl.update.lr"]) == lr
        assert "rl.reward_mean" in runs["report"].data.metrics
    assert not list((session.repo / ".dvc/tmp/exps").rglob("mlflow.db"))  # nothing stranded in a temp copy


def test_the_runs_of_a_clean_repro_are_linked_to_its_commit_and_carry_every_parameter(session):
    runs = [r for r in _runs(session.repo) if r.data.tags.get("git.commit") == session.commits["clone"]]
    assert sorted(r.data.tags["dvc.stage"] for r in runs) == sorted(STAGES)  # one clean repro
    assert {r.data.tags["git.dirty"] for r in runs} == {"false"}  # DVC's own outputs and lock do not count
    curate = next(r for r in runs if r.data.tags["dvc.stage"] == "curate")
    assert curate.data.params["rl.update.lr"] == str(yaml.safe_load(
        (PROJECT_ROOT / RLVR_PARAMS).read_text())["rl"]["update"]["lr"])  # every parameter, not only its own
    report = next(r for r in runs if r.data.tags["dvc.stage"] == "report")
    steps = [m.step for m in _tracking(session.repo).get_metric_history(report.info.run_id, "rl.reward_mean")]
    assert steps == list(range(TINY_PARAMS["rl"]["rounds"]))  # the round curve, from the persisted history
    assert "eval.rl.greedy_accuracy" in report.data.metrics
