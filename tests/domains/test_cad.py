"""The CAD domain: described parts with exact targets, demonstrations that build them, the multi-turn environment."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from rlvr_factory.cad.csg import parse
from rlvr_factory.cad.scripts import cadquery_available
from rlvr_factory.domains import Environment, get_domain, tasks_from_frame, tasks_to_frame
from rlvr_factory.domains.cad import CadDomain, CadEnvironment, part_view_figures
from rlvr_factory.domains.base import Task
from rlvr_factory.domains.cad_tasks import FAMILIES, draw_part
from rlvr_factory.domains.mix import DomainMix
from tests.sandbox.procs import needs_bwrap

SPLITS = {"train": 60, "validation": 12, "test": 12}


@pytest.fixture(scope="module")
def domain() -> CadDomain:
    return CadDomain(splits=SPLITS, levels=[1, 2, 3, 4], seed=0)


@pytest.fixture(scope="module")
def tasks(domain):
    return domain.generate_tasks()


def test_it_is_registered_under_its_name():
    built = get_domain({"name": "cad", "splits": {"test": 2}, "levels": [2]})
    assert isinstance(built, CadDomain) and built.levels == (2,)


def test_splits_have_their_sizes_levels_in_equal_shares_and_no_prompt_twice(tasks):
    assert Counter(t.split for t in tasks) == SPLITS
    assert Counter(t.difficulty for t in tasks if t.split == "train") == {1: 15, 2: 15, 3: 15, 4: 15}
    assert len({t.prompt for t in tasks}) == len(tasks)
    assert len({t.task_id for t in tasks}) == len(tasks)
    assert tasks_from_frame(tasks_to_frame(tasks)) == tasks


def test_generation_is_seeded(domain, tasks):
    again = CadDomain(splits=SPLITS, levels=[1, 2, 3, 4], seed=0).generate_tasks()
    other = CadDomain(splits=SPLITS, levels=[1, 2, 3, 4], seed=1).generate_tasks()
    assert again == tasks and [t.prompt for t in other] != [t.prompt for t in tasks]


def test_every_family_appears_and_every_demonstration_builds_its_target_exactly(domain):
    many = CadDomain(splits={"train": 100}, levels=[1, 2, 3, 4]).generate_tasks()
    assert {t.reference["family"] for t in many} == {f.__name__ for fs in FAMILIES.values() for f in fs}
    for task in many:
        verdict = domain.score(domain.demonstration(task), task.reference)
        assert verdict.correct and verdict.reward == pytest.approx(1.0), task


def test_the_reference_is_the_target_program_and_gold_hands_the_verifier_only_that(tasks):
    task = tasks[0]
    assert parse(task.reference["program"]) is not None
    assert CadDomain.gold(task.reference) == '{"program": "%s"}' % task.reference["program"]


def test_each_family_fully_determines_its_part_from_its_words():
    """Parts with the same description are the same part (so the words are a complete drawing)."""
    rng = random.Random(0)
    seen: dict[str, str] = {}
    for _ in range(3000):
        part = draw_part(rng, rng.choice([1, 2, 3, 4]))
        source = seen.setdefault(part.description, str(part.tree))
        assert source == str(part.tree), part.description


def test_asking_for_more_parts_than_a_level_has_is_refused(monkeypatch):
    only_one = draw_part(random.Random(0), 1)
    monkeypatch.setattr("rlvr_factory.domains.cad.draw_part", lambda rng, level: only_one)  # a level of one part
    with pytest.raises(ValueError, match="level 1 ran out of distinct tasks after 1000 draws; lower domain.splits"):
        CadDomain(splits={"train": 2}, levels=[1]).generate_tasks()


@pytest.mark.parametrize("settings,message", [
    ({"levels": [5]}, "levels must be a non-empty subset"),
    ({"levels": []}, "levels must be a non-empty subset"),
    ({"max_turns": 0}, "max_turns must be at least 1"),
    ({"corpus": "web"}, "corpus must be one of"),
    ({"fn_fraction": 1.5}, "fn_fraction must lie in"),
    ({"form": "cadquery", "verifier": {"forms": ["csg"]}}, "must be one of the verifier's forms"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        CadDomain(**settings)


def test_the_pretraining_corpus_is_programs_of_parts_not_held_out(tasks):
    held_out = {t.prompt for t in tasks if t.split != "train"}
    domain = CadDomain(splits=SPLITS, levels=[1, 2, 3, 4])
    corpus = domain.pretraining_corpus(300, seed=0, exclude=held_out)
    assert len(corpus) == 300 and all(parse(doc) is not None for doc in corpus)
    assert not {doc for doc in corpus} & {t.reference["program"] for t in tasks if t.split != "train"}
    assert corpus == domain.pretraining_corpus(300, seed=0, exclude=held_out)


def test_a_described_corpus_comments_each_program_with_its_description(tasks):
    held_out = {t.prompt for t in tasks if t.split != "train"}
    corpus = CadDomain(corpus="described").pretraining_corpus(100, seed=0, exclude=held_out)
    assert all(doc.startswith("// A") and parse(doc) is not None for doc in corpus)  # valid CSG: a comment, a program
    assert not {doc.split("\n")[0][3:] for doc in corpus} & held_out


def test_a_share_of_demonstrations_pins_the_resolution_as_scraped_openscad_does(tasks):
    pinned = CadDomain(splits=SPLITS, levels=[1, 2, 3, 4], fn_fraction=0.5)
    demonstrations = [pinned.demonstration(t) for t in tasks]
    curved = [d for d, t in zip(demonstrations, tasks) if "cylinder" in t.reference["program"]
              or "sphere" in t.reference["program"]]
    with_fn = [d for d in curved if "$fn=" in d]
    assert 0.3 < len(with_fn) / len(curved) < 0.7
    assert demonstrations == [pinned.demonstration(t) for t in tasks]  # seeded by the task
    for program in with_fn:
        verdict = pinned.verifier.quick_score(program, pinned.gold(tasks[0].reference))
        assert verdict.breakdown["cad_status"] == "parse_error" and "$fn is not accepted" in verdict.breakdown["reason"]
    assert all(parse(d) is not None for d in demonstrations if "$fn=" not in d)


def test_instructions_prefix_the_form_summary():
    instructed = CadDomain(splits={"test": 1}, instructions=True).generate_tasks()[0]
    assert "CSG language" in instructed.prompt and instructed.prompt.startswith("A ")


# -- the multi-turn environment -------------------------------------------------------------------


def test_a_wrong_attempt_gets_a_measured_report_and_a_right_one_ends_the_episode(domain, tasks):
    task = next(t for t in tasks if t.reference["family"] == "plate_with_hole")
    env = domain.environment()
    assert isinstance(env, Environment) and isinstance(env, CadEnvironment)
    assert env.reset(task) == task.prompt
    plate = parse(task.reference["program"]).children[0]
    first = env.step(f"cube([{','.join(str(int(v)) for v in plate.size)}]);")  # the plate without its hole
    assert not first.done and 0.8 < first.score.reward < 1.0
    report = first.observation
    assert "Your part built: volume" in report and f"x 0.0..{plate.size[0]:.1f}" in report
    assert f"IoU with the requested part: {first.score.breakdown['iou']:.3f}" in report
    assert "Views that differ from the requested part: top" in report and "front" not in report
    assert "(2 attempts left)" in report
    final = env.step(domain.demonstration(task))
    assert final.done and final.score.correct and final.observation == ""


def test_an_attempt_that_does_not_build_is_told_why_and_where(domain, tasks):
    env = domain.environment()
    env.reset(tasks[0])
    step = env.step("cube([1,2,3]")
    assert not step.done and step.score.reward == 0.0
    assert step.observation.startswith("Your program did not build a valid part (parse_error): line 1, column 13:")


def test_the_episode_ends_after_max_turns_attempts(tasks):
    env = CadDomain(splits={"test": 1}, max_turns=2).environment()
    env.reset(tasks[0])
    assert not env.step("sphere(1);").done
    last = env.step("sphere(1);")
    assert last.done and not last.score.correct
    with pytest.raises(RuntimeError, match="step\\(\\) before reset"):
        env.step("sphere(1);")


def test_one_turn_is_a_single_turn_episode(tasks):
    env = CadDomain(splits={"test": 1}, max_turns=1).environment()
    env.reset(tasks[0])
    assert env.step("sphere(1);").done


# -- pictures ---------------------------------------------------------------------------------------


def test_pictures_of_the_first_and_last_round_only_for_cad_tasks(domain, tasks):
    by_id = {t.task_id: t for t in tasks}
    train = [t for t in tasks if t.split == "train"]
    rows = [{"round": r, "task_id": t.task_id, "completion": domain.demonstration(t) if r else "cube(1"}
            for r in (0, 1, 2) for t in train[:3]]
    figures = part_view_figures(domain, rows, by_id, per_round=2)
    assert sorted(figures) == [f"round_{r:03d}_{t.task_id}_{k}.png" for r in (0, 2) for k, t in enumerate(train[:2])]
    assert "parse_error" in figures[f"round_000_{train[0].task_id}_0.png"]._suptitle.get_text()
    assert "built, IoU 1.000" in figures[f"round_002_{train[0].task_id}_0.png"]._suptitle.get_text()


def test_a_mix_pictures_its_cad_member_only():
    mix = DomainMix(domains={"parts": {"name": "cad", "splits": {"train": 2}},
                             "sums": {"name": "arithmetic", "splits": {"train": 2},
                                      "levels": {1: {"digits": 1, "operands": 2, "ops": "+"}}}})
    tasks = {t.task_id: t for t in mix.generate_tasks()}
    rows = [{"round": 0, "task_id": task_id, "completion": "cube(1);"} for task_id in tasks]
    figures = part_view_figures(mix, rows, tasks, per_round=5)
    assert sorted(figures) == ["round_000_cad-train-00000_0.png", "round_000_cad-train-00001_1.png"]


@needs_bwrap
@pytest.mark.skipif(not cadquery_available(), reason="CadQuery is not installed (the cad extra: pip install -e '.[cad]')")
def test_the_cadquery_form_asks_for_scripts_and_its_demonstrations_build_in_the_sandbox():
    domain = CadDomain(splits={"test": 2}, levels=[2, 3], form="cadquery", instructions=True)
    try:
        for task in domain.generate_tasks():
            assert "CadQuery script" in task.prompt
            demonstration = domain.demonstration(task)
            assert demonstration.startswith("```python\nimport cadquery as cq")
            assert domain.score(demonstration, task.reference).correct
    finally:
        domain.verifier.close()


def test_rlvr_verify_scores_cad_rows_and_names_a_bad_reference(tmp_path, tasks):
    task = tasks[0]
    rows = [{"id": "right", "completion": task.reference["program"], "reference": task.reference},
            {"id": "covering", "completion": "cube([1000,1000,1000],center=true);", "reference": task.reference},
            {"id": "unparsed", "completion": "cube([1,2", "reference": task.reference},
            {"id": "no_program", "completion": "cube([1,2,3]);", "reference": {"answer": "7"}}]
    src, dst = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rlvr = Path(sys.executable).with_name("rlvr")
    result = subprocess.run([str(rlvr), "verify", "--domain", "cad", "--input", str(src), "--output", str(dst),
                             "--workers", "1"], capture_output=True, text=True, timeout=300)
    out = {r["id"]: r for r in map(json.loads, dst.read_text().splitlines())}
    assert result.returncode == 1  # the row without a program is an error row
    assert out["right"]["correct"] and out["right"]["breakdown"]["cad_status"] == "built"
    assert not out["covering"]["correct"] and out["covering"]["reward"] < 0.01
    assert out["unparsed"]["breakdown"]["cad_status"] == "parse_error" and "column" in out["unparsed"]["breakdown"]["reason"]
    assert out["no_program"]["status"] == "error" and "program" in out["no_program"]["message"]


def test_a_part_missing_only_a_small_feature_is_told_which_and_the_episode_goes_on():
    """The largest plate without its smallest hole: IoU 0.997, views alike at 64 x 64, but not the part."""
    domain = CadDomain(splits={"test": 1}, levels=[2])
    env = domain.environment()
    program = "difference(){cube([80,60,10]);translate([40,30,0])cylinder(h=10,r=2);}"
    env.reset(Task("plate", "cad", "A plate ...", {"program": program, "family": "plate_with_hole"}, 2, "test", ""))
    step = env.step("cube([80,60,10]);")
    assert not step.done and not step.score.correct and step.score.breakdown["iou"] > 0.99
    assert ("It is not yet the requested part: its genus (through-holes) is 0 where the target's is 1"
            in step.observation)
