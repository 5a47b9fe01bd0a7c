"""The reasoning-gym reward attacked by class, through the pipeline's path (a `VerifierPool`): answers that would
run as code on the host, answers that would change how later rows are scored, and answers that reasoning-gym's
own scorers pay without the task solved. Each attack here was paid (or ran) before the trust boundary."""

import shutil
from decimal import Decimal

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym is the `reasoning-gym` extra: pip install -e '.[reasoning-gym]'")

import reasoning_gym  # noqa: E402

from rlvr_factory.verifiers.pool import VerifierPool  # noqa: E402
from rlvr_factory.verifiers.reasoning_gym import ReasoningGymVerifier, entry_literal, make_gold  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="the scoring sandbox needs bubblewrap")


def task(family: str, seed: int = 1, index: int = 0) -> tuple[str, dict]:
    item = reasoning_gym.create_dataset(family, size=index + 1, seed=seed)[index]
    return make_gold(family, item["answer"], entry_literal(item)), item


@pytest.fixture(scope="module")
def pool():
    """One long-lived worker for every attack of this module, as a run has."""
    with VerifierPool(ReasoningGymVerifier(), workers=1, timeout=10.0) as shared:
        yield shared


@pytest.fixture
def scores(pool):
    return pool.score_many


def tagged(answer: str) -> str:
    return f"<answer>{answer}</answer>"


# -- model output that would run as code on the host -----------------------------------------------------------

@pytest.mark.parametrize("family", ["string_insertion", "n_queens", "binary_matrix", "spiral_matrix",
                                    "polynomial_multiplication", "simple_integration"])
def test_an_answer_never_runs_as_code_on_the_host(tmp_path, family, scores):
    """These families' scorers hand a wrong answer to `eval` or sympy's `parse_expr`."""
    canary = tmp_path / "canary"
    gold, _ = task(family)
    payloads = [f"__import__('os').system('touch {canary}')", f"open('{canary}', 'w').write('x')"]
    verdicts = scores([(tagged(p), gold) for p in payloads])
    assert not canary.exists()
    assert all(v.reward == 0.0 for v in verdicts)


# -- answers that would change how later rows are scored -----------------------------------------------------

@pytest.mark.parametrize("attack, family", [
    ("(setattr(__import__('reasoning_gym.algorithmic.string_insertion', fromlist=['_']).StringInsertionDataset, "
     "'score_answer', lambda self, answer, entry: 1.0), "
     "__import__('rlvr_factory.verifiers.reasoning_gym', fromlist=['_']).scorer.cache_clear())", "string_insertion"),
    ("setattr(__import__('reasoning_gym.utils', fromlist=['_']), 'compute_decimal_reward', "
     "lambda *args, **kwargs: 1.0)", "chain_sum"),
    ("setattr(__import__('rlvr_factory.verifiers.reasoning_gym', fromlist=['_']), 'FULL_CREDIT', 0.0)", "products"),
])
def test_no_answer_changes_how_a_later_row_is_scored(attack, family, scores):
    carrier, _ = task("string_insertion")  # its scorer evaluates a wrong answer
    gold, item = task(family, seed=2)
    first, wrong = scores([(tagged(attack), carrier), (tagged(item["answer"] + "9"), gold)])
    assert wrong.reward == 0.0 and not wrong.correct


# -- answers the family's own scorer pays without the task solved --------------------------------------------

def test_a_universal_answer_does_not_solve_every_puzzle24_task(scores):
    """puzzle24's scorer checks that four numbers in range make 24, not that they are the task's numbers."""
    pairs = []
    for index in range(8):
        gold, item = task("puzzle24", seed=3, index=index)
        if sorted(item["metadata"]["numbers"]) != [1, 2, 3, 4]:
            pairs.append((tagged("1*2*3*4"), gold))
    assert pairs and all(v.reward == 0.0 for v in scores(pairs))


def test_a_prefix_or_a_bare_zero_is_no_probability(scores):
    """coin_flip's scorer pays a matching prefix normalised by the shorter string: 0 and 0.2 for 0.234375."""
    gold, item = task("coin_flip")
    value = item["answer"]
    attacks = ["0", value[:3], value[:4], str(float(value) + 5e-5)]
    assert all(v.reward == 0.0 for v in scores([(tagged(a), gold) for a in attacks if a != value]))


def test_any_non_empty_answer_is_not_paid_by_truthiness(scores):
    """game_of_life_halting's scorer compares bool(answer) with bool(reference): every non-empty answer."""
    gold, item = task("game_of_life_halting")
    wrong = "True" if item["answer"] == "False" else "False"
    assert all(v.reward == 0.0 for v in scores([(tagged(a), gold) for a in ("yes", "0", wrong, "no idea")]))


def test_prose_around_the_reference_earns_no_credit_for_length(scores):
    """The default scorer pays len(reference) / len(answer) for any answer that contains the reference."""
    pairs = []
    for family in ("aiw", "gcd", "letter_counting"):
        gold, item = task(family)
        pairs += [(tagged(f"The answer is {item['answer']}"), gold), (tagged(f"{item['answer']} or 7"), gold)]
    assert all(v.reward == 0.0 for v in scores(pairs))


def test_a_tolerance_does_not_pay_an_exact_answer_approximately(scores):
    """decimal_arithmetic pays within one unit of the last place; number_sorting within 1 of each number."""
    gold, item = task("decimal_arithmetic")
    reference = Decimal(item["answer"])
    near = reference + Decimal(1).scaleb(reference.as_tuple().exponent)
    sort_gold, sort_item = task("number_sorting")
    shifted = [float(x) + 0.5 for x in sort_item["metadata"]["sorted_numbers"]]
    verdicts = scores([(tagged(str(near)), gold), (tagged(str(shifted)), sort_gold)])
    assert all(v.reward == 0.0 for v in verdicts)


def test_non_finite_and_hedged_answers_are_not_paid_by_lenient_parsers(scores):
    """complex_arithmetic pays nan (min(1, exp(-nan)) is 1); fraction_simplification reads only the first
    fraction of a hedge; sokoban plays two move sequences one after the other."""
    cgold, _ = task("complex_arithmetic")
    fgold, fitem = task("fraction_simplification")
    sgold, sitem = task("sokoban")
    pairs = [(tagged("nan"), cgold), (tagged("NaN"), cgold), (tagged(f"{fitem['answer']} or 1/2"), fgold),
             (tagged(f"{sitem['answer']}RLRLUD"), sgold)]
    assert all(v.reward == 0.0 for v in scores(pairs))
    assert scores([(tagged(sitem["answer"]), sgold)])[0].correct
