"""The registered pipelines declare the RL round once, at any `rl.rounds` (`kedro run`'s round loop repeats
it), and follow the run's configuration (`conf/`, `--env`, `--params`) where it changes the round's wiring:
a KL term reads the reference policy; for `kedro run`, `kedro registry describe` and kedro-viz alike."""

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

ENV_ROUNDS = 4  # conf/fast: the scratch project's environment


DECLARED = sorted(["round.rollout", "round.verify", "round.track_levels", "round.track_pass_rates", "round.update"])


def declared_round(pipeline) -> list[str]:
    """The nodes of the declared RL round (namespace `round`), in order."""
    return [n.name for n in pipeline.nodes if n.namespace == "round"]


def unrolled_rounds(pipeline) -> list[str]:
    """Namespaces of rounds unrolled into the pipeline (none: the round loop repeats the declared round)."""
    return sorted({n.namespace for n in pipeline.nodes if n.namespace and re.fullmatch(r"round_\d+", n.namespace)})


@pytest.fixture
def project(tmp_path) -> Path:
    """A scratch project with an environment `fast` whose `rl` block runs ENV_ROUNDS rounds with a KL term."""
    root = make_project(tmp_path)
    base = yaml.safe_load((root / "conf/base/parameters_rlvr.yml").read_text())
    (root / "conf/fast").mkdir()
    fast = {**base["rl"], "rounds": ENV_ROUNDS, "update": {**base["rl"]["update"], "kl_coef": 0.1}}
    (root / "conf/fast/parameters_rlvr.yml").write_text(yaml.safe_dump({"rl": fast}))
    return root


@pytest.fixture
def no_session(monkeypatch):
    """This process as `kedro registry describe` sees it: no config loader made yet."""
    monkeypatch.setattr(ConfigLoader, "latest", None)
    monkeypatch.delenv("KEDRO_ENV", raising=False)


def test_without_a_session_the_registry_declares_one_round(no_session, monkeypatch):
    monkeypatch.chdir(PROJECT_ROOT)
    registered = register_pipelines()
    assert sorted(declared_round(registered["rlvr"])) == DECLARED and not unrolled_rounds(registered["rlvr"])
    assert declared_round(registered["rl"]) == declared_round(registered["rlvr"])
    sampled = next(n for n in registered["report"].nodes if n.name == "sample_rollouts")
    assert "round.scored" in sampled.inputs  # every round's file, read back by the report


def test_without_a_session_kedro_env_picks_the_environment(no_session, monkeypatch, project):
    monkeypatch.chdir(project)
    monkeypatch.setenv("KEDRO_ENV", "fast")  # its KL term reads the reference policy in every update
    update = next(n for n in register_pipelines()["rlvr"].nodes if n.name == "round.update")
    assert "reference_policy" in update.inputs


@pytest.mark.parametrize("env, runtime, with_reference", [
    (None, {}, False),
    ("fast", {}, True),
    ("fast", {"rl": {"rounds": 5000, "update": {"kl_coef": 0.0}}}, False),
    (None, {"rl": {"rounds": 1, "update": {"kl_coef": 0.2}}}, True),
])
def test_in_a_session_the_registered_pipeline_is_one_round_whatever_the_length(project, env, runtime, with_reference):
    bootstrap_project(project)
    with KedroSession.create(project_path=project, env=env, runtime_params=runtime) as session:
        session.load_context()
        for name in ("rlvr", "__default__"):
            assert sorted(declared_round(pipelines[name])) == DECLARED and not unrolled_rounds(pipelines[name])
            update = next(n for n in pipelines[name].nodes if n.name == "round.update")
            assert ("reference_policy" in update.inputs) == with_reference


def test_checkpoints_and_the_kl_reference_follow_the_configuration():
    params = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_rlvr.yml").read_text())
    params["rl"].update(rounds=4, checkpoint_every=2)
    params["rl"]["update"]["kl_coef"] = 0.1
    assert RLShape.from_parameters(params) == RLShape(rounds=4, checkpoint_every=2, with_reference=True)
    params["rl"]["resume_from"] = 2  # the round after the first checkpoint
    assert RLShape.from_parameters(params).resume_from == 2


@pytest.mark.parametrize("key, value, message", [
    ("rounds", 0, "rl.rounds: must be >= 1, got 0"), ("checkpoint_every", -1, "rl.checkpoint_every: must be >= 0, got -1"),
    ("resume_from", 3, "rl.resume_from: a run resumes at a round right after a checkpoint"),  # no checkpoint after round 2
    ("resume_from", 20, "rl.resume_from: a run resumes at a round right after a checkpoint"),  # no round 20 to run
])
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
def test_kedro_registry_describe_shows_the_declared_round_once(project):
    for env in ({}, {"KEDRO_ENV": "fast"}):
        done = _kedro(project, "registry", "describe", "rlvr", **env)
        assert done.returncode == 0, done.stderr[-3000:]
        nodes = yaml.safe_load(done.stdout)["Nodes"]
        assert [n for n in nodes if n.endswith("(update)")] == ["round.update (update)"]


@pytest.mark.slow
def test_kedro_viz_draws_the_round_as_one_collapsible_namespace(project):
    pytest.importorskip("kedro_viz", reason="kedro-viz is the `viz` extra: pip install -e '.[viz]'")
    from kedro_viz.integrations.kedro.data_loader import load_data

    _, viz_pipelines, *_ = load_data(project, env="fast", extra_params={"rl": {"rounds": 3}})
    assert sorted(declared_round(viz_pipelines["rlvr"])) == DECLARED  # kedro viz run --env fast --params rl.rounds=3
    done = _kedro(project, "viz", "build", KEDRO_ENV="fast")
    assert done.returncode == 0, done.stderr[-3000:]
    graph = json.loads((project / "build/api/main").read_text())
    modular = graph["modular_pipelines"]
    assert [m for m in modular if m.startswith("round")] == ["round"]
    tasks = [c for c in modular["round"]["children"] if c["type"] == "task"]
    assert len(tasks) == 5  # rollout, verify, track_pass_rates, track_levels, update fold into the round
    assert {"id": "round", "type": "modularPipeline"} in modular["__root__"]["children"]
