"""The environment conformance kit (conformance.py, `rlvr check-env`): every adapter and our own environments pass
it, and an environment that breaks a property fails exactly that check, saying what it saw."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.base import Step, Task
from rlvr_factory.conformance import check_environment
from rlvr_factory.verifiers.score import Score
from tests.pipelines.conftest import PROJECT_ROOT


def by_name(checks):
    return {c.name: c for c in checks}


def skyrl_rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"env_class": "gsm8k_multi_turn", "prompt": [{"role": "user", "content": f"What is {n} + 1?"}],
             "reward_spec": {"ground_truth": str(n + 1)}} for n in range(3)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"train": str(path)}


DOMAINS = {
    "arithmetic": lambda tmp: {"name": "arithmetic", "splits": {"train": 4}},
    "calculator": lambda tmp: {"name": "arithmetic", "splits": {"train": 4}, "tool": {"enabled": True}},
    "cad": lambda tmp: {"name": "cad", "splits": {"train": 4}},
    "textarena": lambda tmp: {"name": "textarena", "splits": {"train": 4},
                              "expert": "rlvr_factory.domains.textarena:guess_the_number"},
    "tictactoe": lambda tmp: {"name": "textarena", "env_id": "TicTacToe-v0", "num_players": 2, "splits": {"train": 4},
                              "opponent": "rlvr_factory.domains.textarena:random_move"},
    "skyrl_gym": lambda tmp: {"name": "skyrl_gym", "env_id": "gsm8k_multi_turn", "data": skyrl_rows(tmp),
                              "max_turns": 3},
    "openenv": lambda tmp: {"name": "openenv", "env_dir": str(PROJECT_ROOT / "examples/openenv/guess_number"),
                            "action_field": "guess", "observation_field": "message", "splits": {"train": 4},
                            "expert": "rlvr_factory.domains.textarena:guess_the_number", "max_turns": 5, "workers": 1},
}
PACKAGES = {"textarena": "textarena", "tictactoe": "textarena", "skyrl_gym": "skyrl_gym", "openenv": "openenv.core"}


@pytest.mark.parametrize("name", DOMAINS)
def test_every_adapter_and_our_own_environments_pass_the_kit(name, tmp_path):
    if name in PACKAGES:
        extra = PACKAGES[name].split(".")[0].replace("_", "-")
        pytest.importorskip(PACKAGES[name], reason=f"{PACKAGES[name]} is not installed (pip install -e '.[{extra}]')")
    domain = get_domain(DOMAINS[name](tmp_path))
    checks = check_environment(domain, domain.generate_tasks()[:3], turns=3, timeout_seconds=60,
                               tokens=name in ("calculator", "textarena"))
    assert all(c.passed for c in checks), "\n".join(f"{c.name}: {c.detail}" for c in checks if not c.passed)
    assert {c.name for c in checks} >= {"first_observation", "repeats", "no_carried_state", "bad_actions",
                                        "finite_rewards"}


# Environments that each break one property. They run in scheduler workers, which import this module.
EPISODES_SEEN = []


class Faulty:
    """Says the task's prompt, then answers each action with what `answer` makes of it."""

    untrusted = False

    def __init__(self, fault):
        self.fault = fault
        self.task = None

    def reset(self, task):
        self.task = task
        EPISODES_SEEN.append(task.task_id)
        return "something else" if self.fault == "not_the_prompt" else task.prompt

    def step(self, action):
        return getattr(self, self.fault)(action)

    def carries_state(self, action):
        return Step(f"episodes seen in this process: {len(EPISODES_SEEN)}", None, done=False)

    def unseeded(self, action):
        return Step(f"roll {random.SystemRandom().random()}", None, done=False)

    def non_finite(self, action):
        return Step("", Score(float("nan"), False), done=True)

    def runs_code(self, action):
        try:
            exec(action.split("\n")[0], {})  # noqa: S102 - the fault under test
        except Exception:  # noqa: BLE001
            pass
        return Step("", Score(0.0, False), done=True)

    def hangs_on_long(self, action):
        if len(action) > 50_000:
            time.sleep(3600)
        return Step("", Score(0.0, False), done=True)

    def not_the_prompt(self, action):
        return Step("", Score(0.0, False), done=True)


class FaultyDomain:
    name = "faulty"

    def __init__(self, fault):
        self.fault = fault

    def environment(self):
        return Faulty(self.fault)

    def demonstration(self, task, worked=True):
        return "[1]"


@pytest.mark.parametrize(("fault", "failing", "says"), [
    ("carries_state", {"no_carried_state"}, "after another task's episode in the same worker"),
    ("unseeded", {"repeats", "no_carried_state"}, "the episode differs in a fresh worker"),
    ("non_finite", {"finite_rewards"}, "reward [0.0, nan]"),
    ("runs_code", {"bad_actions"}, "the canary file was created"),
    ("hangs_on_long", {"bad_actions"}, "long: timeout"),
])
def test_an_environment_that_breaks_a_property_fails_that_check(fault, failing, says):
    tasks = [Task(f"t{i}", "faulty", f"prompt {i}", {}, 1, "train", "test") for i in range(2)]
    checks = by_name(check_environment(FaultyDomain(fault), tasks, turns=2, timeout_seconds=3, tokens=False))
    assert {name for name, c in checks.items() if not c.passed} == failing
    assert says in " ".join(checks[name].detail for name in failing)


def test_rlvr_check_env_prints_the_table_and_exits_1_on_a_failing_property(tmp_path):
    env = {"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin", "DO_NOT_TRACK": "true"}
    command = [sys.executable, "-m", "rlvr_factory.console", "check-env", "--domain", "tests.test_conformance:broken",
               "--no-tokens", "--timeout", "5"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert done.returncode == 1, done.stderr
    assert "first_observation  FAIL  b0: reset gave 'something else'" in done.stdout
    assert "bad_actions        pass" in done.stdout
    bad = subprocess.run([*command[:5], "nope_domain"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert bad.returncode == 2 and "unknown domain 'nope_domain'" in bad.stderr


class BrokenDomain(FaultyDomain):
    name = "broken"

    def generate_tasks(self):
        return [Task(f"b{i}", "broken", f"prompt {i}", {}, 1, "train", "test") for i in range(2)]

    def pretraining_corpus(self, size, seed, exclude):
        return []


def broken():
    return BrokenDomain("not_the_prompt")
