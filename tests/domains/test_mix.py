"""A weighted mix of domains behind the one Domain interface: routed gold and verifier, mixed corpus."""

import json
import pickle

from rlvr_factory.domains import DomainMix, get_domain
from rlvr_factory.verification import VerifyConfig, verify_batch
from rlvr_factory.verifiers.pool import VerifierPool

LEVELS = {1: {"digits": 1, "operands": 2, "ops": "+"}, 2: {"digits": 2, "operands": 2, "ops": "+"}}
VERIFY = VerifyConfig(workers=1, timeout_seconds=20.0, max_input_chars=10_000)


def make_mix(tmp_path, arithmetic_weight=3.0):
    problems = tmp_path / "math.jsonl"
    problems.write_text(json.dumps({"problem": "Expand (x+1)^2.", "solution": "It is $\\boxed{x^2+2x+1}$.",
                                    "answer": "x^2+2x+1", "subject": "Algebra", "level": "Level 2"}) + "\n")
    return DomainMix({
        "arithmetic": {"levels": LEVELS, "splits": {"train": 8, "test": 4}, "weight": arithmetic_weight},
        "extraction": {"splits": {"train": 8, "test": 4}, "levels": [1]},
        "math": {"sources": {"test": str(problems)}},
    }, seed=0)


def test_every_member_task_is_tagged_and_its_demonstration_scores_one(tmp_path):
    mix = make_mix(tmp_path)
    tasks = mix.generate_tasks()
    assert {t.domain for t in tasks} == {"arithmetic", "extraction", "math"}
    for task in tasks:
        assert task.reference["domain"] == task.domain
        assert json.loads(mix.gold(task.reference))["domain"] == task.domain
        assert mix.score(mix.demonstration(task), task.reference).correct


def test_the_mix_verifier_routes_checks_to_members_in_worker_processes(tmp_path):
    mix = make_mix(tmp_path)
    tasks = mix.generate_tasks()
    assert pickle.loads(pickle.dumps(mix.verifier)).verifiers.keys() == mix.verifier.verifiers.keys()
    completions = [mix.demonstration(t) for t in tasks]
    completions[-1] = "So $\\boxed{(x+1)^2}$."  # equivalent, but only the symbolic check in a worker sees it
    scores, stats = verify_batch(mix, completions, [t.reference for t in tasks], VERIFY)
    assert all(s.correct for s in scores)
    assert stats["dispatched"] >= 1
    with VerifierPool(mix.verifier, workers=1) as pool:
        (wrong,) = pool.score_many([("\\boxed{7}", mix.gold(tasks[0].reference))])
    assert not wrong.correct


def test_the_pretraining_corpus_follows_the_weights(tmp_path):
    mix = DomainMix({"arithmetic": {"levels": LEVELS, "splits": {"train": 2}, "weight": 3},
                     "extraction": {"splits": {"train": 2}, "levels": [1]}})
    corpus = mix.pretraining_corpus(100, seed=0, exclude=set())
    assert sum(text.startswith("Compute ") for text in corpus) == 75
    assert sum(text.startswith("Extract as JSON") for text in corpus) == 25
    assert corpus == mix.pretraining_corpus(100, seed=0, exclude=set())


def test_a_member_can_be_named_apart_from_its_key():
    mix = get_domain({"name": "mix", "domains": {"easy_sums": {"name": "arithmetic", "levels": LEVELS,
                                                               "splits": {"test": 2}}}})
    assert {t.domain for t in mix.generate_tasks()} == {"easy_sums"}


def test_raw_rows_of_members_are_tagged_for_curation(tmp_path):
    rows = make_mix(tmp_path).rows()
    assert {r["domain"] for r in rows} == {"arithmetic", "extraction", "math"}
    assert all(r["reference"]["domain"] == r["domain"] for r in rows)
