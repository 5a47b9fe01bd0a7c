"""The project's config loader: environments and `--params` change single keys (a `domain` block is replaced)."""

from __future__ import annotations

import yaml

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


def test_an_environment_changes_single_keys_of_base_blocks_and_replaces_the_domain_block(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base/parameters.yml").write_text(
        "rl: {rounds: 20, update: {lr: 0.1, clip_low: 0.3}}\ndomain: {name: arithmetic, levels: {1: {digits: 2}}}\n"
        "sft: {num_examples: 3}\n")
    (tmp_path / "scale").mkdir()
    (tmp_path / "scale/parameters.yml").write_text("rl: {update: {lr: 0.5}}\ndomain: {name: extraction, splits: {train: 2}}\n")
    params = ConfigLoader(str(tmp_path), env="scale", runtime_params={"rl": {"rounds": 2}}, base_env="base",
                          default_run_env="local")["parameters"]
    assert (params["rl"]["rounds"], params["rl"]["update"]["lr"], params["rl"]["update"]["clip_low"]) == (2, 0.5, 0.3)
    assert params["domain"]["name"] == "extraction" and params["domain"]["splits"] == {"train": 2}
    assert params["domain"]["levels"] == [1, 2]  # extraction's default: nothing of base's arithmetic block
    assert params["sft"]["num_examples"] == 3


def _leaves(block: dict, path: tuple = ()):
    for key, value in block.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key), value


def _at(block: dict, path: tuple):
    for key in path:
        if not isinstance(block, dict) or key not in block:
            return KeyError  # not set anywhere: no default to restate
        block = block[key]
    return block


def test_no_environment_restates_a_default_it_only_changes_values():
    # each default lives in one place: conf/base (or rlvr_factory.parameters under it); an environment that
    # copies one would keep the old value when the default changes. The domain block is replaced whole.
    base = ConfigLoader(str(PROJECT_ROOT / "conf"), env="base", base_env="base", default_run_env="base")["parameters"]
    restated = [
        f"{path.relative_to(PROJECT_ROOT)}: {'.'.join(map(str, key))} = {value!r}"
        for env in sorted(p for p in (PROJECT_ROOT / "conf").iterdir() if p.is_dir() and p.name not in ("base", "local"))
        for path in sorted(env.glob("**/parameters*.yml"))
        for key, value in _leaves(yaml.safe_load(path.read_text()) or {})
        if key[0] != "domain" and _at(base, key) == value
    ]
    assert not restated, "environments restate defaults (delete these keys):\n" + "\n".join(restated)


def _domain_restated(block: dict, prefix: str):
    """The keys of a domain block (a mix's members too) that equal its domain's own defaults."""
    import dataclasses

    from rlvr_factory.domains import domain_factory, settings_class
    from rlvr_factory.schema import field_default, to_dict

    defaults = {f.name: to_dict(field_default(f)) for f in dataclasses.fields(settings_class(domain_factory(block["name"])))
                if field_default(f) is not dataclasses.MISSING}
    defaults.update(reward="verifier", reward_model={})
    for key, value in block.items():
        if key == "domains" and block["name"] == "mix":
            for member, member_block in value.items():
                yield from _domain_restated({"name": member, **{k: v for k, v in member_block.items() if k != "weight"}},
                                            f"{prefix}.domains.{member}")
                if member_block.get("weight") == 1.0:
                    yield f"{prefix}.domains.{member}.weight = 1.0"
        elif key in defaults and to_dict(value) == defaults[key]:
            yield f"{prefix}.{key} = {value!r}"


def test_no_domain_block_restates_its_domains_own_default():
    # The domain block is typed by its domain's constructor (domains/registry.py), so the same rule holds there:
    # a key an environment sets to the constructor's default is a second copy of it, stale when the default
    # changes (docs/configuration.md lists each domain's keys and defaults). Base's block is exempt as its
    # other blocks' keys are: DVC names it whole, and `dvc exp run -S` sets only keys the file has.
    restated = [
        f"{path.relative_to(PROJECT_ROOT)}: {found}"
        for env in sorted(p for p in (PROJECT_ROOT / "conf").iterdir() if p.is_dir() and p.name not in ("base", "local"))
        for path in sorted(env.glob("**/parameters*.yml"))
        if isinstance((yaml.safe_load(path.read_text()) or {}).get("domain"), dict)
        for found in _domain_restated(yaml.safe_load(path.read_text())["domain"], "domain")
    ]
    assert not restated, "domain blocks restate their domain's defaults (delete these keys):\n" + "\n".join(restated)


def _paths(tree) -> list[str]:
    """Every `filepath`/`path` in a (nested) catalog entry."""
    if isinstance(tree, dict):
        return [v for k, v in tree.items() if k in ("filepath", "path") and isinstance(v, str)] + [
            p for v in tree.values() for p in _paths(v)]
    return []


def catalog_paths(env: str | None) -> dict[str, list[str]]:
    loader = ConfigLoader(str(PROJECT_ROOT / "conf"), env=env, base_env="base", default_run_env="local")
    return {name: _paths(entry) for name, entry in loader["catalog"].items()}


def test_each_environment_writes_its_own_data_folder_and_the_default_run_keeps_data():
    # DVC's stages run `--env base`: the committed reference results lie where no other run writes
    shared = {"flywheel_interactions"}  # the logged traffic every configuration ingests; only read
    for env in sorted(p.name for p in (PROJECT_ROOT / "conf").iterdir() if p.is_dir() and p.name != "local"):
        paths = catalog_paths(env)
        assert sum(map(len, paths.values())) > 30, env
        for name, found in paths.items():
            for path in found:
                assert path.startswith("data/" if name in shared else f"data/envs/{env}/"), (env, name, path)
        params = parameters(env, {})
        assert params["dpo"]["checkpoint_dir"].startswith(f"data/envs/{env}/")
        assert params["reward_model"]["checkpoint_dir"].startswith(f"data/envs/{env}/")
    for env in (None, "local"):
        for name, found in catalog_paths(env).items():
            assert all(p.startswith("data/0") for p in found), (env, name, found)
        assert parameters(env, {})["dpo"]["checkpoint_dir"] == "data/06_models/checkpoints/dpo"
