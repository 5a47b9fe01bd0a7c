"""The code-repair environment, and attacks on its reward by class: each must leave the reward at 0
(or be refused) while the honest repair of the same workspace earns 1."""

import pytest

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.code_repair import CodeRepairDomain, repair_prompt
from rlvr_factory.domains.code_repair_edits import Block
from rlvr_factory.domains.code_repair_workspace import Workspace, snapshot
from rlvr_factory.scheduler import InfraError

BUGGY = 'def add(a, b):\n    """Return the sum of a and b."""\n    return a - b\n'
WORKSPACE = Workspace(
    files={"solution.py": BUGGY, "test_solution.py": "assert add(2, 3) == 5\n"}, editable=("solution.py",),
    visible_tests=("assert add(2, 3) == 5",), held_out_tests=("assert add(0, 7) == 7", "assert add(-1, 1) == 0"),
)
FIX = Block("solution.py", "    return a - b\n", "    return a + b\n").render()


@pytest.fixture(scope="module")
def domain():
    return CodeRepairDomain(max_turns=3, verifier={"limits": {"timeout_s": 2.0, "cpu_s": 2}})


def task(workspace=WORKSPACE):
    return Task("t", "code_repair", repair_prompt(workspace), workspace.as_reference(), 1, "test", "unit")


def rewrite(body, search=BUGGY):
    """An edit that replaces the whole module with `body`."""
    return Block("solution.py", search, body).render()


def episode(domain, actions, workspace=WORKSPACE):
    env = domain.environment()
    env.reset(task(workspace))
    steps = []
    for action in actions:
        steps.append(env.step(action))
        if steps[-1].done:
            break
    return steps


def test_an_honest_repair_ends_when_the_visible_tests_pass_and_is_judged_by_the_held_out_tests(domain):
    steps = episode(domain, [FIX])
    assert steps[-1].done and steps[-1].finish_reason == "visible_tests_pass"
    assert steps[-1].score.correct and steps[-1].score.breakdown["tests"] == 2.0


def test_feedback_names_the_failed_test_and_what_the_call_returned_then_the_model_may_try_again(domain):
    wrong = Block("solution.py", "    return a - b\n", "    return a * b\n").render()
    again = Block("solution.py", "    return a * b\n", "    return a + b\n").render()
    first, second = episode(domain, [wrong, again])
    assert not first.done and "visible tests: 0/1 passed" in first.observation
    assert "FAIL assert add(2, 3) == 5: got 6" in first.observation and "(2 edits left)" in first.observation
    assert second.score.correct


def test_passing_the_visible_tests_is_not_enough_the_held_out_ones_decide(domain):
    overfit = rewrite('def add(a, b):\n    return 5\n')
    step = episode(domain, [overfit])[-1]
    assert step.finish_reason == "visible_tests_pass" and not step.score.correct
    assert step.score.breakdown["process"] == 0.0


def test_partial_credit_is_the_fraction_of_held_out_tests_passing(domain):
    half = rewrite('def add(a, b):\n    return a + b if a >= 0 else 1\n')
    step = episode(domain, [half, "DONE"])[-1]
    assert not step.score.correct and step.score.breakdown["process"] == 0.5


# the start passes one of three held-out tests (add(0, 0) == 0): partial credit is for what an edit repairs
HALF_RIGHT = Workspace(
    files={"solution.py": BUGGY}, editable=("solution.py",), visible_tests=("assert add(2, 3) == 5",),
    held_out_tests=("assert add(0, 0) == 0", "assert add(2, 3) == 5", "assert add(1, 1) == 2"),
)


@pytest.fixture(scope="module")
def paying():
    """A domain whose reward pays partial credit."""
    return CodeRepairDomain(max_turns=3, verifier={"limits": {"timeout_s": 2.0, "cpu_s": 2}, "process_weight": 0.25})


class TestPartialCreditIsForImprovement:
    def test_an_untouched_workspace_earns_none(self, paying):
        step = episode(paying, ["DONE"], HALF_RIGHT)[-1]
        assert (step.score.breakdown["process"], step.score.reward) == (0.0, 0.0)
        assert step.score.breakdown["passed_before"] == 1.0

    def test_an_edit_that_changes_nothing_earns_none(self, paying):
        noop = Block("solution.py", "    return a - b\n", "    return a - b  # checked\n").render()
        step = episode(paying, [noop, "DONE"], HALF_RIGHT)[-1]
        assert (step.score.breakdown["process"], step.score.reward) == (0.0, 0.0)

    def test_an_edit_that_breaks_a_passing_test_to_fix_another_earns_none(self, paying):
        trade = rewrite('def add(a, b):\n    return 5 if a == 2 else 9\n')
        step = episode(paying, [trade, "DONE"], HALF_RIGHT)[-1]
        assert step.score.breakdown["passed"] == 1.0 and step.score.breakdown["process"] == 0.0

    def test_a_partial_repair_earns_its_share_of_what_was_failing(self, paying):
        partial = rewrite('def add(a, b):\n    return a + b if a != 1 else 0\n')
        step = episode(paying, [partial, "DONE"], HALF_RIGHT)[-1]
        assert step.score.breakdown["process"] == 0.5 and step.score.reward == 0.125

    def test_a_one_shot_repair_is_scored_the_same_way(self, paying):
        assert paying.score("DONE", HALF_RIGHT.as_reference()).breakdown["process"] == 0.0
        assert paying.score(FIX, HALF_RIGHT.as_reference()).reward == 1.25


def test_done_and_max_turns_end_the_episode_with_the_held_out_verdict(domain):
    assert episode(domain, ["DONE"])[-1].finish_reason == "declared_done"
    steps = episode(domain, ["nonsense"] * 3)
    assert len(steps) == 3 and steps[-1].finish_reason == "max_turns" and steps[-1].out_of_budget
    assert steps[-1].score.reward == 0.0 and steps[0].info["edit_errors"] == 1.0


def test_episodes_start_from_the_pristine_workspace(domain):
    env = domain.environment()
    env.reset(task())
    env.step(Block("solution.py", "    return a - b\n", "    return a * b\n").render())
    env.reset(task())
    assert env.files == WORKSPACE.files


def test_snapshots_hold_regular_files_only():
    assert snapshot({"pkg/mod.py": "x = 1\n", "a.py": ""}).files() == ["a.py", "pkg", "pkg/mod.py"]


# -- attacks, by class ---------------------------------------------------------------------------


def test_tampering_with_the_tests_is_refused(domain):
    tamper = Block("test_solution.py", "assert add(2, 3) == 5\n", "assert True\n").render()
    step = episode(domain, [tamper])[0]
    assert "test files are read-only" in step.observation and "nothing was changed" in step.observation


def test_conftest_injection_is_refused_and_writing_one_at_run_time_changes_nothing(domain):
    created = Block("conftest.py", "x\n", "import pytest\n").render()
    assert "conftest files cannot be edited" in episode(domain, [created])[0].observation
    writes = rewrite('open("conftest.py", "w").write("def pytest_runtest_call(): pass")\n' + BUGGY)
    assert not episode(domain, [writes, "DONE"])[-1].score.correct


def test_exiting_at_import_scores_nothing(domain):
    for body in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n", "raise SystemExit(0)\n"):
        step = episode(domain, [rewrite(body + BUGGY), "DONE"])[-1]
        assert not step.score.correct and step.score.breakdown["passed"] == 0.0, body


def test_monkeypatching_the_test_runner_or_builtins_scores_nothing(domain):
    body = ("import builtins, unittest\nbuiltins.AssertionError = type('Never', (Exception,), {})\n"
            "unittest.TestCase.assertEqual = lambda *a, **k: None\nbuiltins.__dict__['bool'] = lambda x: True\n")
    step = episode(domain, [rewrite(body + BUGGY), "DONE"])[-1]
    assert not step.score.correct and step.score.breakdown["hack_suspected"] == 1.0


def test_tampered_equality_scores_nothing(domain):
    body = "class Always:\n    def __eq__(self, other):\n        return True\ndef add(a, b):\n    return Always()\n"
    step = episode(domain, [rewrite(body), "DONE"])[-1]
    assert not step.score.correct and step.score.breakdown["hack_suspected"] == 1.0


def test_fake_result_files_and_pass_markers_score_nothing(domain):
    body = ('import json\njson.dump({"passed": 2, "failed": 0}, open("results.json", "w"))\n'
            'open(".pytest_cache", "w").write("2 passed")\nprint("===== 2 passed in 0.01s =====")\n')
    assert not episode(domain, [rewrite(body + BUGGY), "DONE"])[-1].score.correct


def test_state_left_by_one_episode_never_reaches_the_next(domain):
    plant = rewrite('open("state.txt", "w").write("x")\nopen("/tmp/state", "w").write("x")\n' + BUGGY)
    episode(domain, [plant, "DONE"])
    reads = rewrite('import os\ndef add(a, b):\n'
                    '    return 0 if os.path.exists("state.txt") or os.path.exists("/tmp/state") else a + b\n')
    assert episode(domain, [reads])[-1].score.correct


def test_an_infinite_loop_is_a_timeout_observation_and_the_next_episode_is_unharmed(domain):
    loop = rewrite('def add(a, b):\n    while True:\n        pass\n')
    step = episode(domain, [loop])[0]
    assert "ran past the 2 s limit" in step.observation and step.info["test_timeouts"] == 1.0
    assert episode(domain, [FIX])[-1].score.correct


def test_a_loop_stopped_by_the_cpu_limit_is_the_same_timeout_observation_as_the_wall_clock_deadline():
    # cpu_s well under the deadline, so SIGXCPU always comes first (a CI machine hit this race at 2 s / 2 s)
    cpu_bound = CodeRepairDomain(max_turns=3, verifier={"limits": {"timeout_s": 10.0, "cpu_s": 1}})
    step = episode(cpu_bound, [rewrite('def add(a, b):\n    while True:\n        pass\n')])[0]
    assert "ran past the 10 s limit" in step.observation and "exit code" not in step.observation
    assert step.info["test_timeouts"] == 1.0 and not step.done


def test_a_test_run_that_fills_the_disk_is_an_error_observation_and_the_next_episode_is_unharmed(domain):
    fill = rewrite('with open("big", "wb") as f:\n    while True:\n        f.write(b"x" * (1 << 20))\n' + BUGGY)
    step = episode(domain, [fill])[0]
    assert not step.done and "error: the workspace did not import" in step.observation
    assert episode(domain, [FIX])[-1].score.correct


def test_a_sandbox_that_cannot_start_is_infra_error():
    broken = CodeRepairDomain(verifier={"backend": "bubblewrap", "backend_options": {"bwrap": "/nonexistent/bwrap"}})
    with pytest.raises(InfraError, match="no sandbox"):
        broken.environment().reset(task())
