"""Red team on the math verifier: answers a careful grader would not pay, answers it would, and
inputs that would keep the caller's process busy.

Every case is (completion, gold, whether a careful grader marks it right), grouped by class.
"""

from __future__ import annotations

import gc
import time

import pytest

from rlvr_factory.domains.math import math_answer_key
from rlvr_factory.verifiers.math import MathVerifier

CASES = {
    "integers_compare_exactly": [
        (r"\boxed{1000000.5}", "1000000", False),
        (r"\boxed{999999.9999}", "1000000", False),
        (r"\boxed{100000000001}", "100000000000", False),
        ("The answer is 12345678.9", "12345679", False),
        (r"\boxed{2.0000001}", "2", False),
        (r"\boxed{1000.0}", "1000", True),
        (r"\boxed{1.5e3}", "1500", True),
    ],
    "a_decimal_approximation_of_an_exact_gold": [
        (r"\boxed{0.3333}", r"\frac{1}{3}", False),
        (r"\boxed{0.333333333}", "1/3", False),
        (r"\boxed{1.414}", r"\sqrt{2}", False),
        (r"\boxed{3.14159}", r"\pi", False),
        (r"\boxed{0.7071}", r"\frac{\sqrt{2}}{2}", False),
        (r"\boxed{2.718}", "e", False),
        (r"\boxed{(1, 0.667)}", r"(1, \frac{2}{3})", False),
        (r"\boxed{4.5}", r"\frac{9}{2}", True),  # exactly the gold
        (r"\boxed{(1, 4.5)}", r"(1, \frac{9}{2})", True),
        (r"\boxed{0.125}", r"\frac{1}{8}", True),
    ],
    "words_that_change_the_number": [
        (r"\boxed{5 \text{ million}}", "5", False),
        (r"\boxed{5 \text{ million}}", "5000000", True),
        ("The answer is 3 thousand", "3", False),
        ("The answer is 3 thousand dollars", "3000", True),
        (r"\boxed{2 \text{ dozen}}", "2", False),
        (r"\boxed{2 \text{ dozen}}", "24", True),
        (r"\boxed{1.2 \text{ million}}", "1200000", True),
        (r"\boxed{5 \text{ squared}}", "5", False),
        (r"\boxed{5\text{ factorial}}", "5", False),
        (r"\boxed{4 \text{ cubed}}", "4", False),
        (r"\boxed{\text{minus } 5}", "5", False),
        (r"\boxed{\text{half of } 10}", "10", False),
        (r"\boxed{\frac{1}{2}\%}", r"\frac{1}{2}", False),
        (r"\boxed{\frac{1}{4} \text{ percent}}", "0.25", False),
        (r"\boxed{5 \text{ cm}}", "5", True),
        (r"\boxed{12 \text{ square units}}", "12", True),
        (r"\boxed{25\%}", "25", True),
    ],
    "an_equation_whose_sides_differ": [
        (r"\boxed{2+2=5}", "5", False),
        (r"\boxed{x = 4 = 5}", "5", False),
        (r"\boxed{6 \times 7 = 43}", "43", False),
        ("The answer is 10 - 3 = 8", "8", False),
        (r"\boxed{\frac{1}{2} = 0.6}", "0.6", False),
        (r"\boxed{\sqrt{4} = 3}", "3", False),
        (r"\boxed{x = 5}", "5", True),
        (r"\boxed{2+3=5}", "5", True),
        (r"\boxed{x = 2 + 3 = 5}", "5", True),
        (r"\boxed{\sqrt{9} = 3}", "3", True),
    ],
    "hedges_inside_one_answer": [
        (r"\boxed{5 \ (\text{or } 6)}", "5", False),
        (r"\boxed{5 (or 6)}", "5", False),
        ("The answer is 5 (or possibly 6).", "5", False),
        (r"\boxed{5 \text{ or maybe } 6}", "5", False),
        (r"\boxed{5\ (\text{perhaps } 6)}", "5", False),
        (r"\boxed{A \text{ or } B}", "A", False),
        ("The answer is (A) or (B).", "A", False),
        ("The answer is A or B", "B", False),
        (r"\boxed{A/B}", "A", False),
        ("The answer is for sure D, it can't be A or B", "D", True),
    ],
    "false_negatives": [
        (r"\boxed{\pm 2}", "2, -2", True),
        (r"\boxed{x = \pm 3}", r"3, -3", True),
        (r"\boxed{x=1 \text{ or } x=2}", "1, 2", True),
        (r"The roots are $x = 1$ and $x = 2$, so \boxed{x = 1, x = 2}", "1,2", True),
        (r"\boxed{2 \pm \sqrt{3}}", r"2+\sqrt{3}, 2-\sqrt{3}", True),
        (r"\boxed{x = 1, x = 3}", "1, 2", False),
        (r"\boxed{-4 \le x \le 0}", "[-4, 0]", True),
        (r"\boxed{x > 2}", r"(2, \infty)", True),
        (r"\boxed{x \ge 3}", r"[3,\infty)", True),
        (r"\boxed{-1 < x \leq 5}", "(-1, 5]", True),
        (r"\boxed{x < -1 \text{ or } x > 2}", r"(-\infty,-1)\cup(2,\infty)", True),
        (r"\boxed{-4 < x \le 0}", "[-4, 0]", False),
        ("so **Answer:** 42", "42", True),
        ("The final answer is **42**.", "42", True),
        ("**Final Answer: 7**", "7", True),
        ("\\boxed{5}\n\nNote that the answer is unique.", "5", True),
        ("The total is \\boxed{12}. This answer is reasonable because each part checks out.", "12", True),
        ("\\boxed{8}\nTherefore, the answer is positive.", "8", True),
        ("The answer is (B). Wait, that is wrong: the answer is (D).", "D", True),
        ("Answer: B\nActually, re-checking, the answer is C.", "C", True),
        (r"\boxed{0.\overline{3}}", r"\frac{1}{3}", True),
        (r"\boxed{0.\overline{142857}}", r"\frac{1}{7}", True),
        (r"\boxed{0.1\overline{6}}", r"\frac{1}{6}", True),
        (r"\boxed{0.(3)}", r"\frac{1}{3}", True),
        (r"\boxed{0.\overline{3}}", "0.4", False),
    ],
    "plus_minus_and_sets_match_a_gold_of_several_values_part_for_part": [
        (r"\boxed{2, -2}", r"\pm 2", True),
        (r"\boxed{-2 \text{ or } 2}", r"\pm 2", True),
        (r"\boxed{x = 2 \text{ or } x = -2}", r"\pm2", True),
        (r"\boxed{\{2, -2\}}", r"\pm 2", True),
        (r"\boxed{[2, -2]}", r"\pm 2", True),
        (r"\boxed{\pm 2}", "2, -2", True),
        (r"\boxed{\{-2,2\}}", "2, -2", True),
        (r"\boxed{2, -2, 3}", r"\pm 2", False),  # a hedge: one part more
        (r"\boxed{2}", r"\pm 2", False),  # one part fewer
        (r"\boxed{\{2, -2, 5\}}", "2, -2", False),
        (r"\boxed{\{2\}}", "2, -2", False),
        (r"\boxed{\pm 2}", "2", False),  # a hedge where the gold is one value
        (r"\boxed{1 \pm \sqrt{2}}", r"1+\sqrt{2}", False),
        (r"\boxed{\pm 2}", r"\{-2, 2\}", True),  # a gold written as a set
        (r"\boxed{2, -2}", r"\left\{-2, 2\right\}", True),
        (r"\boxed{2, -2, 3}", r"\{-2, 2\}", False),
        (r"\boxed{(2, -2)}", "(-2, 2)", False),  # a tuple keeps its order
    ],
    "words_around_the_one_number_of_an_answer_line": [
        ("The answer is definitely 42.", "42", True),
        ("The answer is 42 (apples).", "42", True),
        ("So the answer is 42, I think.", "42", True),
        ("Answer: the number 42", "42", True),
        ("The answer is 43 (apples).", "42", False),
        ("The answer is 42 or so.", "42", False),
        ("The answer is 42, not 43.", "42", False),
        ("The answer is not 42.", "42", False),
        ("The answer is at least 42.", "42", False),
        ("The answer is more than 41.", "42", False),
        ("The answer is about 5 million.", "5", False),
        ("The answer is 7 apples and 42 pears.", "42", False),
        ("The answer is not 42 " + "apples " * 80, "42", False),  # padded past the 400 characters of a number
        ("The answer is at least 42 " + "apples " * 80, "42", False),
    ],
}


@pytest.fixture(scope="module")
def verifier() -> MathVerifier:
    return MathVerifier()


@pytest.mark.parametrize(
    ("completion", "gold", "right"),
    [case for cases in CASES.values() for case in cases],
    ids=[f"{name}-{i}" for name, cases in CASES.items() for i in range(len(cases))],
)
def test_a_careful_graders_verdict(verifier, completion, gold, right):
    score = verifier.score(completion, gold)
    assert score.status == "ok" and score.correct is right, (completion, gold, score)


def test_rounding_is_a_setting_of_the_verifier_not_a_guess():
    assert MathVerifier(rounding=True).score(r"\boxed{0.3333}", r"\frac{1}{3}").correct
    assert not MathVerifier(rounding=True).score(r"\boxed{0.33}", r"\frac{1}{3}").correct  # too few decimals
    assert not MathVerifier(rounding=True).score(r"\boxed{1000000.5}", "1000000").correct  # integers stay exact


# The quick path runs in the caller's process: no input may keep it busy. Each of these is near the
# 20 kB completion limit and built against one of the regular expressions or loops it uses.
PATHOLOGICAL = {
    "whitespace_inside_an_answer_line": "Answer: a" + " " * 19_000 + "b",
    "whitespace_after_hashes": "#### " + " " * 19_900 + "x",
    "whitespace_before_a_hope": "The answer is 5" + " " * 19_000 + "I hope",
    "answer_words_without_a_marker": "answer " * 2800,
    "an_unfinished_sum": "1+" * 9000 + "1",
    "a_sum_then_equals": "1 + " * 4900 + "1 = 4901",
    "one_long_number": "1" * 19_000,
    "unclosed_boxes": "\\boxed{" * 2800,
    "many_distinct_boxes": "".join(f"\\boxed{{{i}}}" for i in range(1700)),
    "braces": "{" * 19_000,
    "dollars": "$" * 19_000,
    "math_spans": "$a$ " * 4800,
    "a_long_list_answer": "The answer is " + "1, " * 6000,
    "unit_words_after_a_number": "\\boxed{5 " + "aa " * 300 + "!}" + " aa" * 5000,
    "parentheses": "(" * 9000 + ")" * 9000,
    "fractions": "\\boxed{" + "\\frac{" * 300 + "}",
    "bold_markers": "**" * 9000,
    "bold_runs": "**a** " * 3000,
    "a_repeating_decimal": "\\boxed{0." + "3" * 900 + "...}",
    "equals_signs": "=" * 19_000,
    "an_equation_chain": "\\boxed{x" + " = 1" * 240 + "}",
    "hope_phrases": "Answer: " + "I hope it is correct " * 900,
    "separators": "\\boxed{" + " ,;" * 300 + "}" + " or and" * 2000,
    "choice_letters": "The answer is " + "A or B, " * 2300,
    "newlines": "\n" * 19_000 + "Answer: 5",
}


# 100 kB inputs built against a regular expression that backtracked: each took from seconds to minutes.
LONG = {
    "equals_then_spaces": "=" + " " * 100_000 + "x",  # a stated computation's result (process reward)
    "an_interval_of_commas": "(" + "," * 100_000,  # as the gold: is it an interval?
    "equals_then_numbers": ("1" * 161 + "=") * 620,
    "hashes_then_newlines": "#### " + "\n" * 100_000 + "}",
    "dollars_in_the_tail": "\\(" * 50_000,
}


@pytest.mark.parametrize("name", sorted(LONG))
def test_parsing_a_100k_answer_or_gold_takes_linear_time(name):
    text = LONG[name]
    verifier = MathVerifier(max_completion_chars=200_000, max_answer_chars=200_000)
    took = []
    for _ in range(2):
        gc.disable()
        try:
            started = time.perf_counter()
            for completion, gold in ((text, "42"), (r"\boxed{42}", text), (text, "(C) Cecile"), (text, text)):
                verifier.quick_score(completion, gold)
            math_answer_key(text)
            took.append(time.perf_counter() - started)
        finally:
            gc.enable()
    assert min(took) < 3.0, (name, took)


@pytest.mark.parametrize("gold", [["2"], 2, None, {"answer": "2"}, ("2",)])
def test_a_gold_that_is_not_a_string_is_an_error_score_never_an_exception(verifier, gold):
    for check in (verifier.score, verifier.quick_score):
        score = check(r"\boxed{2}", gold)
        assert score.status == "error" and not score.correct and "must be strings" in score.message


@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_the_quick_path_is_bounded_on_any_input(verifier, name):
    completion = PATHOLOGICAL[name]
    assert len(completion) <= verifier.max_completion_chars
    for gold in ("5", r"\frac{1}{3}", "A", "1, 2"):
        # The best of three, with the garbage collector off: a bound on the algorithm, not on a
        # full collection of a long suite's heap or a moment the machine was busy elsewhere.
        took = []
        for _ in range(3):
            gc.disable()
            try:
                started = time.perf_counter()
                verifier.quick_score(completion, gold)
                verifier.quick_score(gold, completion[:1000])  # the gold can be anything too
                took.append(time.perf_counter() - started)
            finally:
                gc.enable()
        assert min(took) < 0.25, (name, gold, took)
