"""Final-answer extraction and exact (sympy-rational) answer matching."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlvr_factory.verifiers.math import MathVerifier, answers_match, extract_answer, last_boxed

SRC = Path(__file__).resolve().parents[2] / "src"


def test_the_verifier_module_imports_on_its_own():
    result = subprocess.run(
        [sys.executable, "-c", "import rlvr_factory.verifiers.math"],
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
    [("0.5", "1/2"), ("2/4", "1/2"), ("0.50", "2/4"), ("1,000", "1000"), ("-12", "-12.0"), (" 7 ", "7"), ("$5", "5")],
)
def test_equal_numbers_match_whatever_their_notation(predicted, gold):
    assert answers_match(predicted, gold)


@pytest.mark.parametrize("predicted,gold", [("-3", "3"), ("0.33", "1/3"), ("1001", "1,000"), ("12", "1.2")])
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
    assert score.breakdown == {"outcome": 1.0, "format": 1.0}
    assert score.status == "ok"


def test_a_wrong_answer_scores_zero_but_has_the_format():
    score = MathVerifier().score("\\boxed{21}", "20")
    assert score.correct is False
    assert score.reward == 0.0
    assert score.breakdown == {"outcome": 0.0, "format": 1.0}


def test_a_missing_answer_scores_zero_with_no_format_credit():
    score = MathVerifier(format_weight=0.25).score("4*5=20", "20")
    assert score.correct is False
    assert score.reward == 0.0
    assert score.breakdown == {"outcome": 0.0, "format": 0.0}


def test_format_weight_gives_partial_credit_for_stating_a_wrong_answer():
    verifier = MathVerifier(format_weight=0.25)
    assert verifier.score("Answer: 19", "20").reward == pytest.approx(0.25)
    assert verifier.score("Answer: 20", "20").reward == pytest.approx(1.0)


def test_a_zero_denominator_is_a_wrong_answer_not_an_error():
    score = MathVerifier().score("\\boxed{1/0}", "3")
    assert score.correct is False and score.reward == 0.0
