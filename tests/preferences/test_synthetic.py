"""The embedded pairs: a worked, correct solution preferred to a flawed one, with seeded label noise on train only."""

import random
from collections import Counter

import pytest

from rlvr_factory.domains import get_domain
from rlvr_factory.domains.arithmetic import FLAWS
from rlvr_factory.preferences import SyntheticPairs, synthetic_rows
from rlvr_factory.verifiers.math import MathVerifier

DOMAIN = {"name": "arithmetic", "levels": {1: {"digits": 2, "operands": 2, "ops": "+-"},
                                           2: {"digits": 1, "operands": 3, "ops": "+-*"}},
          "splits": {"train": 400, "validation": 100, "test": 50}}


@pytest.fixture(scope="module")
def domain_and_tasks():
    domain = get_domain(DOMAIN)
    return domain, domain.generate_tasks()


def test_each_flaw_is_worse_than_the_worked_solution_in_its_own_way(domain_and_tasks):
    domain, tasks = domain_and_tasks
    verifier, rng = MathVerifier(), random.Random(0)
    for task in tasks[:50]:
        gold = task.reference["answer"]
        worked = domain.demonstration(task)
        assert verifier.score(worked, gold).correct
        flawed = {flaw: domain.flawed_demonstration(task, flaw, rng) for flaw in FLAWS}
        assert verifier.score(flawed["direct"], gold).correct and "=" not in flawed["direct"]
        for wrong in ("direct_wrong", "slip", "wrong_final"):
            assert not verifier.score(flawed[wrong], gold).correct, (task.prompt, wrong, flawed[wrong])
        assert flawed["wrong_final"].splitlines()[:-1] == task.reference["steps"]
        slipped = [s for s, r in zip(flawed["slip"].splitlines(), task.reference["steps"]) if s != r]
        assert slipped  # at least the slipped step differs; the later ones carry the error


def test_pairs_cover_the_chosen_splits_with_noise_on_train_only(domain_and_tasks):
    domain, tasks = domain_and_tasks
    rows = synthetic_rows(domain, tasks, SyntheticPairs(label_noise=0.2, seed=1))
    assert Counter(r["split"] for r in rows) == {"train": 400, "validation": 100}
    flipped = [r for r in rows if r["source"].endswith(":flipped")]
    assert {r["split"] for r in flipped} == {"train"}
    assert 0.12 < len(flipped) / 400 < 0.28
    worked = {f"{t.task_id}-pair": domain.demonstration(t) for t in tasks}
    for r in rows:
        side = "rejected" if r["source"].endswith(":flipped") else "chosen"
        assert r[side] == worked[r["pair_id"]] and r["prompt"].startswith("Compute ")
    assert Counter(r["kind"] for r in rows).keys() == set(FLAWS)
    assert rows == synthetic_rows(domain, tasks, SyntheticPairs(label_noise=0.2, seed=1))
    assert rows != synthetic_rows(domain, tasks, SyntheticPairs(label_noise=0.2, seed=2))


def test_flaw_weights_and_pair_limits_apply(domain_and_tasks):
    domain, tasks = domain_and_tasks
    rows = synthetic_rows(domain, tasks, SyntheticPairs(flaws={"slip": 1.0, "direct": 0.0}, max_pairs={"train": 10}))
    assert {r["kind"] for r in rows} == {"slip"}
    assert Counter(r["split"] for r in rows)["train"] == 10


def test_a_domain_without_flawed_demonstrations_says_to_give_preference_data():
    class Plain:
        name = "plain"

        def demonstration(self, task, worked=True):
            return "x"

    task = get_domain(DOMAIN).generate_tasks()[0]
    with pytest.raises(ValueError, match="preferences.sources"):
        synthetic_rows(Plain(), [task], SyntheticPairs())


@pytest.mark.parametrize("kwargs", [{"label_noise": 0.5}, {"flaws": {}}, {"flaws": {"slip": -1.0}}])
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        SyntheticPairs(**kwargs)


@pytest.mark.parametrize("flaws", [{"direct": float("nan")}, {"direct": float("inf")}, {"direct": True},
                                   {"direct": 1.0, "slip": "2"}])
def test_flaw_weights_must_be_finite_numbers(flaws):
    with pytest.raises(ValueError, match="flaws"):
        SyntheticPairs(flaws=flaws)
