"""Final-answer extraction, answer matching, spam resistance, process reward and safety of the math verifier."""

import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr_factory.verifiers.math import (
    MathVerifier,
    answers_match,
    as_number,
    extract_answer,
    find_answers,
    last_boxed,
    process_score,
)

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_verifier_module_imports_on_its_own():
    result = subprocess.run(
        [sys.executable, "-c", "import rlvr_factory.verifiers.math"],
        check=False,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr


# last_boxed


def test_last_boxed_returns_the_content_of_a_simple_box():
    assert last_boxed(r"so \boxed{42}.") == "42"


def test_last_boxed_keeps_nested_braces():
    assert last_boxed(r"\boxed{\frac{1}{2}} done") == r"\frac{1}{2}"


def test_last_boxed_takes_the_last_of_several_boxes():
    assert last_boxed(r"\boxed{1} then \boxed{2} and finally \boxed{3}") == "3"


def test_last_boxed_of_unbalanced_braces_is_none():
    assert last_boxed(r"\boxed{\frac{1}{2}") is None


def test_last_boxed_without_a_box_is_none():
    assert last_boxed("42") is None


# extract_answer


def test_extract_answer_reads_an_answer_line():
    assert extract_answer("3 + 39 = 42\nAnswer: 42") == "42"


def test_extract_answer_reads_an_answer_is_sentence_and_drops_the_full_stop():
    assert extract_answer("The answer is 17.") == "17"


def test_extract_answer_takes_the_last_answer_line():
    assert extract_answer("Answer: 1\nwait, no\nAnswer: 2") == "2"


def test_extract_answer_prefers_a_boxed_answer_over_an_answer_line():
    assert extract_answer("\\boxed{42}\nAnswer: 41") == "42"


def test_extract_answer_strips_whitespace_inside_the_box():
    assert extract_answer(r"\boxed{  7 }") == "7"


def test_extract_answer_is_none_when_nothing_is_stated():
    assert extract_answer("3 + 4 = 7") is None


@pytest.mark.parametrize("text", ["I have no answer here", "The answers: 5"])
def test_prose_that_mentions_the_word_answer_states_no_answer(text):
    assert extract_answer(text) is None


# answers_match


@pytest.mark.parametrize(
    "predicted,gold",
    [
        ("0.5", "1/2"),
        ("2/4", "1/2"),
        ("0.50", "2/4"),
        ("1,000", "1000"),
        ("-12", "-12.0"),
        (" 7 ", "7"),
        ("$5", "5"),
    ],
)
def test_equal_numbers_match_whatever_their_notation(predicted, gold):
    assert answers_match(predicted, gold)


@pytest.mark.parametrize(
    "predicted,gold", [("-3", "3"), ("0.33", "1/3"), ("1001", "1,000"), ("12", "1.2")]
)
def test_different_numbers_do_not_match(predicted, gold):
    assert not answers_match(predicted, gold)


def test_non_numeric_answers_match_after_case_and_whitespace_normalisation():
    assert answers_match("  Blue   Whale ", "blue whale")
    assert not answers_match("blue whale", "bluewhale")


def test_a_number_does_not_match_a_non_number():
    assert not answers_match("42", "forty-two")


# MathVerifier


def test_a_correct_answer_scores_one():
    score = MathVerifier().score("4*5=20\n\\boxed{20}", "20")
    assert score.correct is True
    assert score.reward == 1.0
    assert score.breakdown["outcome"] == 1.0 and score.breakdown["format"] == 1.0
    assert score.status == "ok"


def test_a_wrong_answer_scores_zero_but_has_the_format():
    score = MathVerifier().score("\\boxed{21}", "20")
    assert score.correct is False
    assert score.reward == 0.0
    assert score.breakdown["outcome"] == 0.0 and score.breakdown["format"] == 1.0


def test_a_missing_answer_scores_zero_with_no_format_credit():
    score = MathVerifier(format_weight=0.25, strict=True).score("4*5=20", "20")
    assert score.correct is False
    assert score.reward == 0.0
    assert score.breakdown["outcome"] == 0.0 and score.breakdown["format"] == 0.0


def test_format_weight_gives_partial_credit_for_stating_a_wrong_answer():
    verifier = MathVerifier(format_weight=0.25)
    assert verifier.score("Answer: 19", "20").reward == pytest.approx(0.25)
    assert verifier.score("Answer: 20", "20").reward == pytest.approx(1.25)


def test_a_zero_denominator_is_a_wrong_answer_not_an_error():
    score = MathVerifier().score("\\boxed{1/0}", "3")
    assert score.correct is False and score.reward == 0.0


def test_every_breakdown_value_is_a_float():
    score = MathVerifier().score("3+4=7\n\\boxed{7}", "7")
    assert set(score.breakdown) == {"outcome", "format", "process", "steps", "spam"}
    assert all(isinstance(value, float) for value in score.breakdown.values())


# extraction


def test_fbox_counts_like_boxed():
    assert last_boxed(r"so \fbox{12}") == "12"
    assert MathVerifier().score(r"so \fbox{12}", "12").correct


def test_gsm8k_hashes_state_the_answer():
    assert extract_answer("16 - 3 - 4 = 9 eggs\n#### 9") == "9"


def test_gsm8k_model_solutions_end_with_an_a_line():
    assert extract_answer("She makes 9 * 2 = $18\nA: 18") == "18"


def test_an_answer_line_is_clipped_at_the_end_of_its_sentence():
    assert (
        extract_answer(
            "Final Answer: The final answer is $(0, 1)$. I hope it is correct."
        )
        == "$(0, 1)$"
    )


def test_an_answer_line_after_the_last_box_overrides_intermediate_boxes():
    text = r"first \boxed{200} then \boxed{255}. Final Answer: The final answer is $10,455$."
    assert find_answers(text).values == ("$10,455$",)
    assert MathVerifier().score(text, "10455").correct


def test_a_remark_that_the_answer_is_correct_is_no_answer():
    assert (
        MathVerifier()
        .score(r"so $\boxed{44}$. We check: our answer is correct.", "44")
        .correct
    )


def test_without_a_marker_the_last_number_is_an_unmarked_answer():
    found = find_answers("so the total is 1,000.99 dollars")
    assert found.values == ("1,000.99",) and not found.marked


# strict mode


def test_strict_mode_counts_only_a_boxed_answer():
    strict = MathVerifier(strict=True)
    assert not strict.score("The answer is 42.", "42").correct
    assert strict.score("so \\boxed{42}", "42").correct
    assert MathVerifier().score("The answer is 42.", "42").correct


# answer spamming


@pytest.mark.parametrize(
    "completion",
    [
        r"\boxed{3} or maybe \boxed{4}",
        r"\boxed{3 \text{ or } 4}",
        "Answer: 3 or 4",
        r"\boxed{3, 4}",
    ],
)
def test_several_different_final_answers_score_zero(completion):
    score = MathVerifier().score(completion, "3")
    assert score.reward == 0.0 and not score.correct
    assert score.breakdown["spam"] == 1.0


def test_repeating_the_same_answer_is_not_spam():
    score = MathVerifier().score(r"\boxed{0.5} so again \boxed{1/2}", "1/2")
    assert score.correct and score.breakdown["spam"] == 0.0


def test_several_answers_are_fine_when_the_gold_lists_several():
    assert (
        MathVerifier().score(r"\boxed{(1, 2)}, \boxed{(2, 1)}", "(2,1),(1,2)").correct
    )


def test_a_multiple_choice_gold_reads_the_picked_letter():
    verifier = MathVerifier()
    assert verifier.score("The answer is for sure D, it can't be A or B", "D").correct
    assert not verifier.score("C", "(A) Cecile").correct


# numbers


@pytest.mark.parametrize(
    "predicted,gold",
    [
        ("25\\%", "25"),
        ("25%", "0.25"),
        ("28 percent", "28\\%"),
        ("1.5e3", "1500"),
        ("1.5 \\times 10^{3}", "1500"),
        ("\\dfrac{3}{4}", "0.75"),
        ("3/4", "\\frac{3}{4}"),
        ("15\\frac{39}{40}", "\\frac{639}{40}"),
        ("\\$1,000", "1000"),
        ("12 cm", "12"),
        ("90^\\circ", "90"),
    ],
)
def test_numbers_match_across_notations(predicted, gold):
    assert answers_match(predicted, gold)


def test_a_decimal_rounded_from_an_exact_gold_counts_only_where_rounding_is_allowed():
    assert not answers_match("0.3333", "\\frac{1}{3}")
    assert answers_match("0.3333", "\\frac{1}{3}", rounding=True)
    assert not MathVerifier().score("\\boxed{1.414}", "\\sqrt{2}").correct
    assert MathVerifier(rounding=True).score("\\boxed{1.414}", "\\sqrt{2}").correct


@pytest.mark.parametrize(
    "predicted,gold",
    [("0.3", "\\frac{1}{3}"), ("1.01", "1.005"), ("32, 349", "32349"), ("2x", "2")],
)
def test_rounded_or_different_numbers_do_not_match(predicted, gold):
    assert not answers_match(predicted, gold)


def test_tolerance_is_relative_and_applies_only_to_a_gold_written_as_a_decimal():
    assert MathVerifier(tolerance=1e-3).score(r"\boxed{1000.5}", "1000.0").correct
    assert not MathVerifier().score(r"\boxed{1000.5}", "1000.0").correct
    assert not MathVerifier(tolerance=1e-3).score(r"\boxed{1000.5}", "1000").correct  # integers compare exactly


def test_huge_exponents_are_not_plain_numbers():
    assert as_number("1e999999999") is None
    assert as_number("1e5").value == 100000


# symbolic


@pytest.mark.parametrize(
    "completion,gold",
    [
        (r"\boxed{\sqrt 2+\sqrt 5}", r"\sqrt{2}+\sqrt{5}"),
        (r"\boxed{[-4, 0]}", "[-4,0]"),
        (r"\boxed{x \geq 5}", "x >= 5"),
        (
            r"\boxed{\begin{pmatrix}1 & 0 \\\\ 0 & 1\end{pmatrix}}",
            r"\begin{pmatrix}1 & 0 \\\\ 0 & 1\end{pmatrix}",
        ),
    ],
)
def test_symbolic_equivalence_goes_through_math_verify(completion, gold):
    assert MathVerifier().score(completion, gold).correct


def test_math_verify_is_never_needed_when_the_quick_path_decides():
    verifier = MathVerifier()
    assert verifier.quick_score(r"\boxed{\frac{1}{2}}", "0.5").correct
    assert not verifier.quick_score(r"\boxed{3}", "4").correct
    assert verifier.quick_score(r"\boxed{\sqrt 2}", r"\sqrt{2}+0") is None


# process reward


def test_process_score_counts_stated_computations():
    assert process_score(
        "3 + 4 = 7 and 6 * 7 = 42, then 10 / 4 = 2.5 but 9 - 2 = 6"
    ) == (3, 4)


def test_process_score_reads_gsm8k_annotations_and_chains():
    assert process_score("16 - 3 - 4 = <<16-3-4=9>>9, then 2 + 3 * 4 = 14") == (2, 2)


def test_a_rounded_result_counts_as_correct():
    assert process_score("10 / 3 = 3.33") == (1, 1)


def test_process_weight_rewards_correct_steps_and_none_means_zero():
    verifier = MathVerifier(outcome_weight=0.5, process_weight=0.5)
    score = verifier.score("2 + 2 = 4\n3 * 3 = 10\n\\boxed{14}", "14")
    assert score.breakdown["process"] == 0.5 and score.breakdown["steps"] == 2.0
    assert score.reward == pytest.approx(0.75)
    assert verifier.score("\\boxed{14}", "14").breakdown == {
        "outcome": 1.0,
        "format": 1.0,
        "process": 0.0,
        "steps": 0.0,
        "spam": 0.0,
    }


# limits and safety


def test_an_oversized_completion_is_an_error_not_a_wrong_answer():
    score = MathVerifier(max_completion_chars=100).score("x" * 101 + "\\boxed{1}", "1")
    assert score.status == "error" and score.reward == 0.0 and not score.correct


def test_an_oversized_answer_is_an_error():
    score = MathVerifier(max_answer_chars=10).score("\\boxed{" + "1+" * 20 + "1}", "41")
    assert score.status == "error"


def test_no_exception_escapes_score():
    verifier = MathVerifier()
    for completion, gold in [
        (None, "1"),
        ("\\boxed{1}", None),
        ("\\boxed{\\frac{", "}{"),
    ]:
        assert verifier.score(completion, gold).status in ("ok", "error")


@pytest.mark.parametrize(
    "answer", ["10**10**10", "1e99999999", "5^{5^{5^{5^5}}}", "9" * 999 + "e999999"]
)
def test_quick_score_is_fast_on_huge_numbers(answer):
    start = time.perf_counter()
    MathVerifier().quick_score(f"\\boxed{{{answer}}}", "3")
    MathVerifier().quick_score("\\boxed{3}", answer)
    assert time.perf_counter() - start < 0.5


def test_quick_score_is_fast_on_long_adversarial_text():
    start = time.perf_counter()
    MathVerifier().quick_score("\\boxed{" * 2000 + "{" * 10000 + "1+1=2 " * 1000, "2")
    assert time.perf_counter() - start < 1.0


def test_the_verifier_pickles_with_its_settings():
    verifier = pickle.loads(pickle.dumps(MathVerifier(strict=True, tolerance=0.1)))
    assert verifier.strict and verifier.tolerance == 0.1
