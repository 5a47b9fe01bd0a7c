"""The extraction domain: seeded noisy documents, field requests by level, rewards from the fields verifier."""

import json

import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.extraction import ExtractionDomain, format_amount, format_date
from rlvr_factory.models.tokenizer import build_byte_tokenizer

SPLITS = {"train": 60, "validation": 12, "test": 12}


def make_domain(levels=(1, 2, 3, 4), seed=0, splits=SPLITS):
    return ExtractionDomain(splits=splits, levels=list(levels), seed=seed)


def test_tasks_are_deterministic_for_a_seed_and_differ_between_seeds():
    assert make_domain(seed=1).generate_tasks() == make_domain(seed=1).generate_tasks()
    assert [t.prompt for t in make_domain(seed=1).generate_tasks()] != [t.prompt for t in make_domain(seed=2).generate_tasks()]


def test_splits_have_their_sizes_and_share_no_prompt():
    tasks = make_domain().generate_tasks()
    assert {s: sum(t.split == s for t in tasks) for s in SPLITS} == SPLITS
    assert len({t.prompt for t in tasks}) == len(tasks)
    assert {t.difficulty for t in tasks} == {1, 2, 3, 4}


def test_the_level_sets_how_many_fields_are_asked():
    for task in make_domain().generate_tasks():
        assert task.prompt.startswith("Extract as JSON: ")
        if task.difficulty < 4:
            assert len(task.reference["fields"]) == task.difficulty
        else:
            assert len(task.reference["fields"]) >= 4


def test_every_demonstration_scores_one():
    domain = make_domain()
    for task in domain.generate_tasks():
        verdict = domain.score(domain.demonstration(task), task.reference)
        assert verdict.correct and verdict.reward == 1.0, (task.prompt, domain.demonstration(task))


def test_easy_levels_fit_the_embedded_model_with_room_to_answer():
    tokenizer, domain = build_byte_tokenizer(), make_domain(levels=(1, 2), splits={"train": 300})
    for task in domain.generate_tasks():
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": task.prompt}], add_generation_prompt=True)
        answer = len(tokenizer(domain.demonstration(task))["input_ids"]) + 1
        assert len(prompt) + answer <= 256 - 8
        assert answer <= (32 if task.difficulty == 1 else 64)


def test_documents_carry_noise_in_layout_dates_numbers_and_distractors():
    prompts = "\n".join(t.prompt for t in make_domain(levels=(2,), splits={"train": 200}).generate_tasks())
    for marker in ("€", "$", "£", "CHF", "Tel 555-", "PO ", "Customer no.", "TOTAL DUE", "Amount due", "Dated"):
        assert marker in prompts, marker


def test_the_truth_is_read_from_the_rendered_values():
    assert format_date(__import__("datetime").date(2024, 3, 5), 2) == "5 Mar 2024"
    assert format_amount(__import__("decimal").Decimal("1234.5"), "EUR", 0) == "1.234,50 €"
    assert format_amount(__import__("decimal").Decimal("1234.5"), "USD", 1) == "USD 1,234.50"


def test_a_near_miss_on_a_generated_task_scores_below_one():
    domain = make_domain(levels=(3,))
    task = next(t for t in domain.generate_tasks() if t.reference["fields"] == ["subtotal", "tax", "total"])
    answer = json.loads(domain.demonstration(task))
    answer["total"] = round(answer["total"] + 0.01, 2)
    verdict = domain.score(json.dumps(answer), task.reference)
    assert 0 < verdict.reward < 1 and verdict.breakdown["check.total_is_subtotal_plus_tax"] == 0.0


def test_answer_keys_agree_on_equivalent_answers():
    key = ExtractionDomain.answer_key
    assert key('{"total": "$1,234.50", "date": "5 Mar 2024"}') == key('x {"date":"2024-03-05","total":1234.5}')
    assert key('{"total": 3}') != key('{"total": 4}')
    assert key("no json") is None


def test_the_pretraining_corpus_excludes_held_out_prompts():
    domain = make_domain(levels=(1,))
    held_out = {t.prompt for t in domain.generate_tasks()}
    corpus = domain.pretraining_corpus(200, seed=0, exclude=held_out)
    assert len(corpus) == 200
    assert all(text.split("\n{")[0] not in held_out for text in corpus)
    assert domain.pretraining_corpus(5, 1, set()) == domain.pretraining_corpus(5, 1, set())


def test_unknown_levels_are_refused():
    with pytest.raises(ValueError, match="levels must be among 1-4"):
        get_domain({"name": "extraction", "splits": {"train": 1}, "levels": [5]})


@pytest.mark.parametrize(("reference", "says"), [
    ({"fields": "total", "values": {"total": "1.00"}}, "a list of names"),  # a string, not a list: once a KeyError 't'
    ({"fields": [["total"]], "values": {}}, "a list of names"),
    ({"fields": ["nope"], "values": {"nope": 1}}, "a list of names"),
    ({"fields": ["total"], "values": {"total": float("nan")}}, "not a readable amount"),
    ({"fields": ["total"], "values": {"total": 10**5000}}, "not a readable amount"),
    ({"fields": ["total"], "values": ["1.00"]}, "values mapping"),
    (["total"], "a list of names"),
    (None, "a list of names"),
])
def test_a_malformed_reference_is_a_value_error_saying_what_is_wrong(reference, says):
    with pytest.raises(ValueError, match=says):
        ExtractionDomain.gold(reference)
