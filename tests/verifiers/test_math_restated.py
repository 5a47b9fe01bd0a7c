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
