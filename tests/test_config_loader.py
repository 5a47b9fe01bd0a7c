"""The project's config loader: `--params` change single keys in every environment."""

from __future__ import annotations

from rlvr_factory.config_loader import ConfigLoader
from tests.pipelines.conftest import PROJECT_ROOT


def parameters(env: str | None, runtime: dict) -> dict:
    return ConfigLoader(str(PROJECT_ROOT / "conf"), env=env, runtime_params=runtime,
                        base_env="base", default_run_env="local")["parameters"]


def test_params_override_one_key_and_keep_the_rest_of_base_blocks_under_an_environment():
    base = parameters(None, {})
    mixed = parameters("mixed", {"rl": {"rounds": 2}, "domain": {"domains": {"code": {"splits": {"test": 4}}}}})
    assert mixed["rl"] == {**base["rl"], "rounds": 2}
    assert mixed["domain"]["name"] == "mix"  # the environment's block replaces base's
    assert mixed["domain"]["domains"]["code"]["splits"] == {"train": 38, "validation": 8, "test": 4}
    assert "levels" not in mixed["domain"]  # nothing of base's arithmetic block leaks into the mix


def test_without_an_environment_params_merge_as_kedro_does():
    base = parameters(None, {})
    params = parameters(None, {"rl": {"update": {"lr": 0.5}}})
    assert params["rl"] == {**base["rl"], "update": {**base["rl"]["update"], "lr": 0.5}}
