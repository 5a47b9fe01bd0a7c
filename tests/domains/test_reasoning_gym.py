"""reasoning-gym as a domain source: families by name, levels from their curricula, each its own domain,
and generators that raise, hang or give bad items quarantined while the rest carry on."""

from dataclasses import replace

import pytest

pytest.importorskip("reasoning_gym", reason="reasoning-gym is the `reasoning-gym` extra: pip install -e '.[reasoning-gym]'")

from rlvr_factory.domains import get_domain  # noqa: E402
from rlvr_factory.domains.reasoning_gym import (  # noqa: E402
    EXCLUDED, ReasoningGymDomain, available_families, level_config, resolve_families,
)
from rlvr_factory.rollout.agent_loop import RolloutConfig  # noqa: E402
from rlvr_factory.verification import VerifyConfig, verify_batch  # noqa: E402
from rlvr_factory.domains.curation import TaskDecontaminationConfig  # noqa: E402

SPLITS = {"train": 4, "test": 2}
GENERATION = {"workers": 1, "timeout_seconds": 60}
VERIFY = VerifyConfig(workers=1, timeout_seconds=20.0, max_input_chars=10_000)


def domain(**kwargs) -> ReasoningGymDomain:
    return get_domain({"name": "reasoning_gym", "splits": SPLITS, "generation": GENERATION, **kwargs})


def test_each_family_is_a_domain_and_its_demonstrations_score_one_through_the_pool():
    rg = domain(datasets=["chain_sum", "spell_backward"])
    tasks = rg.generate_tasks()
    assert {t.domain for t in tasks} == {"chain_sum", "spell_backward"}
    assert sum(t.split == "train" for t in tasks) == 8 and sum(t.split == "test" for t in tasks) == 4
    assert all(t.prompt.endswith("between <answer> and </answer>.") for t in tasks)
    scores, _ = verify_batch(rg, [rg.demonstration(t) for t in tasks], [t.reference for t in tasks], VERIFY)
    assert all(s.correct for s in scores)
    wrong, _ = verify_batch(rg, ["<answer>not it</answer>"] * len(tasks), [t.reference for t in tasks], VERIFY)
    assert not any(s.correct for s in wrong)


def test_generation_is_seeded():
    first = [t.to_row() for t in domain(datasets=["chain_sum"], seed=3).generate_tasks()]
    assert first == [t.to_row() for t in domain(datasets=["chain_sum"], seed=3).generate_tasks()]
    assert first != [t.to_row() for t in domain(datasets=["chain_sum"], seed=4).generate_tasks()]


def test_items_do_not_depend_on_the_global_random_state_nor_on_the_processs_hash_salt():
    """list_functions draws from `random`'s global generator and isomorphic_strings / ransom_note from
    the order of sets of strings: both changed items from run to run (and so the test splits, the
    pre-training corpus and every metric) until each item drew under seeded globals in workers with
    a fixed PYTHONHASHSEED."""
    import json
    import random
    import subprocess
    import sys

    import numpy as np

    from rlvr_factory.domains import reasoning_gym as module

    families = ["list_functions", "isomorphic_strings", "ransom_note"]
    request = domain(datasets=["list_functions"], splits={"train": 40})._requests({"train": 40}, 0)[0]
    random.seed(1)
    first = module.generate_family(request)
    random.seed(2)
    np.random.seed(2)
    assert module.generate_family(request) == first  # in this process, whatever state the globals were in
    assert random.random() == random.Random(2).random()  # ... which it leaves as it found them
    here = domain(datasets=families).rows()
    script = ("import json, sys; from rlvr_factory.domains import get_domain; "
              f"print(json.dumps(get_domain(json.loads(sys.argv[1])).rows()))")
    settings = {"name": "reasoning_gym", "datasets": families, "splits": SPLITS, "generation": GENERATION}
    for salt in ("1", "2"):  # another process, another salt: the same rows
        out = subprocess.run([sys.executable, "-c", script, json.dumps(settings)], capture_output=True, text=True,
                             check=True, env={**__import__("os").environ, "PYTHONHASHSEED": salt}).stdout
        assert json.loads(out.strip().splitlines()[-1]) == json.loads(json.dumps(here))


def test_a_generator_whose_later_items_change_between_fresh_generators_is_quarantined(monkeypatch):
    from rlvr_factory.domains import reasoning_gym as module

    real, built = module._generator, []

    class Drifting:  # a real generator whose items after the first carry a per-instance counter
        def __init__(self, generator):
            self.generator, self.n = generator, len(built)
            built.append(self)

        def __getitem__(self, i):
            item = self.generator[i]
            return item if i == 0 else {**item, "question": f"{item['question']} ({self.n})"}

    monkeypatch.setattr(module, "_generator", lambda family, config: Drifting(real(family, config)))
    request = domain(datasets=["chain_sum"])._requests({"train": 3}, 0)[0]
    with pytest.raises(RuntimeError, match="nondeterministic: .* gave 2 of 3 items differently .first: item 1"):
        module.generate_family(request)


def test_levels_are_the_family_curriculum_and_a_family_without_one_has_level_one():
    assert level_config("basic_arithmetic", 3, 0, 1, {}) != level_config("basic_arithmetic", 1, 0, 1, {})
    tasks = domain(datasets=["chain_sum"], levels=[1, 2]).generate_tasks()
    assert {t.difficulty for t in tasks} == {1, 2}
    harder = [len(t.prompt) for t in tasks if t.difficulty == 2]
    easier = [len(t.prompt) for t in tasks if t.difficulty == 1]
    assert sum(harder) / len(harder) > sum(easier) / len(easier)  # level 2 chains more terms


def test_all_is_every_registered_family_but_the_excluded_ones():
    families = resolve_families("all")
    assert len(families) >= 100
    assert set(families) == set(available_families()) - set(EXCLUDED)
    assert "gsm_symbolic" not in families and "gsm_symbolic" in resolve_families(["gsm_symbolic"])


def test_unknown_names_composite_and_unknown_config_fields_are_refused():
    with pytest.raises(ValueError, match="unknown reasoning-gym datasets"):
        domain(datasets=["chain_sum", "no_such_family"])
    with pytest.raises(ValueError, match="composite"):
        domain(datasets=["composite"])
    with pytest.raises(ValueError, match="unknown fields"):
        domain(datasets=["chain_sum"], configs={"chain_sum": {"no_such_field": 1}})
    with pytest.raises(ValueError, match="not selected"):
        domain(datasets=["chain_sum"], configs={"spell_backward": {"min_word_len": 3}})
    with pytest.raises(ValueError, match="levels"):
        domain(datasets=["chain_sum"], levels=[0])


def test_a_generator_that_raises_or_hangs_is_quarantined_and_the_others_carry_on():
    rg = domain(datasets=["chain_sum", "sokoban", "basic_arithmetic"],
                configs={"sokoban": {"min_boxes": 4, "max_boxes": 10},  # never finishes on a 6x6 board
                         "basic_arithmetic": {"min_terms": 5, "max_terms": 2}},  # its validate() raises
                generation={"workers": 2, "timeout_seconds": 5})
    rows = rg.rows()
    errors = {r["domain"]: r["_error"] for r in rows if r.get("_error")}
    assert "timeout_seconds" in errors["sokoban"]
    assert "raised" in errors["basic_arithmetic"]
    assert sum(r["domain"] == "chain_sum" and not r.get("_error") for r in rows) == 6


def test_items_without_a_reference_or_over_the_length_limits_are_quarantined_with_the_reason():
    rows = domain(datasets=["boxnet", "chain_sum"], max_prompt_chars=60).rows()
    reasons = {r["domain"]: r["_error"] for r in rows if r.get("_error")}
    assert "no reference answer" in reasons["boxnet"]
    assert "max_prompt_chars=60" in reasons["chain_sum"]


def test_the_pretraining_corpus_states_answers_in_tags_and_leaves_out_excluded_prompts():
    rg = domain(datasets=["chain_sum", "spell_backward"])
    corpus = rg.pretraining_corpus(20, seed=1, exclude=set())
    assert len(corpus) == 20 and all(text.endswith("</answer>") for text in corpus)
    assert corpus == rg.pretraining_corpus(20, seed=1, exclude=set())
    left = rg.pretraining_corpus(20, seed=1, exclude={corpus[0].rsplit("\n<answer>", 1)[0]})
    assert corpus[0] not in left


@pytest.mark.slow
def test_the_whole_pool_curates_verifies_and_evaluates_at_a_tiny_size():
    from rlvr_factory.domains.curation import curate
    from rlvr_factory.evaluation import evaluate_policy
    from rlvr_factory.rollout.hf import SamplingConfig
    from tests.conftest import make_tiny_policy

    rg = get_domain({"name": "reasoning_gym", "datasets": "all", "splits": {"train": 1, "test": 1},
                     "generation": {"workers": 2, "timeout_seconds": 120}})
    curated = curate(rg.rows(), rg, decontamination=TaskDecontaminationConfig(skip_domains=["*"]),
                     validation_from_train=0, default_difficulty=1, seed=0)
    test = [t for t in curated.tasks if t.split == "test"]
    families = {t.domain for t in test}
    assert len(rg.families) >= 100 and len(families) >= len(rg.families) - 5
    quarantined = {q["domain"] for q in curated.quarantined}
    assert families | quarantined == set(rg.families)  # every family is either in the pool or quarantined with a reason
    assert all(q.get("reason") for q in curated.quarantined)
    verify = replace(VERIFY, max_input_chars=100_000)  # the pool's default: a gold carries its whole item (arc_agi: ~20k)
    scores, _ = verify_batch(rg, [rg.demonstration(t) for t in test], [t.reference for t in test], verify)
    assert [t.domain for t, s in zip(test, scores) if not s.correct] == []
    report = evaluate_policy(make_tiny_policy(), test, rg, verify, SamplingConfig(max_new_tokens=4, batch_size=1), k=1)
    assert report["num_tasks"] == len(test)
    assert {f"pass@1/domain_{f}" for f in families} <= set(report)


def test_the_reasoning_gym_environment_trains_fifty_families_with_a_level_each():
    from tests.test_config_loader import parameters

    params = parameters("reasoning_gym", {})
    rg = get_domain(params["domain"])  # resolves and checks the families; generates nothing yet
    assert len(rg.families) >= 50 and not set(rg.families) & set(EXCLUDED)
    assert params["rl"]["curriculum"]["levels"]["enabled"] and params["rl"]["curriculum"]["band"] == [0.1, 0.9]
    longest = rg.max_prompt_chars + len(rg.instruction) + 1 + params["rl"]["sampling"]["max_new_tokens"]
    assert params["model"]["embedded"]["architecture"]["max_positions"] >= longest + 16  # bytes are tokens
    # the rollout's context budget is the model's positions, so it covers the longest episode too (a fixed
    # 256 had ended most episodes before their first turn, as context_budget with an empty completion)
    budget = RolloutConfig.from_params(params["rollout"]).context_budget(params["model"]["embedded"]["architecture"]["max_positions"])
    assert budget == params["model"]["embedded"]["architecture"]["max_positions"] >= longest + 16
