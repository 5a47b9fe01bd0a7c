"""Code-repair evaluation on real episodes: a tiny policy that repairs one task and gives up on the other."""

import pytest

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.code_repair import CodeRepairDomain, repair_prompt
from rlvr_factory.domains.code_repair_edits import Block
from rlvr_factory.domains.code_repair_eval import repair_rates, repair_report
from rlvr_factory.domains.code_repair_workspace import Workspace
from rlvr_factory.evaluation import Verdict, evaluate_policy
from rlvr_factory.rollout.agent_loop import RolloutConfig
from rlvr_factory.rollout.engine import SamplingConfig
from rlvr_factory.training.lm import seed_everything
from rlvr_factory.training.sft import SFTConfig, encode_demonstrations, supervised_train
from rlvr_factory.verification import VerifyConfig
from tests.conftest import make_tiny_policy


def repair_task(name, buggy, visible, held_out, kind, difficulty):
    workspace = Workspace({"s.py": buggy}, ("s.py",), (visible,), (held_out,))
    reference = {**workspace.as_reference(), "kinds": [kind]}
    return Task(name, "code_repair", repair_prompt(workspace), reference, difficulty, "test", "unit")


TASKS = [
    repair_task("add", "def f(a, b):\n    return a - b\n", "assert f(2, 3) == 5", "assert f(0, 7) == 7",
                "operator_swap", 1),
    repair_task("inc", "def g(n):\n    return n + 2\n", "assert g(1) == 2", "assert g(5) == 6", "wrong_constant", 2),
]
FIX = Block("s.py", "    return a - b\n", "    return a + b\n").render()


@pytest.fixture(scope="module")
def policy():
    seed_everything(0)
    policy = make_tiny_policy(seed=0, hidden_size=64)
    examples = encode_demonstrations(policy.tokenizer, [t.prompt for t in TASKS], [[FIX], ["DONE"]])
    supervised_train(policy, examples * 4, SFTConfig(steps=120, batch_size=4, lr=1e-2, warmup_steps=5, seed=0),
                     desc="fixture")
    policy.model.eval()
    return policy


DOMAIN = CodeRepairDomain(sources=[], max_turns=2)
ROLLOUT = RolloutConfig(max_turns=2, max_context_tokens=256)
VERIFY = VerifyConfig(workers=1, timeout_seconds=10.0, max_input_chars=100_000, scheduler={})
SAMPLING = SamplingConfig(max_new_tokens=80, temperature=1.0)


def test_repair_rates_by_turns_kind_and_difficulty(policy):
    report = repair_report(policy, TASKS, DOMAIN, VERIFY, SAMPLING, 2, ROLLOUT)
    assert report["repair@1turn"] == 0.5 and report["repair@2turns"] == 0.5
    assert report["repair@1turn/kind_operator_swap"] == 1.0 and report["repair@1turn/kind_wrong_constant"] == 0.0
    assert report["repair@2turns/difficulty_2"] == 0.0 and report["num_tasks/difficulty_1"] == 1.0
    assert 0.0 <= report["pass@1"] <= report["pass@2"] <= 1.0
    assert report["edit_error@1turn"] == 0.0  # the fix applies and DONE is no edit


def test_the_share_of_first_edits_that_did_not_apply_is_counted_per_group():
    first = [Verdict("x", False, 1, 0.0, {}, {"edit_errors": 1.0, "test_runs": 0.0}),
             Verdict("y", True, 1, 0.0, {}, {"test_runs": 1.0})]
    report = repair_rates(TASKS, 2, first, first, [[v] for v in first], 1)
    assert report["edit_error@1turn"] == 0.5 and report["repair@1turn"] == 0.5
    assert report["edit_error@1turn/kind_operator_swap"] == 1.0 and report["edit_error@1turn/difficulty_2"] == 0.0


def test_the_held_out_evaluation_of_a_repair_run_carries_the_repair_rates_of_its_own_episodes(policy):
    report = evaluate_policy(policy, TASKS, DOMAIN, VERIFY, SAMPLING, 2, ROLLOUT)
    assert report["repair@1turn"] == 0.5 and report["repair@1turn/kind_wrong_constant"] == 0.0
    assert report["repair@2turns"] == report["greedy_accuracy"] == 0.5  # the same greedy episodes, not sampled again
    assert report["repair@2turns/difficulty_1"] == report["greedy_accuracy/difficulty_1"] == 1.0
    assert report["num_tasks/kind_operator_swap"] == 1.0 and "pass@2/kind_operator_swap" in report
