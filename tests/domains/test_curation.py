"""Prompt comparisons see through Unicode variants, and decontamination catches short paraphrases of
evaluation prompts without flagging the distinct problems of real data sets."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.curation import canonical_text, decontaminate, deduplicate, gist, normalise_prompt, same_problem

DATA = Path(os.environ.get("RLVR_SHARED_DATA", Path(__file__).resolve().parents[2].parent / "shared" / "data"))
EVAL = "What is the sum of 123 and 456?"


def task(task_id: str, prompt: str, split: str = "train") -> Task:
    return Task(task_id, "d", prompt, {}, 1, split, "s")


# Each variant reads as the evaluation prompt: invisible format characters (Cf), compatibility forms,
# combining marks, look-alike letters from other scripts, digits of other scripts, odd spaces.
VARIANTS = {
    "zero_width_space": "What is the s\u200bum of 123 and 456?",
    "zero_width_joiner": "What is the su\u200dm of 1\u200d23 and 456?",
    "word_joiner": "What\u2060 is the sum of 123 and 4\u206056?",
    "byte_order_mark_inside": "What is the sum\ufeff of 123 and 456?",
    "soft_hyphens": "What is the s\u00adum of 12\u00ad3 and 456?",
    "full_width": "Ｗｈａｔ ｉｓ ｔｈｅ ｓｕｍ ｏｆ １２３ ａｎｄ ４５６？",
    "cyrillic_look_alikes": "Whаt is thе sum оf 123 аnd 456?",
    "greek_look_alikes": "What is the sum οf 123 and 456?",
    "combining_accents": "Wha\u0301t is the su\u0308m of 123 and 456?",
    "arabic_indic_digits": "What is the sum of ١٢٣ and ٤٥٦?",
    "no_break_and_ideographic_spaces": "What\u00a0is the\u3000sum of 123 and 456?",
    "a_control_character": "What is the sum of 1\x0023 and 456?",
    "a_line_separator": "What is the sum of\u2028123 and 456?",
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_unicode_variants_of_a_prompt_normalise_to_it(name):
    assert normalise_prompt(VARIANTS[name]) == normalise_prompt(EVAL)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_unicode_variant_of_an_evaluation_prompt_is_a_duplicate(name):
    _, removed = deduplicate([task("eval", EVAL, "test"), task("copy", VARIANTS[name])])
    assert [r["task_id"] for r in removed] == ["copy"]


def test_canonical_text_keeps_ascii_text_as_it_is_but_for_case():
    assert canonical_text("Compute 9 + 6*0.\n") == "compute 9 + 6*0.\n"


PARAPHRASES = {  # (evaluation prompt, a short paraphrase of it)
    "operator_words": ("What is 17 times 23?", "Compute 17 × 23."),
    "number_words": ("What is 15 plus 27?", "what's fifteen plus twenty-seven"),
    "reworded_question": ("Find the sum of 17 and 25.", "What is the sum of 17 and 25?"),
    "thousands_separator": ("A car costs $12,500 and a bike $300. How much do both cost?",
                            "How much do a car at 12500 dollars and a bike at 300 dollars cost?"),
    "short_without_numbers": ("What is the capital of France?", "Name the capital city of France."),
    "a_copy_shorter_than_n_words": ("Compute 7*8", "Compute 7*8"),
    "padded_with_a_request": ("What is 17 times 23?", "What is 17 times 23? Please answer quickly, my teacher needs it."),
}


@pytest.mark.parametrize("name", sorted(PARAPHRASES))
def test_a_short_paraphrase_of_an_evaluation_prompt_is_decontaminated(name):
    evaluation, paraphrase = PARAPHRASES[name]
    kept, removed = decontaminate([task("eval", evaluation, "test"), task("train", paraphrase)], n=8, threshold=0.5)
    assert [r["task_id"] for r in removed] == ["train"] and "eval" in removed[0]["reason"]
    assert [t.task_id for t in kept] == ["eval"]


DISTINCT = {  # (evaluation prompt, a different problem that looks like it)
    "other_numbers": ("What is 17 times 23?", "What is 17 times 24?"),
    "other_order_of_a_difference": ("Compute 41-17", "Compute 17-41"),
    "other_operator": ("Compute 12+34", "Compute 12*34"),
    "a_template_with_another_word": ("Spell hello backwards", "Spell world backwards"),
    "other_content": ("Tom has 3 apples and buys 5 more. How many apples?",
                      "A train leaves at 3 and arrives 5 hours later. When does it arrive?"),
}


@pytest.mark.parametrize("name", sorted(DISTINCT))
def test_a_different_problem_that_looks_alike_is_kept(name):
    evaluation, other = DISTINCT[name]
    assert decontaminate([task("eval", evaluation, "test"), task("train", other)], n=8, threshold=0.5)[1] == []


def test_the_gist_is_the_numbers_and_operators_in_order_and_the_content_words():
    found = gist("What's seventeen plus twenty-five red apples?")
    assert found.skeleton == ("17", "+", "25") and found.words == gist("red apple").words and found.short
    assert same_problem(gist("Compute 17+25"), gist("17 + 25 = ?"), 0.5) == 1.0


def _real(relative: str, key: str) -> list[str]:
    path = DATA / relative
    if not path.exists():
        pytest.skip(f"shared data file {path} is absent (set RLVR_SHARED_DATA to the shared data folder)")
    return [json.loads(line)[key] for line in path.open(encoding="utf-8")]


def test_on_gsm8k_the_paraphrase_rule_flags_no_train_question_against_the_test_questions():
    train, test = _real("gsm8k/train.jsonl", "question"), _real("gsm8k/test.jsonl", "question")
    tasks = [task(f"train-{i}", p) for i, p in enumerate(train)] + [task(f"test-{i}", p, "test") for i, p in enumerate(test)]
    _, removed = decontaminate(tasks, n=8, threshold=0.5)
    assert len(removed) == 2  # the word 8-gram rule's two near-copies
    assert not [r for r in removed if r["reason"].startswith("restates")]


def _flagged_pairs(prompts: list[str]) -> set[tuple[int, int]]:
    gists = [gist(p) for p in prompts]
    by_skeleton: dict[tuple[str, ...], list[int]] = {}
    for i, found in enumerate(gists):
        by_skeleton.setdefault(found.skeleton, []).append(i)
    return {(i, j) for same in by_skeleton.values() for i in same for j in same
            if i < j and same_problem(gists[i], gists[j], 0.5) is not None}


def test_within_math500_and_gsm8k_test_no_two_problems_are_one_and_gsm8k_train_has_two_restated():
    assert _flagged_pairs(_real("math500/test.jsonl", "problem")) == set()
    assert _flagged_pairs(_real("gsm8k/test.jsonl", "question")) == set()
    train = _real("gsm8k/train.jsonl", "question")
    pairs = _flagged_pairs(train)
    # both true restatements: the same purchase by another buyer, the same school in other words
    assert sorted(tuple(sorted((train[i].split()[0], train[j].split()[0]))) for i, j in pairs) == [
        ("A", "A"), ("Amanda", "Josie")]
