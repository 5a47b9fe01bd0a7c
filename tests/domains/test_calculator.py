"""The calculator tool: a bounded evaluator, red-teamed, and its call syntax."""

import re
import time
from fractions import Fraction

import pytest

from rlvr_factory.domains.calculator import (
    CalculatorError, CalculatorLimits, ToolCall, answer_call, evaluate, find_call, format_value,
)


@pytest.mark.parametrize("expression, value", [
    ("37*48", 1776), ("2+3*4", 14), ("(2+3)*4", 20), ("10-4-3", 3), ("2^10", 1024), ("2**3**2", 512),
    ("-3+5", 2), ("--3", 3), ("7/2", Fraction(7, 2)), ("1/3+2/3", 1), ("1.5*2", 3), (" 12 +  30 ", 42),
    ("2^-2", Fraction(1, 4)), ("-2^2", -4), ("0-99*99", -9801),
])
def test_expressions_evaluate_exactly_with_the_usual_precedence(expression, value):
    assert evaluate(expression) == value


def test_values_print_as_integers_or_reduced_fractions():
    assert format_value(Fraction(1776)) == "1776"
    assert format_value(Fraction(6, 4)) == "3/2"
    assert format_value(Fraction(-5)) == "-5"


@pytest.mark.parametrize("expression, reason", [
    ("", "empty"), ("   ", "empty"), ("2+", "ends too early"), ("(1+2", "unbalanced parentheses"),
    ("1+2)", "unexpected ')'"), ("1/0", "division by zero"), ("0^-1", "division by zero"), ("2^(1/2)", "whole exponent"),
    ("abs(3)", "unexpected character 'a'"), ("__import__('os')", "unexpected character '_'"), ("1e5", "unexpected character 'e'"),
    ("3 4", "unexpected '4'"), ("()", "unexpected ')'"),
])
def test_malformed_expressions_are_refused_with_the_reason(expression, reason):
    with pytest.raises(CalculatorError, match=re.escape(reason)):
        evaluate(expression)


# Red team: inputs that would be slow, huge or crash a naive evaluator are refused, fast.

@pytest.mark.parametrize("expression", [
    "9^9^9^9", "10**100", "99999999^64", "2^65", "(10^16)^2*10^16", "2^64*2^64", "123456789012345678901234567890123*1",
])
def test_huge_results_and_exponents_are_refused_before_they_are_computed(expression):
    start = time.perf_counter()
    with pytest.raises(CalculatorError, match="larger than|longer than"):
        evaluate(expression)
    assert time.perf_counter() - start < 0.1


def test_deep_nesting_is_refused_without_recursing_deeply():
    for expression in ("(" * 10_000 + "1" + ")" * 10_000, "-" * 10_000 + "1"):
        with pytest.raises(CalculatorError, match="longer than|nested deeper"):
            evaluate(expression, CalculatorLimits(max_chars=100_000))
    with pytest.raises(CalculatorError, match="nested deeper than 16"):
        evaluate("(" * 17 + "1" + ")" * 17)
    assert evaluate("(" * 16 + "1" + ")" * 16) == 1


def test_oversized_expressions_are_refused_by_length_first():
    with pytest.raises(CalculatorError, match="longer than 64 characters"):
        evaluate("1+" * 40 + "1")


def test_repeated_products_cannot_grow_past_the_digit_limit():
    with pytest.raises(CalculatorError, match="result longer than 32 digits"):
        evaluate("*".join(["99999999"] * 6))


def test_a_call_is_found_between_its_tags():
    assert find_call("Let me compute <calc>37*48</calc>") == ToolCall("37*48")
    assert find_call("\\boxed{3}") is None


@pytest.mark.parametrize("action", [
    "<calc>1+2", "1+2</calc>", "</calc>1+2<calc>", "<calc><calc>1</calc></calc>", "<calc>1</calc></calc>",
])
def test_unbalanced_tags_are_a_malformed_call(action):
    assert find_call(action) == ToolCall(None, "unbalanced calc tags")


def test_every_answer_is_a_parseable_result_observation():
    assert answer_call(ToolCall("6*7")) == ("<result>42</result>", False)
    assert answer_call(ToolCall("6*")) == ("<result>error: the expression ends too early</result>", True)
    assert answer_call(ToolCall(None, "unbalanced calc tags")) == ("<result>error: unbalanced calc tags</result>", True)
