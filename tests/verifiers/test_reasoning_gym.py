"""The reasoning-gym reward: the one ``<answer>`` block, judged exactly or by the family's scorer, attacked by class."""

import json

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym is the `reasoning-gym` extra: pip install -e '.[reasoning-gym]'")

import reasoning_gym  # noqa: E402

from rlvr_factory.verifiers.pool import VerifierPool  # noqa: E402
from rlvr_factory.verifiers.reasoning_gym import (  # noqa: E402
    ReasoningGymVerifier, entry_literal, extract, make_gold, read_entry,
)


def gold_of(family: str, seed: int = 1) -> tuple[str, dict]:
    item = reasoning_gym.create_dataset(family, size=1, seed=seed)[0]
    return make_gold(family, item["answer"], entry_literal(item)), item


def test_the_reference_answer_in_tags_is_correct_and_a_wrong_one_is_not():
    gold, item = gold_of("chain_sum")
    verifier = ReasoningGymVerifier()
    assert verifier.score(f"I add up. <answer>{item['answer']}</answer>", gold).correct
    wrong = verifier.score(f"<answer>{int(item['answer']) + 1}</answer>", gold)
    assert not wrong.correct and wrong.reward == 0.0 and wrong.status == "ok"


def test_partial_credit_is_never_paid():
    """spell_backward's scorer pays a prefix in proportion to its length; here only the whole answer counts."""
    gold, item = gold_of("spell_backward")
    score = ReasoningGymVerifier().score(f"<answer>{item['answer'][:-1]}</answer>", gold)
    assert score.reward == 0.0 and not score.correct and score.breakdown["outcome"] == 0.0


def test_an_exact_family_compares_canonical_forms_without_its_scorer():
    gold, item = gold_of("chain_sum")
    verifier = ReasoningGymVerifier()
    spaced = f"<answer> {int(item['answer']):+,d}.00 </answer>"  # the same number, written otherwise
    assert verifier.quick_score(spaced, gold).correct


def test_no_answer_block_earns_nothing_and_bare_text_is_not_read():
    gold, item = gold_of("chain_sum")
    score = ReasoningGymVerifier(format_weight=0.1).score(f"The answer is {item['answer']}", gold)
    assert score.reward == 0.0 and score.breakdown["format"] == 0.0


def test_hedging_across_blocks_is_ambiguous_and_earns_nothing():
    gold, item = gold_of("chain_sum")
    hedge = f"<answer>{item['answer']}</answer> or maybe <answer>{int(item['answer']) + 1}</answer>"
    score = ReasoningGymVerifier().score(hedge, gold)
    assert score.reward == 0.0 and score.breakdown["ambiguous"] == 1.0
    repeated = f"<answer>{item['answer']}</answer> so <answer> {item['answer']} </answer>"
    assert ReasoningGymVerifier().score(repeated, gold).correct  # the same answer twice is one answer


def test_an_unclosed_tag_states_nothing():
    assert extract("<answer>4").answer is None
    assert extract("<answer>4</answer><answer>5").answer == "4"


def test_format_and_outcome_are_declared_components_with_their_weights():
    gold, item = gold_of("chain_sum")
    score = ReasoningGymVerifier(outcome_weight=0.8, format_weight=0.2).score(f"<answer>{item['answer']}</answer>", gold)
    assert score.reward == pytest.approx(1.0)
    assert score.breakdown["weight.outcome"] == 0.8 and score.breakdown["weight.format"] == 0.2


def test_oversized_completions_and_answers_are_errors_never_sent_to_a_scorer():
    gold, _ = gold_of("chain_sum")
    verifier = ReasoningGymVerifier(max_completion_chars=100, max_answer_chars=10)
    assert verifier.score("x" * 101, gold).status == "error"
    long_answer = verifier.score("<answer>" + "9" * 11 + "</answer>", gold)
    assert long_answer.status == "error" and long_answer.reward == 0.0


def test_a_tampered_gold_is_an_error_and_its_entry_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    verifier = ReasoningGymVerifier()
    evil = json.dumps({"family": "puzzle24", "answer": "1", "entry": f"__import__('os').system('touch {marker}')"})
    with VerifierPool(verifier, workers=1) as pool:
        not_json, executed = pool.score_many([("<answer>2</answer>", "{not json"), ("<answer>2</answer>", evil)])
    assert not_json.status == "error" and "gold" in not_json.message
    assert executed.status == "error" and not marker.exists()
    with pytest.raises(ValueError):
        read_entry("[1, 2]")  # an entry must be a dict


def test_a_scorer_that_raises_is_an_error_status_not_a_crash_of_the_pool():
    broken = make_gold("cryptarithm", "A=1", entry_literal({"question": "q", "metadata": {}}))  # KeyError in its scorer
    good, item = gold_of("cryptarithm")
    with VerifierPool(ReasoningGymVerifier(), workers=1) as pool:
        raised, fine = pool.score_many([("<answer>A=3</answer>", broken), (f"<answer>{item['answer']}</answer>", good)])
    assert raised.status == "error" and raised.reward == 0.0
    assert fine.correct


def test_an_item_without_a_literal_form_is_refused():
    with pytest.raises(ValueError, match="literal"):
        entry_literal({"question": "q", "answer": "1", "metadata": {"f": object()}})
    with pytest.raises(ValueError, match="literal"):
        entry_literal({"question": "q", "answer": "1", "metadata": {"x": float("nan")}})
