"""Held-out evaluation: unbiased pass@k and the evaluation report."""

from math import comb

import pytest

from rlvr_factory.domains import Task
from rlvr_factory.domains.arithmetic import ArithmeticDomain
from rlvr_factory.domains import DomainMix
from rlvr_factory.evaluation import evaluate_policy, greedy_accuracy, majority_vote, pass_at_k
from rlvr_factory.domains.cad import CadDomain
from rlvr_factory.rollout.hf import SamplingConfig
from rlvr_factory.training.sft import SFTConfig, encode_chat_examples, supervised_train
from rlvr_factory.verification import VerifyConfig
from tests.conftest import make_scripted_policy, make_tiny_policy

VERIFY = VerifyConfig(workers=1, timeout_seconds=5.0, max_input_chars=100_000)


@pytest.mark.parametrize(
    "n,c,k,expected",
    [(4, 1, 1, 0.25), (4, 1, 2, 0.5), (4, 0, 1, 0.0), (4, 0, 4, 0.0), (4, 4, 1, 1.0), (4, 2, 3, 1.0), (5, 2, 2, 0.7)],
)
def test_pass_at_k_hand_computed_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_1_is_the_fraction_correct():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)


def test_pass_at_k_is_the_chance_that_k_draws_without_replacement_hit_a_correct_one():
    n, c, k = 10, 3, 4
    assert pass_at_k(n, c, k) == pytest.approx(1 - comb(n - c, k) / comb(n, k))
    assert pass_at_k(n, c, 4) > pass_at_k(n, c, 2) > pass_at_k(n, c, 1)


def test_pass_at_k_with_more_draws_than_samples_raises():
    with pytest.raises(ValueError, match="pass@5 needs at least 5 samples"):
        pass_at_k(4, 1, 5)


def make_domain():
    return ArithmeticDomain(
        levels={1: {"digits": 1, "operands": 2, "ops": "+"}, 2: {"digits": 1, "operands": 3, "ops": "+"}},
        splits={"test": 4},
        seed=0,
    )


def test_the_report_has_overall_and_per_difficulty_metrics(tiny_policy):
    domain = make_domain()
    tasks = domain.generate_tasks()
    report = evaluate_policy(tiny_policy, tasks, domain, VERIFY, SamplingConfig(max_new_tokens=3), k=2)
    suffixes = ("", "/difficulty_1", "/difficulty_2", "/domain_arithmetic", "/domain_arithmetic/difficulty_1",
                "/domain_arithmetic/difficulty_2")
    metrics = ("greedy_accuracy", "pass@1", "pass@2", "maj@2")
    expected = {f"{metric}{suffix}" for metric in (*metrics, "num_tasks") for suffix in suffixes}
    assert set(report) == expected
    assert report["num_tasks"] == 4.0 and report["num_tasks/difficulty_1"] == 2.0
    # a random tiny model writing 3 bytes does not produce a boxed correct answer
    assert all(report[f"{m}{s}"] == 0.0 for m in metrics for s in suffixes)


def test_greedy_accuracy_of_a_random_model_is_zero(tiny_policy):
    domain = make_domain()
    assert greedy_accuracy(tiny_policy, domain.generate_tasks(), domain, VERIFY, SamplingConfig(max_new_tokens=3)) == 0.0


def test_evaluating_no_tasks_raises(tiny_policy):
    with pytest.raises(ValueError, match="no tasks"):
        evaluate_policy(tiny_policy, [], make_domain(), VERIFY, SamplingConfig(), k=2)


def arithmetic_task(task_id: str, answer: str, difficulty: int) -> Task:
    return Task(task_id, "arithmetic", f"Compute {answer}+0", {"answer": answer, "steps": []}, difficulty, "test", "t")


def test_the_report_scores_a_policy_that_always_answers_three():
    policy = make_scripted_policy("\\boxed{3}")
    tasks = [arithmetic_task("a", "3", 1), arithmetic_task("b", "4", 1), arithmetic_task("c", "3", 2)]
    report = evaluate_policy(policy, tasks, make_domain(), VERIFY, SamplingConfig(max_new_tokens=12), k=3)
    assert report["greedy_accuracy"] == pytest.approx(2 / 3)
    assert report["pass@1"] == pytest.approx(2 / 3)
    assert report["pass@3"] == pytest.approx(2 / 3)
    assert report["greedy_accuracy/difficulty_1"] == pytest.approx(0.5)
    assert report["greedy_accuracy/difficulty_2"] == 1.0
    assert report["pass@3/difficulty_1"] == pytest.approx(0.5)
    assert greedy_accuracy(policy, tasks, make_domain(), VERIFY, SamplingConfig(max_new_tokens=12)) == pytest.approx(2 / 3)


def test_a_completion_cut_off_before_its_answer_counts_as_wrong():
    policy = make_scripted_policy("\\boxed{3}")
    tasks = [arithmetic_task("a", "3", 1)]
    assert greedy_accuracy(policy, tasks, make_domain(), VERIFY, SamplingConfig(max_new_tokens=5)) == 0.0


# maj@k and per-domain reports


def test_majority_vote_takes_the_most_common_answer():
    assert majority_vote(["3", "4", "3"], [True, False, True]) is True
    assert majority_vote(["4", "3", "4"], [False, True, False]) is False


def test_majority_vote_breaks_ties_by_the_answer_stated_first_and_ignores_unstated_answers():
    assert majority_vote([None, "4", "3", None, None], [False, False, True, False, False]) is False
    assert majority_vote([None, None], [False, False]) is False


def test_maj_at_k_is_reported_when_answers_are_comparable():
    policy = make_scripted_policy("\\boxed{3}")
    tasks = [arithmetic_task("a", "3", 1), arithmetic_task("b", "4", 1), arithmetic_task("c", "3", 2)]
    report = evaluate_policy(policy, tasks, make_domain(), VERIFY, SamplingConfig(max_new_tokens=12), k=3)
    assert report["maj@3"] == pytest.approx(2 / 3)
    assert report["maj@3/difficulty_1"] == pytest.approx(0.5)


def test_a_mixed_report_has_metrics_per_domain_and_per_domain_difficulty():
    mix = DomainMix({
        "arithmetic": {"levels": {1: {"digits": 1, "operands": 2, "ops": "+"}}, "splits": {"test": 1}},
        "extraction": {"splits": {"test": 2}, "levels": [1]},
    })
    tasks = [t for t in mix.generate_tasks() if t.domain == "extraction"]
    tasks += [Task(t.task_id, "arithmetic", t.prompt, {**t.reference, "domain": "arithmetic"}, t.difficulty, "test", "t")
              for t in [arithmetic_task("a", "3", 1), arithmetic_task("b", "4", 1)]]
    report = evaluate_policy(make_scripted_policy("\\boxed{3}"), tasks, mix, VERIFY, SamplingConfig(max_new_tokens=12), k=2)
    assert report["greedy_accuracy/domain_arithmetic"] == 0.5
    assert report["greedy_accuracy/domain_extraction"] == 0.0  # no JSON object: no reward
    assert report["greedy_accuracy"] == 0.25
    assert report["num_tasks/domain_extraction/difficulty_1"] == 2.0
    assert report["maj@2/domain_arithmetic"] == 0.5


def test_multi_turn_policies_are_evaluated_over_whole_episodes_per_number_of_turns():
    from rlvr_factory.rollout.agent_loop import RolloutConfig
    from tests.rollout.policies import PROMPTS, calculator_user

    domain = ArithmeticDomain(levels={1: {"digits": 2, "operands": 2, "ops": "+"}}, splits={}, tool={"enabled": True})
    tasks = [Task(f"t{i}", "arithmetic", p, {"answer": "42"}, 1, "test", "t") for i, p in enumerate(PROMPTS)]
    report = evaluate_policy(calculator_user(), tasks, domain, VERIFY, SamplingConfig(max_new_tokens=24, seed=1), k=2,
                             rollout=RolloutConfig(max_turns=3))
    assert report["greedy_accuracy"] == 1.0 and report["turns_per_episode"] == 2.0
    assert report["tool_calls_per_episode"] == 1.0
    assert report["greedy_accuracy/turns_2"] == 1.0 and report["num_tasks/turns_2"] == 3.0
    assert "pass@2/turns_2" in report and "greedy_accuracy/turns_1" not in report
    single = evaluate_policy(calculator_user(), tasks, domain, VERIFY, SamplingConfig(max_new_tokens=24), k=2,
                             rollout=RolloutConfig(max_turns=1))
    assert single["greedy_accuracy"] == 0.0  # one turn: the call is all it says, never judged
    assert "turns_per_episode" not in single


def test_a_domain_that_names_breakdown_entries_gets_their_greedy_means():
    """The CAD domain names `builds` and `iou`: a policy that always writes the same box builds every part,
    matching one target exactly and missing the other."""
    domain = CadDomain(splits={"test": 2})
    box = "cube([4,3,2]);"
    tasks = [Task("cad-0", "cad", "A block 4 x 3 x 2 mm from the origin.", {"program": box}, 1, "test", "t"),
             Task("cad-1", "cad", "A far ball.", {"program": "translate([100,0,0])sphere(r=9);"}, 2, "test", "t")]
    policy = make_tiny_policy()
    examples = encode_chat_examples(policy.tokenizer, [t.prompt for t in tasks], [box, box])
    supervised_train(policy, examples, SFTConfig(steps=80, batch_size=2, lr=1e-2, warmup_steps=5))
    report = evaluate_policy(policy, tasks, domain, VERIFY, SamplingConfig(max_new_tokens=20), k=2)
    assert report["greedy_builds"] == 1.0 and report["greedy_iou"] == pytest.approx(0.5)
    assert report["greedy_accuracy"] == 0.5 and report["greedy_iou/difficulty_2"] == 0.0
    assert "maj@2" not in report  # CAD programs have no comparable final answer
