"""The registered pipelines follow the run's configuration: `rl.rounds` from `conf/`, `--env` and
`--params`, for `kedro run`, `kedro registry describe` and kedro-viz alike; each round is a namespace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kedro.framework.project import pipelines
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from rlvr_factory.config_loader import ConfigLoader
from rlvr_factory.pipeline_registry import RLShape, register_pipelines
from tests.pipelines.conftest import PROJECT_ROOT, make_project

CONFIGURED_ROUNDS = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_rlvr.yml").read_text())["rl"]["rounds"]
ENV_ROUNDS = 4  # conf/fast: the scratch project's environment


def rounds(pipeline) -> list[str]:
    """The round namespaces of a pipeline, in order."""
    return sorted({n.namespace for n in pipeline.nodes if n.namespace and re.fullmatch(r"round_\d{3}", n.namespace)})


@pytest.fixture
def project(tmp_path) -> Path:
    """A scratch project with an environment `fast` whose `rl` block runs ENV_ROUNDS rounds."""
    root = make_project(tmp_path)
    base = yaml.safe_load((root / "conf/base/parameters_rlvr.yml").read_text())
    (root / "conf/fast").mkdir()
    (root / "conf/fast/parameters_rlvr.yml").write_text(yaml.safe_dump({"rl": {**base["rl"], "rounds": ENV_ROUNDS}}))
    return root


@pytest.fixture
def no_session(monkeypatch):
    """This process as `kedro registry describe` sees it: no config loader made yet."""
    monkeypatch.setattr(ConfigLoader, "latest", None)
    monkeypatch.delenv("KEDRO_ENV", raising=False)


def test_without_a_session_the_registry_unrolls_the_configured_rounds(no_session, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)
    registered = register_pipelines()
    assert rounds(registered["rlvr"]) == [f"round_{k:03d}" for k in range(CONFIGURED_ROUNDS)]
    assert rounds(registered["rl"]) == rounds(registered["rlvr"])
    sampled = next(n for n in registered["report"].nodes if n.name == "sample_rollouts")
    assert len([i for i in sampled.inputs if i.endswith(".scored")]) == CONFIGURED_ROUNDS


def test_without_a_session_kedro_env_picks_the_environment(no_session, monkeypatch, project):
    monkeypatch.chdir(project)
    monkeypatch.setenv("KEDRO_ENV", "fast")
    assert len(rounds(register_pipelines()["rlvr"])) == ENV_ROUNDS


@pytest.mark.parametrize("env, runtime, expected", [
    (None, {}, CONFIGURED_ROUNDS),
    ("fast", {}, ENV_ROUNDS),
    ("fast", {"rl": {"rounds": 3}}, 3),
    (None, {"rl": {"rounds": 1}}, 1),
])
def test_in_a_session_the_registered_pipeline_has_the_runs_rounds(project, env, runtime, expected):
    bootstrap_project(project)
    with KedroSession.create(project_path=project, env=env, runtime_params=runtime) as session:
        session.load_context()
        assert len(rounds(pipelines["rlvr"])) == expected
        assert len(rounds(pipelines["__default__"])) == expected


def test_checkpoints_and_the_kl_reference_follow_the_configuration():
    params = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_rlvr.yml").read_text())
    params["rl"].update(rounds=4, checkpoint_every=2)
    params["rl"]["update"]["kl_coef"] = 0.1
    assert RLShape.from_parameters(params) == RLShape(rounds=4, checkpoint_every=2, with_reference=True)


@pytest.mark.parametrize("key, value, message", [
    ("rounds", 0, "rl.rounds: must be >= 1, got 0"), ("checkpoint_every", -1, "rl.checkpoint_every: must be >= 0, got -1")])
def test_a_shape_that_cannot_run_is_refused_with_the_key_to_fix(key, value, message):
    params = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_rlvr.yml").read_text())
    params["rl"][key] = value
    with pytest.raises(ValueError, match=message):
        RLShape.from_parameters(params)


def _kedro(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "KEDRO_ENV"} | env
    environ["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT / "src"), *filter(None, [environ.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "kedro", *args], cwd=project, env=environ, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow
def test_kedro_registry_describe_shows_the_rounds_a_run_has(project):
    for env, expected in (({}, CONFIGURED_ROUNDS), ({"KEDRO_ENV": "fast"}, ENV_ROUNDS)):
        done = _kedro(project, "registry", "describe", "rlvr", **env)
        assert done.returncode == 0, done.stderr[-3000:]
        nodes = yaml.safe_load(done.stdout)["Nodes"]
        assert len([n for n in nodes if re.fullmatch(r"round_\d{3}\.update \(update\)", n)]) == expected


@pytest.mark.slow
def test_kedro_viz_draws_every_round_as_a_collapsible_namespace(project):
    pytest.importorskip("kedro_viz", reason="kedro-viz is the `viz` extra: pip install -e '.[viz]'")
    from kedro_viz.integrations.kedro.data_loader import load_data

    _, viz_pipelines, *_ = load_data(project, env="fast", extra_params={"rl": {"rounds": 3}})
    assert len(rounds(viz_pipelines["rlvr"])) == 3  # kedro viz run --env fast --params rl.rounds=3
    done = _kedro(project, "viz", "build", KEDRO_ENV="fast")
    assert done.returncode == 0, done.stderr[-3000:]
    graph = json.loads((project / "build/api/main").read_text())
    modular = graph["modular_pipelines"]
    assert [f"round_{k:03d}" for k in range(ENV_ROUNDS)] == sorted(m for m in modular if m.startswith("round_"))
    for k in range(ENV_ROUNDS):
        tasks = [c for c in modular[f"round_{k:03d}"]["children"] if c["type"] == "task"]
        assert len(tasks) == 5  # rollout, verify, track_pass_rates, track_levels, update fold into the round
    assert {"id": "round_000", "type": "modularPipeline"} in modular["__root__"]["children"]
