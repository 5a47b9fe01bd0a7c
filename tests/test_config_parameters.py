"""The parameter tree: every YAML file under conf/ fits it, every environment resolves to the configuration
the pipeline has always run, and a wrong key or value stops `kedro run` at start-up, saying where."""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlvr_factory.config_loader import ConfigLoader
from rlvr_factory.domains import DOMAINS, DomainConfig, get_domain, register_domain, settings_class
from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.parameters import Parameters, resolve
from rlvr_factory.schema import ConfigError, field_default, to_dict
from rlvr_factory.settings import CONFIG_LOADER_ARGS
from tests.pipelines.conftest import PROJECT_ROOT

CONF = PROJECT_ROOT / "conf"
ENVS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name not in ("base", "local"))
RECORDED = Path(__file__).parent / "config_resolved"  # RLVR_RECORD_CONFIG=1 rewrites it after a deliberate change


def parameters(env: str | None = None, runtime: dict | None = None, conf: Path = CONF) -> dict:
    return ConfigLoader(str(conf), env=env, runtime_params=runtime or {}, **CONFIG_LOADER_ARGS)["parameters"]


@pytest.mark.parametrize("path", sorted(CONF.glob("**/parameters*.yml")), ids=lambda p: str(p.relative_to(CONF)))
def test_every_parameter_file_fits_the_tree(path):
    # Each file on its own over the defaults: no unknown key, no value of the wrong type or range.
    resolved = resolve(yaml.safe_load(path.read_text()) or {})
    assert set(resolved) == set(to_dict(Parameters()))


@pytest.mark.parametrize("env", ["local", *ENVS])
def test_every_environment_resolves_to_the_recorded_configuration(env):
    # The configuration each node receives, every default filled in, as the pipeline ran it before the
    # defaults moved into the dataclasses (the default run's metrics depend on nothing else).
    resolved = json.loads(json.dumps(parameters(env), sort_keys=True))
    path = RECORDED / f"{env}.json"
    if os.environ.get("RLVR_RECORD_CONFIG"):
        path.write_text(json.dumps(resolved, indent=1, sort_keys=True) + "\n")
    assert resolved == json.loads(path.read_text())


def test_the_base_yaml_restates_a_default_only_where_dvc_names_the_key():
    # DVC tracks dvc.yaml's keys by name, and `dvc exp run -S file:key=value` sets only keys the file has.
    dvc = yaml.safe_load((PROJECT_ROOT / "dvc.yaml").read_text())
    named = {key for stage in dvc["stages"].values() for entry in stage.get("params", [])
             for keys in (entry.values() if isinstance(entry, dict) else []) for key in keys}
    named |= set(re.findall(r"-S '[^:']+:([\w.]+)=", (PROJECT_ROOT / "README.md").read_text()))
    defaults = to_dict(Parameters())

    def restated(tree: dict, default: dict, prefix: str):
        for key, value in tree.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and isinstance(default.get(key), dict) and value:
                yield from restated(value, default[key], f"{path}.")
            elif value == default.get(key) and path not in named and not any(path.startswith(f"{n}.") for n in named if "." in n):
                yield path

    for path in sorted((CONF / "base").glob("parameters*.yml")):
        tree = {k: v for k, v in (yaml.safe_load(path.read_text()) or {}).items() if k != "domain"}
        assert list(restated(tree, defaults, "")) == [], path.name


@pytest.mark.parametrize(("runtime", "key", "says"), [
    ({"rl": {"rounds": -1}}, "rl.rounds", "must be >= 1, got -1"),
    ({"rl": {"update": {"lr": "abc"}}}, "rl.update.lr", "expected float, got 'abc'"),
    ({"rl": {"samples_per_prompt": 0}}, "rl.samples_per_prompt", "must be >= 1, got 0"),
    ({"rl": {"update": {"advantage_estimator": "grpoo"}}}, "rl.update.advantage_estimator", "'grpo', 'dr_grpo', 'rloo', 'reinforce_pp'"),
    ({"rl": {"update": {"lrr": 1e-4}}}, "rl.update.lrr", "unknown key (did you mean lr?)"),
    ({"evaluate": {"sampling": {"top_p": 1.5}}}, "evaluate.sampling.top_p", "must be > 0 and <= 1"),
    ({"verify": {"scheduler": {"backend": "slurm"}}}, "verify.scheduler.backend", "one of 'local', 'ray'"),
    ({"domain": {"name": "arithmetic", "levelz": {}}}, "domain.levelz", "did you mean levels?"),
    # the domain block is typed by its constructor's annotations: wrong types and missing arguments fail at start
    ({"domain": {"name": "arithmetic", "seed": "zero"}}, "domain.seed", "expected int, got 'zero'"),
    ({"domain": {"name": "arithmetic", "splits": {"train": 0.5}}}, "domain.splits.train", "expected int, got 0.5"),
    ({"domain": {"name": "arithmetic", "reward": "verifer"}}, "domain.reward", "one of verifier, model or mapping"),
    ({"rlvr": {"rounds": 2}}, "rlvr", "did you mean rl?"),
])
def test_a_wrong_runtime_parameter_names_the_key_the_allowed_values_and_params(runtime, key, says):
    with pytest.raises(ConfigError) as error:
        parameters(None, runtime)
    assert error.value.key == key and error.value.source == "--params"
    assert says in str(error.value)


# Every number anywhere in the tree is finite, and time limits and worker counts are above 0: one rule
# (schema.check_number) over typed fields, the library's own dataclasses and the `Any` values inside the `domain` block (its `verifier` options).
@pytest.mark.parametrize(("runtime", "key", "says"), [
    ({"verify": {"timeout_seconds": float("inf")}}, "verify.timeout_seconds", "must be a finite number, got inf"),
    ({"verify": {"timeout_seconds": "1e999"}}, "verify.timeout_seconds", "must be a finite number, got inf"),
    ({"rollout": {"environment": {"timeout_seconds": float("nan")}}}, "rollout.environment.timeout_seconds", "finite"),
    ({"rollout": {"environment": {"workers": 0}}}, "rollout.environment.workers", "must be > 0"),
    ({"rollout": {"environment": {"retry": {"backoff_seconds": float("nan")}}}},
     "rollout.environment.retry.backoff_seconds", "finite"),
    ({"rl": {"update": {"max_grad_norm": float("nan")}}}, "rl.update.max_grad_norm", "finite"),
    ({"rl": {"update": {"lr": "inf"}}}, "rl.update.lr", "finite"),
    ({"rl": {"update": {"kl_coef": float("-inf")}}}, "rl.update.kl_coef", "finite"),
    ({"sft": {"train": {"lr": float("nan")}}}, "sft.train.lr", "finite"),
    ({"distributed": {"timeout_minutes": float("inf")}}, "distributed.timeout_minutes", "finite"),
    ({"domain": {"verifier": {"limits": {"timeout_s": float("inf")}}}}, "domain.verifier.limits.timeout_s", "finite"),
    ({"domain": {"verifier": {"limits": {"cpu_s": 0}}}}, "domain.verifier.limits.cpu_s", "must be > 0"),
    ({"domain": {"verifier": {"tolerance": float("nan")}}}, "domain.verifier.tolerance", "finite"),
    ({"verify": {"max_input_chars": 0}}, "verify.max_input_chars", "must be >= 1"),  # 0: every completion an error
    ({"model": {"lora": {"r": 0}}}, "model.lora.r", "must be >= 1"),
    ({"rl": {"update": {"max_grad_norm": 0}}}, "rl.update.max_grad_norm", "must be > 0"),  # 0: no step at all
    ({"rl": {"update": {"clip_high": -0.2}}}, "rl.update.clip_high", "must be >= 0"),
    ({"rl": {"dynamic_sampling": {"min_draw": 0}}}, "rl.dynamic_sampling.min_draw", "must be >= 1"),
    ({"rollout": {"vllm": {"gpu_memory_utilization": 2}}}, "rollout.vllm.gpu_memory_utilization", "<= 1, got 2"),
    ({"curate": {"audit": {"tasks_per_group": 0}}}, "curate.audit.tasks_per_group", "must be >= 1"),
])
def test_a_non_finite_number_or_a_non_positive_time_limit_or_worker_count_is_refused(runtime, key, says):
    with pytest.raises(ConfigError) as error:
        parameters("code" if "limits" in str(runtime) else None, runtime)
    assert error.value.key == key and error.value.source == "--params"
    assert says in str(error.value)


def test_a_misspelt_key_in_an_environment_file_names_that_file_and_where_to_add_a_key(tmp_path):
    conf = tmp_path / "conf"
    (conf / "base").mkdir(parents=True)
    (conf / "base/parameters_rlvr.yml").write_text("rl: {rounds: 3}\n")
    (conf / "fast").mkdir()
    (conf / "fast/parameters_rlvr.yml").write_text("rl:\n  update:\n    warmup_step: 2\n")
    with pytest.raises(ConfigError) as error:
        parameters("fast", conf=conf)
    message = str(error.value)
    assert message.startswith("rl.update.warmup_step (conf/fast/parameters_rlvr.yml): unknown key (did you mean warmup_steps?)")
    assert "rlvr_factory.training.grpo.UpdateConfig" in message  # where a developer adds the key


def test_derived_defaults_are_filled_where_the_run_derives_them():
    # DAPO's overlong penalty measures against the completion budget unless told otherwise.
    params = parameters(None, {"rl": {"update": {"overlong_cache_length": 4}, "sampling": {"max_new_tokens": 30}}})
    assert params["rl"]["update"]["overlong_max_length"] == 30
    assert "seed" not in params["rl"]["sampling"]  # each round's sampling seed comes from rl.seed


def test_kedro_run_with_a_bad_value_fails_in_seconds_before_any_node_runs():
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT / "src"), "KEDRO_DISABLE_TELEMETRY": "1", "DO_NOT_TRACK": "true"}
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "kedro", "run", "--pipeline=rlvr", "--params=rl.samples_per_prompt=0"],
                         cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    assert run.returncode != 0
    assert "rl.samples_per_prompt (--params): must be >= 1, got 0" in run.stderr + run.stdout
    assert "Running node" not in run.stderr + run.stdout
    assert seconds < 120, seconds  # start-up only (generous: the machine is shared)


def test_the_episode_budget_is_one_key_passed_to_every_domain_that_counts_turns():
    # rollout.max_turns is the loop's budget and the environment's own: code_repair's episodes
    # judge the last edit at the same turn the loop stops at, whatever --params changes.
    repair = parameters("code_repair", {"rollout": {"max_turns": 3}})
    assert repair["domain"]["max_turns"] == repair["rollout"]["max_turns"] == 3
    assert parameters("cad")["domain"]["max_turns"] == parameters("cad")["rollout"]["max_turns"] == 1
    assert "max_turns" not in parameters()["domain"]  # arithmetic's constructor takes none
    mix = resolve({"rollout": {"max_turns": 2}, "domain": {"name": "mix", "domains": {
        "arithmetic": {}, "repair": {"name": "code_repair", "sources": ["builtin"]}}}})
    assert mix["domain"]["domains"]["repair"]["max_turns"] == 2 and "max_turns" not in mix["domain"]["domains"]["arithmetic"]


@pytest.mark.parametrize("domain, key", [
    ({"name": "code_repair", "max_turns": 3}, "domain.max_turns"),
    ({"name": "mix", "domains": {"cad": {"max_turns": 2}}}, "domain.domains.cad.max_turns"),
])
def test_a_domain_block_that_sets_its_own_turn_budget_is_refused_naming_the_one_key(domain, key):
    with pytest.raises(ConfigError, match="set rollout.max_turns") as e:
        resolve({"domain": domain})
    assert e.value.key == key


def _config_fields() -> dict[str, list[tuple[Any, bool]]]:
    """Every field name of the parameter tree (and of the scheduler's settings): its defaults, and whether it is a block."""
    import dataclasses
    import typing

    from rlvr_factory.scheduler import SchedulerSettings

    found: dict[str, list[tuple[Any, bool]]] = {}

    def walk(cls: type) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            block = dataclasses.is_dataclass(hints[f.name])
            default = field_default(f)
            found.setdefault(f.name, []).append((default, block))
            if block:
                walk(hints[f.name])

    walk(Parameters)
    walk(SchedulerSettings)
    return found


def test_no_library_code_restates_a_default_with_get():
    # `block.get("workers", 2)` keeps a second copy of a default that lives in a dataclass (and goes stale
    # when the dataclass changes); `block.get("levels", {})` treats a missing block as empty. The
    # parameters reach every node resolved, every key present: code indexes them, or parses a partial
    # mapping into its dataclass (`schema.parse`), where the default is written once.
    import ast

    fields = _config_fields()
    found = []
    for path in sorted((PROJECT_ROOT / "src/rlvr_factory").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant) and node.args[0].value in fields):
                continue
            try:
                given = ast.literal_eval(node.args[1])
            except ValueError:
                continue  # computed: not a copy of a default
            if any(given == default or (block and given == {}) for default, block in fields[node.args[0].value]):
                found.append(f"{path.relative_to(PROJECT_ROOT)}:{node.lineno}: .get({node.args[0].value!r}, {given!r})")
    assert found == [], "\n".join(found)


def _block_types() -> dict[str, type]:
    """Each top-level block's dataclass (`Parameters`' fields), by its `params:` name."""
    from rlvr_factory.schema import field_types

    return {f"params:{name}": tp for name, tp in field_types(Parameters).items() if isinstance(tp, type)}


def test_every_node_takes_its_parameter_blocks_as_their_dataclasses():
    # Kedro hands a node the `params:rl` block as an `RLConfig` when the node's argument says so (Kedro's
    # typed parameters), and as a dict otherwise; one node reading `rl["rounds"]` beside another reading
    # `rl.rounds` would fail at run time. Every node of every registered pipeline says which it takes.
    import inspect
    from typing import get_type_hints

    from kedro.pipeline import Pipeline

    from rlvr_factory.pipeline_registry import register_pipelines

    blocks = _block_types()
    nodes = {n.name: n for pipeline in register_pipelines().values() if isinstance(pipeline, Pipeline) for n in pipeline.nodes}
    checked, wrong = 0, []
    for name, node in sorted(nodes.items()):
        hints = get_type_hints(node.func)
        arguments = list(inspect.signature(node.func).parameters)
        for index, dataset in enumerate(node.inputs):
            if dataset in blocks:
                checked += 1
                if hints.get(arguments[index]) is not blocks[dataset]:
                    wrong.append(f"{name}: {arguments[index]} ({dataset}) is {hints.get(arguments[index])}, "
                                 f"not {blocks[dataset].__name__}")
    assert checked > 40 and wrong == [], "\n".join(wrong)


def test_a_session_hands_nodes_whole_typed_blocks(tmp_path):
    # Kedro builds an annotated block as `RLConfig(**mapping)`; `schema.Block` completes its nested blocks and
    # tuples, so a node reads `rl.update.lr` and `rl.curriculum.band` is the tuple the dataclass declares.
    from kedro.framework.session import KedroSession
    from kedro.framework.startup import bootstrap_project

    from rlvr_factory.parameters import RLConfig
    from rlvr_factory.rollout.agent_loop import MultiTurnConfig, RolloutConfig
    from rlvr_factory.training.grpo import UpdateConfig

    bootstrap_project(PROJECT_ROOT)
    with KedroSession.create(project_path=PROJECT_ROOT, env="base",
                             runtime_params={"rl": {"update": {"lr": 3e-4}, "curriculum": {"band": [0.2, 0.7]}}}) as session:
        context = session.load_context()
        rl = context.catalog.load("params:rl")
        assert isinstance(rl, RLConfig) and isinstance(rl.update, UpdateConfig) and rl.update.lr == 3e-4
        assert rl.curriculum.band == (0.2, 0.7)
        assert isinstance(context.catalog.load("params:rl.update"), UpdateConfig)
        rollout = context.catalog.load("params:rollout")
        assert isinstance(rollout, RolloutConfig) and isinstance(rollout.multi_turn, MultiTurnConfig)
        # MLflow gets every key flattened as before (to_dict), never a dataclass's repr
        assert to_dict(dict(context.params))["rl"]["curriculum"]["band"] == [0.2, 0.7]
        # the domain block too: its keys typed by the domain's constructor, written back under `domain.*`
        domain = context.catalog.load("params:domain")
        assert isinstance(domain, DomainConfig) and isinstance(domain.settings, settings_class(ArithmeticDomain))
        assert domain.settings.splits == {"train": 4000, "validation": 400, "test": 400} and domain.settings.seed == 0
        written = to_dict(dict(context.params))["domain"]
        assert written["name"] == "arithmetic" and written["splits"]["train"] == 4000 and "settings" not in written
        assert pickle.loads(pickle.dumps(domain)) == domain  # workers get it as the run does


@pytest.mark.parametrize(("domain", "key", "says"), [
    ({"name": "extraction"}, "domain.splits", "has no default for splits"),
    ({"name": "mix", "domains": {"arithmetic": {"seeds": 1}}}, "domain.domains.arithmetic.seeds", "did you mean seed?"),
    ({"name": "mix", "domains": {"arithmetic": {"weight": 0}}}, "domain.domains.arithmetic.weight", "must be > 0"),
    ({"name": "mix", "domains": {"sums": {"name": "arithmetic", "splits": {"train": "many"}}}},
     "domain.domains.sums.splits.train", "expected int"),
    ({"name": "mix", "domains": {}}, "domain.domains", "at least one member"),
    ({"name": "arithmetic", "verifier": {"tolerance": float("inf")}}, "domain.verifier.tolerance", "finite"),
])
def test_a_domain_blocks_keys_are_checked_against_its_constructor_and_a_mixs_members_too(domain, key, says):
    with pytest.raises(ConfigError, match=re.escape(says)) as error:
        resolve({"domain": domain})
    assert error.value.key == key


def test_a_domain_block_and_its_mapping_build_the_same_domain():
    import dataclasses

    from rlvr_factory.schema import parse

    block = {"name": "mix", "domains": {"arithmetic": {"splits": {"train": 20, "validation": 4, "test": 4}},
                                        "extraction": {"splits": {"train": 10, "validation": 2, "test": 2}, "weight": 0.5}}}
    typed = parse(DomainConfig, block, "domain")
    members = typed.settings.domains
    assert members["extraction"]["weight"] == 0.5 and members["arithmetic"]["seed"] == 0  # defaults filled in
    assert [t.prompt for t in get_domain(typed).generate_tasks()] == [t.prompt for t in get_domain(block).generate_tasks()]
    assert get_domain(typed).weights == {"arithmetic": 1.0, "extraction": 0.5}
    assert dataclasses.is_dataclass(typed.settings) and to_dict(typed)["domains"]["extraction"]["name"] == "extraction"
    # a domain whose constructor takes **kwargs keeps a checked mapping of whatever it is given
    register_domain("open_ended_test", lambda **options: ArithmeticDomain(**options))
    try:
        open_ended = parse(DomainConfig, {"name": "open_ended_test", "seed": 3}, "domain")
        assert open_ended.settings == {"seed": 3} and get_domain(open_ended).seed == 3
        with pytest.raises(ConfigError, match="finite"):
            parse(DomainConfig, {"name": "open_ended_test", "seed": float("nan")}, "domain")
    finally:
        del DOMAINS["open_ended_test"]
