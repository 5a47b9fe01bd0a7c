"""scripts/dvc_deps.py: each dvc.yaml stage lists, as deps, every module its Kedro pipeline runs
(transitively, lazy imports and by-path loads included), the configuration and the lock; a
rewrite leaves the hand-written data deps, params, outs and comments as they were."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from tests.pipelines.conftest import PROJECT_ROOT

_spec = importlib.util.spec_from_file_location("dvc_deps", PROJECT_ROOT / "scripts" / "dvc_deps.py")
dvc_deps = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(dvc_deps)
SRC = PROJECT_ROOT / "src" / "rlvr_factory"


@pytest.fixture(scope="module")
def dvc_yaml() -> tuple[str, dict]:
    text = (PROJECT_ROOT / "dvc.yaml").read_text()
    return text, yaml.safe_load(text)


@pytest.fixture(scope="module")
def generated(dvc_yaml) -> dict[str, list[str]]:
    return dvc_deps.generated_deps({name: dvc_deps._pipelines_of(stage) for name, stage in dvc_yaml[1]["stages"].items()})


def test_dvc_yaml_lists_each_stages_import_graph(dvc_yaml, generated):
    have = dvc_deps.current(dvc_yaml[1])
    drift = {stage: sorted(set(generated[stage]) ^ set(have[stage])) for stage in generated if set(generated[stage]) != set(have[stage])}
    assert not drift, f"dvc.yaml's code deps differ from the import graph: {drift}; fix: {dvc_deps.COMMAND}"


def test_stages_that_verify_depend_on_the_scheduler_and_the_sandbox(generated):
    for stage in ("curate", "rl", "evaluate", "report"):
        assert {"src/rlvr_factory/scheduler", "src/rlvr_factory/sandbox", "src/rlvr_factory/verifiers"} <= set(generated[stage])


def test_every_stage_depends_on_the_catalog_the_config_loader_and_the_lock(generated):
    for deps in generated.values():
        assert {"conf/base/catalog.yml", "src/rlvr_factory/config_loader.py", "requirements.lock"} <= set(deps)


def test_the_closure_follows_lazy_imports_by_path_loads_and_package_inits():
    files = dvc_deps.closure({"rlvr_factory.mlflow_model"})
    assert SRC / "mlflow_model_code.py" in files  # loaded by path: Path(__file__).with_name(...)
    assert SRC / "__init__.py" in files
    backends = dvc_deps.closure({"rlvr_factory.sandbox.backends"})
    assert SRC / "sandbox" / "agent.py" in backends and SRC / "sandbox" / "__init__.py" in backends


def test_a_stage_running_several_pipelines_or_from_a_node_lists_what_those_run():
    assert dvc_deps._pipelines_of({"cmd": "kedro run --pipelines=report,overoptimisation  # note"}) == (
        ["report", "overoptimisation"], None)
    assert dvc_deps._pipelines_of({"cmd": "kedro run --pipelines=preference --from-nodes=dpo_fine_tune"}) == (
        ["preference"], "dpo_fine_tune")
    with pytest.raises(SystemExit, match="is not `kedro run"):
        dvc_deps._pipelines_of({"cmd": "python train.py"})


def test_a_registry_that_imports_by_computed_name_takes_its_whole_package():
    files = dvc_deps.closure({"rlvr_factory.domains.registry"})
    assert dvc_deps._python_files(SRC / "domains") <= files


def test_a_directory_is_listed_only_when_all_its_modules_are_needed():
    every = dvc_deps._python_files(SRC / "scheduler")
    assert dvc_deps.collapse(every) == ["src/rlvr_factory/scheduler"]
    one = {SRC / "training" / "lm.py", SRC / "training" / "__init__.py"}
    assert dvc_deps.collapse(one) == ["src/rlvr_factory/training/__init__.py", "src/rlvr_factory/training/lm.py"]


def test_a_rewrite_keeps_data_deps_params_outs_and_comments(dvc_yaml, generated):
    text, parsed = dvc_yaml
    rewritten = dvc_deps.rewrite(text, {stage: ["src/rlvr_factory/x.py"] for stage in generated})
    again = yaml.safe_load(rewritten)
    for name, stage in parsed["stages"].items():
        data = [d for d in stage["deps"] if not dvc_deps._GENERATED.match(f"  - {d}")]
        assert again["stages"][name]["deps"] == [*data, "src/rlvr_factory/x.py"]
        assert {k: v for k, v in again["stages"][name].items() if k != "deps"} == {k: v for k, v in stage.items() if k != "deps"}
    assert [line for line in rewritten.splitlines() if "#" in line] == [line for line in text.splitlines() if "#" in line]
    assert dvc_deps.rewrite(dvc_deps.rewrite(text, generated), generated) == dvc_deps.rewrite(text, generated)
