"""The real data sets in the shared data folder load into valid task tables with the right counts, and
their reference solutions earn the full reward (a seeded sample here; all of them in benchmarks/domains.py)."""

import random

import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.curation import validate
from rlvr_factory.domains.loaders import shared_data_dir

SAMPLE = 60
SOURCES = {
    "gsm8k": ({"train": "shared:gsm8k/train.jsonl", "test": "shared:gsm8k/test.jsonl"}, {"train": 7473, "test": 1319}),
    "math": ({"test": "shared:math500/test.jsonl"}, {"test": 500}),
}


@pytest.fixture(params=sorted(SOURCES))
def loaded(request):
    if not (shared_data_dir() / "gsm8k").is_dir():
        pytest.skip(f"no shared data at {shared_data_dir()} (set RLVR_SHARED_DATA)")
    sources, counts = SOURCES[request.param]
    domain = get_domain({"name": request.param, "sources": sources})
    return domain, counts


def test_every_row_is_a_valid_task_and_the_counts_match(loaded):
    domain, counts = loaded
    rows = domain.rows()
    tasks, quarantined = validate(rows, {domain.name: domain})
    assert quarantined == []
    assert {s: sum(t.split == s for t in tasks) for s in counts} == counts
    assert len({t.task_id for t in tasks}) == len(tasks)
    assert all(t.prompt.strip() and t.difficulty >= 1 for t in tasks)


def test_a_sample_of_reference_solutions_scores_one(loaded):
    domain, _ = loaded
    tasks = random.Random(0).sample(domain.generate_tasks(), SAMPLE)
    for task in tasks:
        verdict = domain.score(domain.demonstration(task), task.reference)
        assert verdict.reward == 1.0 and verdict.correct, (task.task_id, task.reference["answer"])


def test_math_difficulty_comes_from_the_level_and_gsm8k_from_the_solution_steps(loaded):
    domain, _ = loaded
    levels = {t.difficulty for t in domain.generate_tasks()}
    assert levels == ({1, 2, 3, 4, 5} if domain.name == "math" else set(range(2, 9)))  # GSM8K: 2-8 steps
