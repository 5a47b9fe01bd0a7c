"""Domains are found by name: built-ins, a `module:attr` path, a module of the package, or an entry point;
the environment protocol and its single-turn default."""

import sys

import pytest

from rlvr_factory.domains import (
    ENTRY_POINT_GROUP, DomainMix, Environment, SingleTurnEnvironment, Step, environment_for, get_domain,
    known_domains,
)
from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.domains.base import Score, Task
from rlvr_factory.domains.extraction import ExtractionDomain
from rlvr_factory.verification import VerifyConfig, verify_batch
from tests.domains.plugin import install_entry_point, install_module

VERIFY = VerifyConfig(workers=1, timeout_seconds=10.0, max_input_chars=10_000)
ARITHMETIC = {"name": "arithmetic", "levels": {1: {"digits": 1, "operands": 2, "ops": "+"}}, "splits": {"test": 3}}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A directory on sys.path holding the parity domain module (not part of this project)."""
    install_module(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("parity_domain", None)


def test_the_built_in_domains_are_known_by_name():
    assert {"arithmetic", "gsm8k", "math", "extraction", "mix"} <= set(known_domains())
    assert isinstance(get_domain({"name": "extraction", "splits": {"train": 2}}), ExtractionDomain)


def test_a_domain_module_outside_the_project_is_found_by_its_module_and_class(plugin_dir):
    domain = get_domain({"name": "parity_domain:ParityDomain", "splits": {"train": 3, "test": 2}, "seed": 1})
    tasks = domain.generate_tasks()
    assert [t.split for t in tasks] == ["train"] * 3 + ["test"] * 2
    assert all(domain.score(domain.demonstration(t), t.reference).correct for t in tasks)


def test_a_domain_is_found_through_the_entry_point_group(plugin_dir):
    assert "parity" not in known_domains()
    install_entry_point(plugin_dir)
    assert "parity" in known_domains()
    domain = get_domain({"name": "parity", "splits": {"test": 2}})
    assert type(domain).__name__ == "ParityDomain" and ENTRY_POINT_GROUP == "rlvr_factory.domains"


def test_a_plugin_domain_verifies_in_the_pools_worker_processes(plugin_dir):
    domain = get_domain({"name": "parity_domain:ParityDomain", "splits": {"test": 4}})
    tasks = domain.generate_tasks()
    answers = [t.reference["answer"] for t in tasks]
    scores, stats = verify_batch(domain, answers[:2] + ["maybe", "maybe"], [t.reference for t in tasks], VERIFY)
    assert [s.correct for s in scores] == [True, True, False, False]
    assert stats["dispatched"] == 4  # the full check ran in a worker that imported the plugin


def test_a_bad_module_path_says_what_to_give():
    with pytest.raises(ValueError, match="cannot load domain 'no_such_module:X'.*'module:attr'"):
        get_domain({"name": "no_such_module:X"})


def test_a_block_without_a_name_is_refused():
    with pytest.raises(ValueError, match="needs a 'name'"):
        get_domain({"splits": {}})


# the environment


def test_the_single_turn_environment_observes_the_prompt_and_ends_after_one_scored_action():
    domain = get_domain(ARITHMETIC)
    task = domain.generate_tasks()[0]
    env = environment_for(domain)
    assert isinstance(env, SingleTurnEnvironment) and isinstance(env, Environment)
    assert env.reset(task) == task.prompt
    step = env.step(f"\\boxed{{{task.reference['answer']}}}")
    assert step.done and step.score.correct and step.observation == ""
    with pytest.raises(RuntimeError, match="reset"):
        env.step("again")


class CountdownEnvironment:
    """A multi-turn environment: the model must say 'go' within three turns."""

    def reset(self, task):
        self.turns = 0
        return "say go"

    def step(self, action):
        self.turns += 1
        done = action == "go" or self.turns == 3
        return Step("" if done else "again", Score(reward=float(action == "go"), correct=action == "go"), done)


class CountdownDomain(ArithmeticDomain):
    def environment(self):
        return CountdownEnvironment()


def test_a_domain_with_its_own_environment_gets_it_for_multi_turn_episodes():
    domain = CountdownDomain(levels=ARITHMETIC["levels"], splits={"test": 1})
    env = environment_for(domain)
    env.reset(domain.generate_tasks()[0])
    assert env.step("wait") == Step("again", Score(0.0, False), False)
    assert env.step("go").done and isinstance(env, Environment)


def test_a_mix_is_a_domain_like_any_other():
    mix = get_domain({"name": "mix", "domains": {"arithmetic": {k: v for k, v in ARITHMETIC.items() if k != "name"},
                                                 "extraction": {"splits": {"test": 2}, "weight": 2}}})
    assert isinstance(mix, DomainMix) and mix.weights == {"arithmetic": 1.0, "extraction": 2.0}
    assert {t.domain for t in mix.generate_tasks()} == {"arithmetic", "extraction"}
    task = Task("t", "arithmetic", "Compute 1+1", {"answer": "2", "steps": []}, 1, "test", "s")
    with pytest.raises(ValueError, match="needs a 'domain' tag"):
        mix.gold(task.reference)
