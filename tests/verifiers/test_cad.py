"""The CAD reward: gated on a valid solid, then the exact volume IoU with the target (refined, never exceeded)."""

from __future__ import annotations

import json
import pickle

import pytest

from rlvr_factory.cad.scripts import cadquery_available
from rlvr_factory.verifiers.cad import CadVerifier, extract_program
from rlvr_factory.verifiers.pool import VerifierPool

PLATE = "difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}"
GOLD = json.dumps({"program": PLATE})
BREAKDOWN_KEYS = {"builds", "iou", "bbox_iou", "volume", "components", "cad_status", "reason", "form"}


def score(completion: str, gold: str = GOLD, **settings):
    verifier = CadVerifier(**settings)
    return verifier.quick_score(completion, gold) or verifier.score(completion, gold)


@pytest.mark.parametrize("completion", [
    PLATE,
    "difference() {\n  cube([40, 30, 5]);   // plate\n  translate([20, 15, 0]) cylinder(h=5, d=6);\n}\n",
    "```openscad\n" + PLATE + "\n```",
    "Here is the part:\n```\n" + PLATE + "\n```\nIt has one hole.",
    "difference(){translate([20,15,2.5])cube([40,30,5],center=true);translate([20,15,-1])cylinder(h=7,r=3);}",
    "difference(){cube([40,30,5]);translate([20,15,2.5])cylinder(h=20,r=3,center=true);}",
])
def test_programs_that_build_the_target_are_correct_whatever_their_spelling(completion):
    verdict = score(completion)
    assert verdict.correct and verdict.reward == pytest.approx(1.0)
    assert verdict.status == "ok" and verdict.breakdown["cad_status"] == "built"
    assert set(verdict.breakdown) == BREAKDOWN_KEYS


def test_the_reward_is_the_volume_iou():
    without_hole = score("cube([40,30,5]);")
    hole = 5 * 24 * 9 * 0.13052619222005157  # the 48-gon hole's volume: 0.5 n r^2 sin(2 pi / n) h
    assert without_hole.reward == pytest.approx((6000 - hole) / 6000)
    assert not without_hole.correct and without_hole.breakdown["iou"] == without_hole.reward
    half = score("difference(){cube([20,30,5]);translate([20,15,0])cylinder(h=5,r=3);}")
    assert half.reward == pytest.approx((3000 - hole / 2) / (6000 - hole), rel=1e-6)


def test_correct_means_iou_at_least_correct_iou():
    nearly = "difference(){cube([40,30,5.02]);translate([20,15,0])cylinder(h=5.02,r=3);}"  # 0.4% too thick
    assert score(nearly).correct and not score(nearly, correct_iou=0.999).correct


def test_bbox_and_surface_terms_refine_the_iou_and_never_exceed_it():
    shifted = "translate([2,0,0])" + PLATE
    plain = score(shifted)
    refined = score(shifted, bbox_weight=0.3, surface_weight=0.3)
    assert refined.reward < plain.reward == plain.breakdown["iou"]
    assert 0.0 < refined.breakdown["surface"] < 1.0 and refined.breakdown["bbox_iou"] < 1.0
    assert score(PLATE, bbox_weight=0.3, surface_weight=0.3).reward == pytest.approx(1.0)


@pytest.mark.parametrize("settings,message", [
    ({"bbox_weight": 0.6, "surface_weight": 0.5}, "sum to less than 1"),
    ({"bbox_weight": -0.1}, "must be >= 0"),
    ({"forms": ["step"]}, "non-empty subset"),
    ({"forms": []}, "non-empty subset"),
])
def test_bad_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        CadVerifier(**settings)


def test_a_parse_error_is_a_cheap_zero_with_its_position():
    verifier = CadVerifier()
    verdict = verifier.quick_score("difference(){cube([40,30,5]);", GOLD)
    assert verdict is not None and verdict.reward == 0.0 and verdict.status == "ok"
    assert verdict.breakdown["cad_status"] == "parse_error"
    assert verdict.breakdown["reason"].startswith("line 1, column 30: the block opened")
    assert set(verdict.breakdown) == BREAKDOWN_KEYS
    assert verifier.quick_score(PLATE, GOLD) is None  # a program that parses must be built


@pytest.mark.parametrize("completion,extracted", [
    ("cube(1);", ("csg", "cube(1);")),
    ("  \n", None),
    ("```\n```", None),
    ("```scad\ncube(1);\n```\n```scad\nsphere(1);\n```", ("csg", "sphere(1);")),  # the last block counts
    ("```python\nimport cadquery as cq\nresult = cq.Workplane().box(1,1,1)\n```",
     ("cadquery", "import cadquery as cq\nresult = cq.Workplane().box(1,1,1)")),
    ("result = cq.Workplane().sphere(2)", ("cadquery", "result = cq.Workplane().sphere(2)")),
    ("```\ncube(1);", ("csg", "cube(1);")),  # an unclosed fence
])
def test_extraction_takes_the_last_block_and_tells_the_forms_apart(completion, extracted):
    assert extract_program(completion) == extracted


def test_a_script_where_only_csg_is_accepted_is_refused_without_running():
    verdict = CadVerifier().quick_score("```python\nimport cadquery as cq\nresult = cq.Workplane().box(1,1,1)\n```", GOLD)
    assert verdict.reward == 0.0 and verdict.breakdown["cad_status"] == "form_not_allowed"
    assert "accepts csg programs, not cadquery" in verdict.breakdown["reason"]


def test_accepting_cadquery_needs_the_extra():
    if cadquery_available():
        assert CadVerifier(forms=["csg", "cadquery"]).segments == 128
    else:
        with pytest.raises(ImportError, match=r"pip install -e '.\[cad\]'"):
            CadVerifier(forms=["cadquery"])


def test_a_bad_gold_is_an_error_of_the_check_not_a_silent_zero():
    with pytest.raises(ValueError, match="'program'"):
        CadVerifier().score(PLATE, json.dumps({"answer": 3}))


def test_the_verifier_pickles_without_its_per_process_state():
    verifier = CadVerifier()
    verifier.score(PLATE, GOLD)
    clone = pickle.loads(pickle.dumps(verifier))
    assert clone._targets == {} and clone._sandbox is None
    assert clone.score(PLATE, GOLD).correct


def test_the_pool_scores_a_batch_with_every_kind_of_verdict_in_order():
    completions = [PLATE, "cube([40,30,5]);", "cube(", "", "difference(){cube(1);cube(2);}", PLATE]
    with VerifierPool(CadVerifier(), workers=2, timeout=20.0) as pool:
        verdicts = pool.score_many([(c, GOLD) for c in completions])
        stats = pool.stats
    assert [v.breakdown["cad_status"] for v in verdicts] == [
        "built", "built", "parse_error", "no_program", "empty", "built"]
    assert [v.correct for v in verdicts] == [True, False, False, False, False, True]
    assert stats["quick"] == 2 and stats["dispatched"] == 3 and stats["cached"] == 1
