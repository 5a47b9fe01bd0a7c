"""The code verifier: program extraction, the judge outside the sandbox, statuses and the breakdown."""

from __future__ import annotations

import json
import os
import pickle
import time

import pytest

from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers.code import CodeTask, CodeVerifier, extract_program, hack_signs
from rlvr_factory.verifiers.pool import VerifierPool
from tests.sandbox.procs import needs_bwrap, sandbox_agents


SQUARE = {
    "format": "humaneval",
    "prompt": 'from typing import List\n\n\ndef helper(x):\n    return x * x\n\n\ndef squares(xs: List[int]) -> List[int]:\n    """Square every number."""\n',
    "test": "def check(candidate):\n    assert candidate([1, 2]) == [1, 4]\n    assert candidate([]) == []\n"
            "    assert candidate([3]) == [helper(3)]\n    for n in range(5):\n        assert candidate([n]) == [n * n]\n",
    "entry_point": "squares",
}
MBPP = {"format": "mbpp", "test_imports": ["import math"],
        "test_list": ["assert area(1) == math.pi", "assert math.isclose(area(2), 12.566, rel_tol=1e-3)", "assert area(0) == 0"]}
GOLD, MBPP_GOLD = json.dumps(SQUARE), json.dumps(MBPP)


@pytest.fixture(scope="module")
def verifier():
    v = CodeVerifier(limits={"timeout_s": 2.0, "cpu_s": 2}, process_weight=0.0)
    yield v
    v.close()


class TestExtraction:
    task = CodeTask.from_reference(SQUARE)

    def test_a_body_continuing_the_prompt(self):
        program = extract_program("    return [x * x for x in xs]\n", self.task)
        assert program == SQUARE["prompt"] + "    return [x * x for x in xs]\n"

    def test_a_fenced_block_follows_the_prompt_so_its_imports_stay(self):
        completion = "Here:\n```python\ndef squares(xs):\n    return [helper(x) for x in xs]\n```\nDone."
        program = extract_program(completion, self.task)
        assert program.startswith(SQUARE["prompt"]) and program.endswith("return [helper(x) for x in xs]\n")

    def test_the_block_that_defines_the_function_is_chosen(self):
        completion = "```\nprint('usage')\n```\n```python\ndef squares(xs):\n    return xs\n```"
        assert "return xs" in extract_program(completion, self.task)

    def test_a_whole_function_without_a_fence_follows_the_prompt(self):
        program = extract_program("def squares(xs):\n    return [x * x for x in xs]\n", self.task)
        assert program == SQUARE["prompt"] + "\ndef squares(xs):\n    return [x * x for x in xs]\n"

    def test_trailing_text_after_a_body_is_cut_at_a_stop_sequence(self):
        program = extract_program("    return [x * x for x in xs]\n\nprint(squares([2]))\nThat is all!", self.task)
        assert program.endswith("return [x * x for x in xs]\n")

    def test_no_program_is_none(self):
        assert extract_program("I don't know.", self.task) is None
        assert extract_program("```python\ndef other():\n    pass\n```", self.task) is None

    def test_an_mbpp_completion_is_code_or_a_block(self):
        task = CodeTask.from_reference(MBPP)
        assert task.candidate_names() == ["area"]
        assert extract_program("def area(r):\n    return 3.14 * r * r\n", task).startswith("def area")
        assert extract_program("Sure!\n```py\nimport math\ndef area(r):\n    return math.pi*r*r\n```", task).startswith("import math")


class TestReferences:
    def test_a_malformed_reference_says_what_is_missing(self):
        with pytest.raises(ValueError, match="entry_point"):
            CodeTask.from_reference({"format": "humaneval", "prompt": "", "test": ""})
        with pytest.raises(ValueError, match="format"):
            CodeTask.from_reference({"format": "apps"})
        with pytest.raises(ValueError, match="test_list"):
            CodeTask.from_reference({"format": "mbpp", "test_list": []})

    def test_an_mbpp_function_named_like_a_builtin_is_found(self):
        task = CodeTask.from_reference({"format": "mbpp", "test_list": ["assert sum(1, 2) == 3"]})
        assert task.candidate_names() == ["sum"]


class TestQuickScore:
    def test_no_program_scores_zero_without_a_sandbox(self):
        score = CodeVerifier(backend_options={"bwrap": "no-such-bwrap"}).quick_score("no code here", GOLD)
        assert (score.reward, score.status, score.breakdown["format"]) == (0.0, "ok", 0.0)
        assert set(score.breakdown) == {"outcome", "process", "format", "tests", "passed", "hack_suspected", "load_error"}

    def test_a_program_needs_the_full_check(self):
        assert CodeVerifier().quick_score("    return xs\n", GOLD) is None

    def test_a_malformed_gold_is_an_error(self):
        assert CodeVerifier().quick_score("    return xs\n", "{not json").status == "error"

    def test_an_oversized_completion_is_an_error(self):
        assert CodeVerifier(max_program_chars=10).quick_score("    return [x * x for x in xs]\n", GOLD).status == "error"


@needs_bwrap
class TestScore:
    def test_a_correct_body_passes_every_test(self, verifier):
        score = verifier.score("    return [x * x for x in xs]\n", GOLD)
        assert score.correct and score.reward == 1.0 and score.status == "ok"
        assert score.breakdown == {"outcome": 1.0, "process": 1.0, "format": 1.0, "tests": 4.0, "passed": 4.0,
                                   "hack_suspected": 0.0, "load_error": 0.0}

    def test_process_is_the_fraction_of_assert_statements_passed(self):
        v = CodeVerifier(outcome_weight=0.5, process_weight=0.5)
        score = v.score("    return [x * x for x in xs if x != 3]\n", GOLD)  # fails only `[3]` and n=3 in the loop
        assert not score.correct and score.breakdown["passed"] == 2.0 and score.breakdown["process"] == 0.5
        assert score.reward == pytest.approx(0.25)
        v.close()

    def test_an_mbpp_task_runs_each_assert_line(self, verifier):
        assert verifier.score("import math\ndef area(r):\n    return math.pi * r * r\n", MBPP_GOLD).correct
        wrong = verifier.score("def area(r):\n    return 3.14 * r * r\n", MBPP_GOLD)
        assert not wrong.correct and wrong.breakdown["passed"] == 2.0 and wrong.breakdown["tests"] == 3.0

    def test_a_candidate_exception_fails_its_test_and_an_expected_one_passes(self, verifier):
        task = dict(SQUARE, test="def check(candidate):\n    try:\n        candidate(None)\n        assert False\n"
                                 "    except TypeError:\n        pass\n    assert candidate([2]) == [4]\n")
        assert verifier.score("    return [x * x for x in xs]\n", json.dumps(task)).correct
        assert not verifier.score("    raise ValueError('no')\n", json.dumps(task)).correct

    def test_a_slow_candidate_is_a_timeout_with_no_reward(self, verifier):
        score = verifier.score("    while True:\n        pass\n", GOLD)
        assert (score.reward, score.status, score.breakdown["hack_suspected"]) == (0.0, "timeout", 0.0)

    def test_a_busy_candidate_stopped_by_its_cpu_limit_is_a_timeout_too(self):
        # whichever time limit a busy loop reaches first (on a quiet machine, the CPU limit), the status is timeout
        cpu_bound = CodeVerifier(limits={"timeout_s": 30.0, "cpu_s": 1}, process_weight=0.0)
        score = cpu_bound.score("    while True:\n        pass\n", GOLD)
        assert (score.reward, score.status, score.breakdown["hack_suspected"]) == (0.0, "timeout", 0.0)

    def test_a_program_that_fails_to_load_scores_zero(self, verifier):
        score = verifier.score("```python\nimport no_such_module\ndef squares(xs):\n    return xs\n```", GOLD)
        assert score.reward == 0.0 and score.breakdown["load_error"] == 1.0 and score.status == "ok"

    def test_no_sandbox_is_an_infra_error_retried_then_reported_never_a_wrong_answer(self):
        broken = CodeVerifier(backend_options={"bwrap": "no-such-bwrap"})
        with pytest.raises(InfraError, match="no sandbox"):
            broken.score("    return xs\n", GOLD)
        with VerifierPool(broken, workers=1, timeout=20.0) as pool:
            (score,) = pool.score_many([("    return xs\n", GOLD)])
            assert pool.stats["retries"] >= 1
        assert score.status == "infra_error" and score.reward == 0.0

    def test_the_verifier_runs_in_a_verifier_pool_worker(self):
        honest = ("    return [x * x for x in xs]\n", GOLD)
        cheat = ("    import sys\n    sys.exit(0)\n", GOLD)
        before = sandbox_agents(os.getpid())
        with VerifierPool(CodeVerifier(), workers=1, timeout=20.0) as pool:  # the worker's RLIMIT_AS is on
            scores = pool.score_many([honest, cheat, ("no idea, sorry", GOLD)])
            assert len(sandbox_agents(os.getpid()) - before) == 1  # the worker's own sandbox
        assert [s.correct for s in scores] == [True, False, False]
        assert scores[1].breakdown["hack_suspected"] == 1.0
        assert pool.stats["quick"] == 1
        deadline = time.monotonic() + 5
        while sandbox_agents(os.getpid()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not sandbox_agents(os.getpid()) - before  # the killed worker's sandbox went with it


def test_the_verifier_pickles_without_its_sandbox():
    v = CodeVerifier(limits={"timeout_s": 1.0})
    v.sandbox()
    clone = pickle.loads(pickle.dumps(v))
    assert clone._sandbox is None and clone.limits.timeout_s == 1.0


def test_by_default_a_program_cannot_take_more_than_4_gb_with_all_its_processes():
    limits = CodeVerifier().limits
    assert limits.memory_mb * limits.nproc <= 4096 and limits.timeout_s == 3.0
    assert CodeVerifier(limits={"timeout_s": 1.0}).limits.nproc == limits.nproc  # a partial override keeps the rest


def test_ordinary_solutions_show_no_hack_signs():
    assert hack_signs("import math\nfrom typing import List\ndef f(xs):\n    return sorted(set(xs))\n") == []


def test_hack_signs_name_what_they_saw():
    signs = hack_signs("import sys, builtins\nbuiltins.len = lambda x: 0\nsys.exit(0)\n"
                       "class A:\n    def __eq__(self, o):\n        return True\n")
    assert {"call:sys.exit", "def:__eq__", "import:builtins", "patch:builtins.len"} <= set(signs)
