"""`scripts/results.py`: the committed dvc.lock and results (metrics.json, summary.json, the round-curve
table) are what HEAD writes; `refresh` renews them in one command and `check` fails, naming what
drifted, when code, parameters or a committed result no longer match."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.project_clone import RESULTS, results
from tests.test_dvc import dvc, git

KEPT = ["data/envs/base/08_reporting/metrics.json", "data/envs/base/08_reporting/plots/round_curves.csv",
        "data/envs/base/08_reporting/plots/overoptimisation.csv", "data/envs/base/08_reporting/summary.json"]


def _module():
    spec = importlib.util.spec_from_file_location("results", RESULTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


results_py = _module()


def test_the_results_kept_in_git_are_the_cache_false_outputs_and_metrics_of_dvc_yaml():
    assert results_py.git_kept(RESULTS.parents[1]) == KEPT


@pytest.mark.slow
def test_a_clone_without_a_lock_fails_the_check_with_the_command_that_fixes_it(refreshed_project):
    before = refreshed_project.check_before
    assert before.returncode == 1
    assert "there is no dvc.lock: run `python scripts/results.py refresh`" in before.stderr


@pytest.mark.slow
def test_refresh_writes_the_lock_and_results_and_checks_the_outputs_out(refreshed_project):
    repo = refreshed_project.repo
    tracked = set(git(repo, "ls-files").splitlines())
    assert {"dvc.lock", *KEPT} <= tracked
    assert "git add dvc.lock " + " ".join(KEPT) in refreshed_project.refresh.stdout
    assert git(repo, "status", "--porcelain") == ""
    assert "Data and pipelines are up to date" in dvc(repo, "status", "--with-deps", "report")  # the workspace holds what the lock says
    summary = json.loads((repo / "data/envs/base/08_reporting/summary.json").read_text())
    assert set(summary) == {"greedy", "pass@2", "val"}  # one domain: no per-domain block
    assert results_py.CPU in refreshed_project.refresh.stdout and results_py.CPU in tracked
    assert json.loads((repo / results_py.CPU).read_text()) == results_py.cpu_fingerprint()


@pytest.mark.slow
def test_the_refreshed_commit_passes_the_full_check(refreshed_project):
    done = results(refreshed_project.repo, "check")
    assert done.returncode == 0, done.stderr[-6000:]
    assert "match HEAD" in done.stdout
    # Every output, kept in git or in the DVC cache, comes out byte for byte (timings live in MLflow only).
    assert "not reproduced byte for byte" not in done.stderr


@pytest.fixture
def drifted(refreshed_project):
    """The refreshed clone, to be edited by a test and put back afterwards."""
    repo = refreshed_project.repo
    yield repo
    git(repo, "checkout", "-q", "--", ".")


@pytest.mark.slow
@pytest.mark.parametrize("edit, named", [
    ("conf/base/parameters_evaluate.yml", "stage evaluate: parameter evaluate.k (conf/base/parameters_evaluate.yml) modified"),
    ("src/rlvr_factory/evaluation.py", "stage evaluate: src/rlvr_factory/evaluation.py modified"),
    ("data/envs/base/08_reporting/summary.json", "stage report: data/envs/base/08_reporting/summary.json modified"),
])
def test_the_fast_check_names_each_drift_and_the_fix(drifted, edit, named):
    path = drifted / edit
    if edit.endswith("parameters_evaluate.yml"):
        params = yaml.safe_load(path.read_text())
        params["evaluate"]["k"] += 1
        path.write_text(yaml.safe_dump(params))
    elif edit.endswith(".py"):
        path.write_text(path.read_text() + "\n# changed\n")
    else:
        summary = json.loads(path.read_text())
        summary["greedy"]["rl"] = 0.99
        path.write_text(json.dumps(summary))
    done = results(drifted, "check", "--fast")
    assert done.returncode == 1
    assert named in done.stderr
    assert "Refresh them: python scripts/results.py refresh" in done.stderr


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@e", "commit", "-q", "-m", "c"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)
    return tmp_path


DVC_YAML = yaml.safe_dump({"stages": {
    "rl": {"cmd": "run rl", "outs": ["data/scored"]},
    "evaluate": {"cmd": "run evaluate", "metrics": [{"data/metrics.json": {"cache": False}}]},
}})


def _lock(metrics_md5: str, scored_md5: str, code_md5: str = "c0de") -> str:
    return yaml.safe_dump({"schema": "2.0", "stages": {
        "rl": {"cmd": "run rl", "deps": [{"path": "src/rl", "md5": code_md5}], "outs": [{"path": "data/scored", "md5": scored_md5}]},
        "evaluate": {"cmd": "run evaluate", "params": {"conf/p.yml": {"evaluate.k": 8}},
                     "deps": [{"path": "data/scored", "md5": scored_md5}],
                     "outs": [{"path": "data/metrics.json", "md5": metrics_md5}]},
    }})


def test_a_reproduction_that_writes_the_committed_bytes_has_no_drift(tmp_path):
    repo = _repo(tmp_path, {"dvc.yaml": DVC_YAML, "dvc.lock": _lock("m1", "s1"), "data/metrics.json": '{"a": 1}'})
    assert results_py.compare(repo) == ([], [])


def test_a_result_written_differently_is_drift_with_the_changed_values(tmp_path):
    repo = _repo(tmp_path, {"dvc.yaml": DVC_YAML, "dvc.lock": _lock("m1", "s1"),
                            "data/metrics.json": '{"rl": {"greedy": 0.3}, "n": 1}'})
    (repo / "data/metrics.json").write_text('{"rl": {"greedy": 0.338}, "n": 1}')
    (repo / "dvc.lock").write_text(_lock("m2", "s1"))
    drift, unstable = results_py.compare(repo)
    assert drift == ["data/metrics.json: rl.greedy: committed 0.3, HEAD writes 0.338",
                     "dvc.lock: evaluate outs data/metrics.json: committed m1, HEAD writes m2"]
    assert unstable == []


def test_data_outside_git_that_differs_is_named_but_is_not_drift(tmp_path):
    repo = _repo(tmp_path, {"dvc.yaml": DVC_YAML, "dvc.lock": _lock("m1", "s1"), "data/metrics.json": "{}"})
    (repo / "dvc.lock").write_text(_lock("m1", "s2"))
    assert results_py.compare(repo) == ([], ["data/scored"])


def test_a_lock_for_other_code_is_drift(tmp_path):
    repo = _repo(tmp_path, {"dvc.yaml": DVC_YAML, "dvc.lock": _lock("m1", "s1"), "data/metrics.json": "{}"})
    (repo / "dvc.lock").write_text(_lock("m1", "s1", code_md5="other"))
    assert results_py.compare(repo)[0] == ["dvc.lock: rl deps src/rl: committed c0de, HEAD writes other"]


def test_a_result_the_reproduction_did_not_write_is_drift(tmp_path):
    repo = _repo(tmp_path, {"dvc.yaml": DVC_YAML, "dvc.lock": _lock("m1", "s1"), "data/metrics.json": "{}"})
    (repo / "data/metrics.json").unlink()
    assert results_py.compare(repo)[0] == ["data/metrics.json: the reproduction did not write it"]


def test_a_formatting_only_difference_says_so():
    assert results_py.describe_difference("m.json", b'{"a": 1}', b'{\n "a": 1\n}') == (
        "m.json: same values, different bytes (formatting)")
    assert results_py.describe_difference("t.csv", b"a\n1\n", b"a\n2\n") == "t.csv: HEAD writes different bytes"


def test_the_cpu_kind_is_the_architecture_vendor_and_torchs_instruction_set():
    here = results_py.cpu_fingerprint()
    assert set(results_py.CPU_KIND) <= set(here) and here["torch_cpu_capability"]
    assert results_py.same_kind(dict(here), here) and results_py.same_kind(None, here)  # none committed: strict
    assert results_py.same_kind({**here, "model": "another model name"}, here)
    for key in results_py.CPU_KIND:
        assert not results_py.same_kind({**here, key: "other"}, here)


def test_on_another_kind_of_cpu_only_the_results_values_are_excused_never_code_or_parameters():
    kept = ["data/metrics.json"]
    assert results_py.is_result_drift("data/metrics.json: rl.greedy: committed 0.3, HEAD writes 0.338", kept)
    assert results_py.is_result_drift("dvc.lock: evaluate outs data/metrics.json: committed m1, HEAD writes m2", kept)
    # a stage that reads a result (the report reads metrics.json) records its hash too: the same value
    assert results_py.is_result_drift("dvc.lock: report deps data/metrics.json: committed m1, HEAD writes m2", kept)
    for line in ("dvc.lock: rl deps src/rl: committed c0de, HEAD writes other",
                 "dvc.lock: evaluate params conf/p.yml: committed {'evaluate.k': 8}, HEAD writes {'evaluate.k': 9}",
                 "dvc.lock: rl cmd: committed run rl, HEAD writes run rl2",
                 "dvc.lock: evaluate deps data/other.json: committed m1, HEAD writes m2"):
        assert not results_py.is_result_drift(line, kept)
