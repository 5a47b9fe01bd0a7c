"""OpenEnv environments through their servers (domains/openenv.py): a directory served by each worker or a running
server, seeded tasks, each call a session that replays the episode, the server's failures as infra_error."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.base import Task
from rlvr_factory.domains.openenv import _STARTED, server_url, start_server
from rlvr_factory.rollout.steps import Executor, ExecutorConfig, Failed
from rlvr_factory.scheduler import InfraError, RetryPolicy
from tests.pipelines.conftest import PROJECT_ROOT

pytest.importorskip("openenv.core", reason="openenv-core is not installed: pip install -e '.[openenv]'")
EXAMPLES = PROJECT_ROOT / "examples/openenv"
GUESS = {"name": "openenv", "env_dir": str(EXAMPLES / "guess_number"), "action_field": "guess",
         "observation_field": "message", "expert": "rlvr_factory.domains.textarena:guess_the_number",
         "max_turns": 5, "splits": {"train": 4, "test": 2}, "workers": 1}
LEGS = {"name": "openenv", "env_dir": str(EXAMPLES / "reasoning_gym_env"), "action_field": "answer",
        "observation_field": "question", "max_turns": 1, "splits": {"train": 3}, "workers": 1,
        "reset_options": {"dataset_name": "leg_counting", "dataset_config": {}, "size": 1}}
SCHEDULER = ExecutorConfig(executor="scheduler", workers=1, timeout_seconds=60.0,
                           retry=RetryPolicy(max_attempts=2, backoff_seconds=0.1))


def task(seed):
    return Task(f"t{seed}", "openenv", "", {"seed": seed}, 1, "train", "")


def env_dir(path, app_source):
    """An OpenEnv environment directory whose server/app.py is `app_source`."""
    (path / "server").mkdir(parents=True)
    (path / "openenv.yaml").write_text("app: server.app:app\n")
    (path / "server/app.py").write_text(textwrap.dedent(app_source))
    return path


def episode(domain, seed, actions):
    env = domain.environment()
    seen = [env.reset(task(seed))]
    for action in actions:
        seen.append(env.step(action))
        if seen[-1].done:
            break
    return seen


@pytest.fixture(scope="module")
def served():
    """GuessTheNumber's server, started once for the module's tests that share it by URL."""
    server = start_server(GUESS["env_dir"], 60)
    yield server.url
    server.process.kill()


@pytest.fixture(scope="module")
def guess(served):
    return get_domain({**GUESS, "env_dir": None, "url": served})


def test_tasks_are_distinct_seeds_whose_prompt_is_the_servers_first_observation(guess):
    tasks = guess.generate_tasks()
    assert [t.split for t in tasks] == ["train"] * 4 + ["test"] * 2
    assert len({t.reference["seed"] for t in tasks}) == 6
    assert tasks[0].prompt.startswith("I am thinking of a number between 1 and 20")
    assert tasks[0].prompt == episode(guess, tasks[0].reference["seed"], [])[0]


def test_the_experts_episode_wins_and_hints_come_turn_by_turn(guess):
    for t in guess.generate_tasks()[:3]:
        actions = guess.tool_demonstration(t)[::2]
        steps = episode(guess, t.reference["seed"], actions)[1:]
        assert steps[-1].done and steps[-1].score.correct and steps[-1].score.reward == 1.0
        assert all(s.observation.startswith("The number is") and s.reward == 0.0 for s in steps[:-1])
    lost = episode(guess, 3, ["[0]"] * 5)[-1]
    assert lost.done and not lost.score.correct and lost.score.reward == 0.0


def test_an_episode_pickles_mid_game_and_goes_on_in_another_server():
    env = get_domain(GUESS).environment()
    env.reset(task(11))
    env.step("[10]")
    copy = pickle.loads(pickle.dumps(env))
    (server,) = [s for (pid, _), s in _STARTED.items() if pid == os.getpid()]
    server.process.kill()  # the next call starts a new server and replays the episode there
    server.process.wait()
    assert copy.step("[5]") == env.step("[5]")


def test_openenvs_reasoning_gym_env_asks_the_seeds_question_and_scores_with_reasoning_gym():
    import reasoning_gym

    legs = get_domain(LEGS)
    for t in legs.generate_tasks():
        entry = reasoning_gym.create_dataset("leg_counting", seed=t.reference["seed"], size=1)[0]
        assert t.prompt == entry["question"]
        assert legs.score(entry["answer"], t.reference).correct
        wrong = str(int(entry["answer"]) + 1)
        for junk in (wrong, "", "x" * 10_000, f"{wrong} or {entry['answer']}"):
            assert not legs.score(junk, t.reference).correct


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The environment `openenv init` makes (OpenEnv's template: it echoes each message, reward 0.1 a character)."""
    out = tmp_path_factory.mktemp("template")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no `uv` on the path: no lock file, offline
    subprocess.run([sys.executable, "-m", "openenv.cli", "init", "echo_env", "-o", str(out)], check=True,
                   capture_output=True, env=env, timeout=300)
    return out / "echo_env"


def test_the_template_of_openenv_init_runs_with_its_observation_as_json(template):
    domain = get_domain({"name": "openenv", "env_dir": str(template), "splits": {"train": 2}})
    first, *steps = episode(domain, 5, ["hello", "hi"])
    assert first == '{"echoed_message": "Echo Env environment ready!", "message_length": 0}'
    assert [(s.observation, s.reward, s.done) for s in steps] == [
        ('{"echoed_message": "hello", "message_length": 5}', 0.5, False),
        ('{"echoed_message": "hi", "message_length": 2}', 0.2, False)]


def test_in_scheduler_workers_an_action_the_environment_rejects_is_an_error_with_its_message(served):
    wrong_field = get_domain({**GUESS, "env_dir": None, "url": served, "action_field": "answer"})
    with Executor(SCHEDULER) as executor:
        ((env, first),) = executor.run("reset", [wrong_field.environment()], [task(1)])
        ((_, step),) = executor.run("step", [env], ["[10]"])
    assert first.startswith("I am thinking")
    assert isinstance(step, Failed) and step.status == "error" and "VALIDATION_ERROR" in step.message


def test_a_server_that_cannot_be_reached_or_started_is_infra_error_never_a_wrong_answer(tmp_path):
    with socket_closed() as port:
        unreachable = get_domain({**GUESS, "env_dir": None, "url": f"http://127.0.0.1:{port}", "timeout_seconds": 5})
    broken = env_dir(tmp_path / "broken", "raise RuntimeError('no model weights here')")
    crashing = get_domain({**GUESS, "env_dir": str(broken), "start_seconds": 30})
    with Executor(SCHEDULER) as executor:
        results = executor.run("reset", [unreachable.environment(), crashing.environment()], [task(1), task(1)])
    (_, down), (_, crashed) = results
    assert isinstance(down, Failed) and down.status == "infra_error" and "failed" in down.message
    assert isinstance(crashed, Failed) and crashed.status == "infra_error"
    assert "did not start" in crashed.message and "no model weights here" in crashed.message


class socket_closed:
    """A port on 127.0.0.1 that nothing listens on."""

    def __enter__(self):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc):
        return False


def test_an_environment_that_ignores_the_seed_fails_its_replay_naming_the_turn(tmp_path):
    unseeded = env_dir(tmp_path / "unseeded", """
        import random
        from openenv.core.env_server.http_server import create_app
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.types import Action, Observation, State

        class Say(Action):
            message: str

        class Heard(Observation):
            text: str = ""

        class Unseeded(Environment):
            def reset(self, seed=None, **kwargs):
                return Heard(text="go")

            def step(self, action, **kwargs):
                return Heard(text=str(random.random()), reward=0.0)

            @property
            def state(self):
                return State()

        app = create_app(Unseeded, Say, Heard)
    """)
    domain = get_domain({"name": "openenv", "env_dir": str(unseeded), "observation_field": "text"})
    env = domain.environment()
    env.reset(task(1))
    env.step("a")
    with pytest.raises(RuntimeError, match="does not repeat from its seed: replaying the episode, turn 1 gave"):
        env.step("b")


def test_servers_started_by_a_worker_play_as_a_shared_one_and_stop_with_the_worker(guess):
    own = get_domain(GUESS)
    with Executor(SCHEDULER) as executor:
        ((env, first),) = executor.run("reset", [own.environment()], [task(7)])
        ((_, step),) = executor.run("step", [env], ["[10]"])
        assert [first, step] == episode(guess, 7, ["[10]"])
        workers = psutil.Process().children(recursive=True)
        servers = [p for p in workers if "uvicorn" in " ".join(p.cmdline()) and p.ppid() != os.getpid()]
        assert len(servers) == 1
    gone, alive = psutil.wait_procs(servers, timeout=15)
    assert not alive


def test_a_bad_configuration_fails_at_start_up(tmp_path):
    with pytest.raises(ValueError, match="exactly one of env_dir"):
        get_domain({"name": "openenv"})
    with pytest.raises(ValueError, match="exactly one of env_dir"):
        get_domain({"name": "openenv", "env_dir": GUESS["env_dir"], "url": "http://127.0.0.1:1"})
    with pytest.raises(ValueError, match="has no openenv.yaml"):
        get_domain({"name": "openenv", "env_dir": str(tmp_path)})
    with pytest.raises(ValueError, match="sets no seed"):
        get_domain({**GUESS, "reset_options": {"seed": 1}})
    with pytest.raises(InfraError, match="did not start"):
        (tmp_path / "openenv.yaml").write_text("app: nowhere:app\n")
        server_url(str(tmp_path), 20)


def test_a_hanging_step_is_cut_at_the_limit(tmp_path):
    slow = env_dir(tmp_path / "slow", """
        import time
        from openenv.core.env_server.http_server import create_app
        from openenv.core.env_server.interfaces import Environment
        from openenv.core.env_server.types import Action, Observation, State

        class Say(Action):
            message: str

        class Slow(Environment):
            def reset(self, seed=None, **kwargs):
                return Observation()

            def step(self, action, **kwargs):
                time.sleep(3600)

            @property
            def state(self):
                return State()

        app = create_app(Slow, Say, Observation)
    """)
    server = start_server(str(slow), 60)
    domain = get_domain({"name": "openenv", "url": server.url})
    config = ExecutorConfig(executor="scheduler", workers=1, timeout_seconds=5.0)
    try:
        with Executor(config) as executor:
            ((env, _),) = executor.run("reset", [domain.environment()], [task(1)])
            start = time.perf_counter()
            ((_, step),) = executor.run("step", [env], ["x"])
    finally:
        server.process.kill()
    assert isinstance(step, Failed) and step.status == "timeout"
    assert time.perf_counter() - start < 30


def test_the_reward_audit_attacks_openenvs_reasoning_gym_env_through_its_server_and_nothing_pays():
    from rlvr_factory.audit import AuditConfig, audit
    from rlvr_factory.verification import VerifyConfig

    legs = get_domain({**LEGS, "splits": {"train": 2, "test": 1}})
    report = audit(legs, legs.generate_tasks(), VerifyConfig(workers=1, timeout_seconds=60.0), AuditConfig(tasks_per_group=3))
    (group,) = report.groups.values()
    assert report.failing == {} and not group.canary and sum(group.tried.values()) >= 20
