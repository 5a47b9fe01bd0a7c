"""Red team on the math verifier: answers a careful grader would not pay, answers it would, and
inputs that would keep the caller's process busy.

Every case is (completion, gold, whether a careful grader marks it right), grouped by class.
"""

from __future__ import annotations

import gc
import time

import pytest

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
