"""A math answer that restates the question's computation is no answer: Math-Verify evaluates `12+34` to 46, so
copying "Compute 12+34" into the box was paid on the default arithmetic domain (found by the reward audit)."""

import pytest

from rlvr_factory.verifiers.math import MathVerifier


@pytest.fixture(scope="module")
def verifier():
    return MathVerifier()


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{12+34}", "46"),
    ("The answer is 12+34", "46"),
    ("\\boxed{0-4-8}", "-12"),
    ("\\boxed{3 \\times 4 - 2}", "10"),
    ("\\boxed{(9+1)}", "10"),
    ("\\boxed{2^{10}}", "1024"),
    ("\\boxed{\\dbinom{8}{4}}", "70"),
    ("\\boxed{5!}", "120"),
])
def test_an_operation_left_undone_does_not_answer_a_number(verifier, completion, gold):
    assert verifier.score(completion, gold).reward == 0.0


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{46}", "46"),
    ("x = 2 + 3 = 5", "5"),
    ("\\boxed{1.5\\times10^3}", "1500"),
    ("$\\frac13$", "1/3"),
    ("\\boxed{-\\frac{3}{4}}", "-0.75"),
    ("\\boxed{\\sqrt{17}}", "4.123105625617661"),
    ("\\boxed{2^{10}}", "2^{10}"),
])
def test_values_and_exact_forms_still_count(verifier, completion, gold):
    assert verifier.score(completion, gold).correct


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{(-k + 4) + (-2 + 3k)}", "2k+2"),
    ("\\boxed{(2x+3)-(x-5)}", "x+8"),
    ("The answer is $3a + 2b - a + b - 2a$", "3b"),
])
def test_a_sum_left_as_the_question_wrote_it_does_not_answer_its_simplified_form(verifier, completion, gold):
    """MATH-500's "Simplify $(-k + 4) + (-2 + 3k)$": the question's own expression is symbolically the answer."""
    assert verifier.score(completion, gold).reward == 0.0


@pytest.mark.parametrize("completion, gold", [
    ("\\boxed{(x - 1)(x + 1)}", "x^2 - 1"),
    ("\\boxed{x^2 + 2x + 1}", "(x+1)^2"),
    ("\\boxed{2(k+1)}", "2k+2"),
    ("\\boxed{-2 \\le x \\le 7}", "[-2, 7]"),
])
def test_an_equivalent_form_of_about_the_same_size_still_counts(verifier, completion, gold):
    assert verifier.score(completion, gold).correct
