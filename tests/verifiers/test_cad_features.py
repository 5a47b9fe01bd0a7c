"""Red team, small features: a part that misses, moves, resizes or adds a feature is not correct at any size the
task generator produces, even where its volume IoU clears `correct_iou`; the honest part built another way is.

Each attack is shown at the generator's extremes (its smallest feature on its largest part), where the volume IoU
alone (>= 0.99) would have called it correct."""

from __future__ import annotations

import json
import math
import random

import pytest

from rlvr_factory.cad.csg import parse, to_source
from rlvr_factory.cad.features import primitive_paths, without
from rlvr_factory.cad.scripts import cadquery_available
from rlvr_factory.domains.cad_tasks import FAMILIES
from rlvr_factory.verifiers.cad import CadVerifier
from tests.sandbox.procs import needs_bwrap

# The generator's extremes: its smallest feature on its largest part, family by family.
PLATE = "difference(){cube([80,60,10]);translate([40,30,0])cylinder(h=10,r=2);}"  # plate_with_hole
POCKET = "difference(){cube([60,60,30]);translate([20,20,28])cube([4,4,30]);}"  # block_with_pocket
BOSS = "union(){cube([60,60,10]);translate([30,30,10])cylinder(h=3,r=2);}"  # base_with_boss
ROUNDED = "intersection(){cube([50,50,50],center=true);sphere(r=42);}"  # rounded_cube
TUBE = "difference(){cylinder(h=50,r=30);cylinder(h=50,r=2);}"  # tube
SHAFT = "union(){cylinder(h=30,r=30);translate([0,0,30])cylinder(h=4,r=2);}"  # stepped_shaft
CORNERS = ("difference(){cube([90,90,10]);" + "".join(f"translate([{x},{y},0])cylinder(h=10,r=2);"
                                                      for y in (4, 86) for x in (4, 86)) + "}")  # corner_holes
FLANGE = ("difference(){cylinder(h=10,r=36);cylinder(h=10,r=3);" + "".join(
    f"rotate([0,0,{60 * k}])translate([24,0,0])cylinder(h=10,r=2);" for k in range(6)) + "}")  # bolt_flange


@pytest.fixture(scope="module")
def verifier():
    return CadVerifier()


def verdict(verifier: CadVerifier, completion: str, target: str):
    return verifier.score(completion, json.dumps({"program": target}))


def assert_not_correct_though_the_iou_passes(verifier, completion, target, why):
    score = verdict(verifier, completion, target)
    assert score.breakdown["cad_status"] == "built" and score.breakdown["iou"] >= 0.99, score.breakdown
    assert not score.correct, score.breakdown["reason"]
    assert why in score.breakdown["reason"]
    assert score.reward == score.breakdown["iou"]  # the reward is still the IoU; only `correct` needs the features


# -- a feature left out ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("target,completion,why", [
    (PLATE, "cube([80,60,10]);", "genus"),
    (POCKET, "cube([60,60,30]);", "cube([4,4,30]);"),
    (BOSS, "cube([60,60,10]);", "translate([30,30,10])cylinder(h=3,r=2);"),
    (ROUNDED, "cube([50,50,50],center=true);", "sphere(r=42);"),
    (TUBE, "cylinder(h=50,r=30);", "genus"),
    (SHAFT, "cylinder(h=30,r=30);", "translate([0,0,30])cylinder(h=4,r=2);"),
    (CORNERS, CORNERS.replace("translate([86,86,0])cylinder(h=10,r=2);", ""), "genus"),
    (FLANGE, FLANGE.replace("rotate([0,0,300])translate([24,0,0])cylinder(h=10,r=2);", ""), "genus"),
    (FLANGE, FLANGE.replace("cylinder(h=10,r=3);", ""), "genus"),  # the bore
], ids=["hole", "pocket", "boss", "rounding", "tube_bore", "shaft_step", "one_corner_hole", "one_bolt_hole", "bore"])
def test_the_smallest_feature_left_out_of_the_largest_part_is_not_correct(verifier, target, completion, why):
    assert_not_correct_though_the_iou_passes(verifier, completion, target, why)


def test_one_corner_left_unrounded_is_not_correct(verifier):
    one_corner = f"union(){{{ROUNDED}intersection(){{translate([20,20,20])cube(5);cube([50,50,50],center=true);}}}}"
    assert_not_correct_though_the_iou_passes(verifier, one_corner, ROUNDED, "sphere(r=42);")


# -- a feature moved, resized or made blind --------------------------------------------------------------------------

@pytest.mark.parametrize("completion", [
    PLATE.replace("[40,30,0]", "[41,30,0]"),  # moved by 1 mm
    PLATE.replace("[40,30,0]", "[40,30.5,0]"),  # moved by 0.5 mm
    PLATE.replace("r=2", "r=2.5"),  # 1 mm too wide
    PLATE.replace("r=2", "r=1.5"),  # 1 mm too narrow
    PLATE.replace("r=2", "r=3"),
], ids=["moved_1mm", "moved_half_mm", "wider", "narrower", "r3"])
def test_a_hole_moved_or_of_the_wrong_diameter_is_not_correct(verifier, completion):
    assert_not_correct_though_the_iou_passes(verifier, completion, PLATE, "not matched")


@pytest.mark.parametrize("floor", [1, 0.1, 0.001])
def test_a_through_hole_made_blind_is_not_correct_whatever_floor_it_leaves(verifier, floor):
    blind = PLATE.replace("translate([40,30,0])cylinder(h=10,", f"translate([40,30,{floor}])cylinder(h=10,")
    assert_not_correct_though_the_iou_passes(verifier, blind, PLATE, "genus")


def test_a_pocket_moved_or_too_shallow_is_not_correct(verifier):
    for wrong in ("[21,20,28]", "[20,20,29]"):  # 1 mm along x; 1 mm less deep
        assert_not_correct_though_the_iou_passes(verifier, POCKET.replace("[20,20,28]", wrong), POCKET, "not matched")


# -- a feature the target does not have ------------------------------------------------------------------------------

@pytest.mark.parametrize("extra,why", [
    ("translate([10,10,5])cube([3,3,5]);", "mm thick"),  # a pocket
    ("translate([10,10,0])cylinder(h=10,r=2);", "genus"),  # a through-hole
    ("translate([10,10,8])cylinder(h=2,r=1);", "mm thick"),  # a blind hole 2 mm across
])
def test_an_extra_cut_is_not_correct(verifier, extra, why):
    assert_not_correct_though_the_iou_passes(verifier, PLATE.replace("}", extra + "}", 1), PLATE, why)


def test_an_extra_boss_is_not_correct(verifier):
    assert_not_correct_though_the_iou_passes(verifier, f"{PLATE}translate([10,10,10])cylinder(h=2,r=2);", PLATE,
                                             "mm thick")


# -- the whole range of the generator --------------------------------------------------------------------------------

def generated(parts_per_family: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [to_source(family(rng).tree) for level in sorted(FAMILIES) for family in FAMILIES[level]
            for _ in range(parts_per_family)]


@pytest.mark.parametrize("target", generated(2, 44))
def test_any_one_primitive_of_a_generated_part_left_out_is_not_correct(verifier, target):
    tree = parse(target)
    for path in primitive_paths(tree):
        rest = without(tree, path)
        if rest is not None:
            score = verdict(verifier, to_source(rest), target)
            assert not score.correct, (to_source(rest), score.breakdown["reason"])


# -- the honest part, however it is written --------------------------------------------------------------------------

@pytest.mark.parametrize("completion,target", [
    ("difference(){translate([40,30,5])cube([80,60,10],center=true);"
     "translate([40,30,5])cylinder(h=30,d=4,center=true);}", PLATE),
    ("difference(){union(){cube([40,60,10]);translate([40,0,0])cube([40,60,10]);}"
     "translate([40,30,-1])rotate([0,0,7.5])cylinder(h=12,r=2);}", PLATE),
    ("intersection(){rotate([10,20,30])sphere(r=42);cube(50,center=true);}", ROUNDED),  # the ball's facets turned
    ("intersection(){cube([50,50,50],center=true);rotate([0,0,3.75])sphere(d=84);}", ROUNDED),
    ("difference(){cylinder(h=10,r=36);translate([0,0,-1])cylinder(h=12,r=3);" + "".join(
        f"translate([{24 * math.cos(math.radians(60 * k)):.4f},{24 * math.sin(math.radians(60 * k)):.4f},0])"
        f"rotate([0,0,{60 * k}])cylinder(h=10,r=2);" for k in range(6)) + "}", FLANGE),  # holes at rounded positions
    ("union(){translate([0,0,30])cylinder(h=4,r=2);cylinder(h=30,r=30);}", SHAFT),
    ("difference(){cube([60,60,30]);translate([20,20,28])cube([4,4,2]);}", POCKET),
    ("difference(){cube([80,60,10.02]);translate([40,30,0])cylinder(h=10.02,r=2);}", PLATE),  # 0.2% thicker
], ids=["centred", "two_halves_and_turned_hole", "turned_ball", "turned_ball_by_diameter", "flange_by_coordinates",
        "shaft_reordered", "pocket_exactly_deep", "slightly_thick"])
def test_the_part_built_another_way_is_correct(verifier, completion, target):
    score = verdict(verifier, completion, target)
    assert score.correct, score.breakdown["reason"]


@pytest.mark.parametrize("target", generated(2, 45))
def test_every_generated_part_is_correct_when_written_as_its_target_or_respelled(verifier, target):
    assert verdict(verifier, target, target).correct
    turned = verdict(verifier, f"rotate([0,0,90])rotate([0,0,-90]){target}", target)
    assert turned.correct, turned.breakdown["reason"]


# -- settings that would silently disable a check --------------------------------------------------------------------

@pytest.mark.parametrize("settings,message", [
    ({"feature_tolerance": float("nan")}, "feature_tolerance must be a finite positive number"),
    ({"feature_tolerance": float("inf")}, "feature_tolerance must be a finite positive number"),
    ({"feature_tolerance": 0}, "feature_tolerance must be a finite positive number"),
    ({"max_deviation_mm": float("nan")}, "max_deviation_mm must be a finite positive number"),
    ({"max_deviation_mm": True}, "max_deviation_mm must be a finite positive number"),
    ({"correct_iou": float("nan")}, "correct_iou must be a finite positive number"),
    ({"correct_iou": 1.5}, "at most 1"),
    ({"surface_tolerance": float("-inf")}, "surface_tolerance must be a finite positive number"),
    ({"feature_segments": 0}, "feature_segments must be a positive whole number"),
    ({"max_features": 2.5}, "max_features must be a positive whole number"),
    ({"segments": float("nan")}, "segments must be a positive whole number"),
])
def test_non_finite_or_out_of_range_settings_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        CadVerifier(**settings)


def test_a_target_over_max_features_is_an_error_naming_the_setting():
    with pytest.raises(ValueError, match="max_features"):
        verdict(CadVerifier(max_features=7), FLANGE.replace("r=36", "r=36.01"), FLANGE)


# -- CadQuery scripts: OCCT's tessellation is noise, not a missing feature -------------------------------------------

@pytest.fixture(scope="module")
def script_verifier():
    if not cadquery_available():
        pytest.skip("CadQuery is not installed (the cad extra: pip install -e '.[cad]')")
    script_verifier = CadVerifier(forms=["csg", "cadquery"], limits={"timeout_s": 60.0, "cpu_s": 60})
    yield script_verifier
    script_verifier.close()


@needs_bwrap
@pytest.mark.parametrize("script,correct", [
    ("result = cq.Workplane().box(80, 60, 10, centered=False).faces('>Z').workplane()"
     ".pushPoints([(40, 30)]).hole(4)", True),
    ("result = cq.Workplane().box(80, 60, 10, centered=False)", False),
    ("result = cq.Workplane().box(80, 60, 10, centered=False).faces('>Z').workplane()"
     ".pushPoints([(41, 30)]).hole(4)", False),
])
def test_a_cadquery_plate_is_correct_with_its_hole_and_only_then(script_verifier, script, correct):
    score = verdict(script_verifier, f"```python\nimport cadquery as cq\n{script}\n```", PLATE)
    assert score.breakdown["iou"] >= 0.99 and score.correct is correct, score.breakdown["reason"]


@pytest.mark.parametrize("settings,message", [
    ({"solid_limits": {"max_extent_mm": float("nan")}}, "solid_limits.max_extent_mm must be a finite positive"),
    ({"solid_limits": {"min_volume_mm3": float("nan")}}, "solid_limits.min_volume_mm3 must be a finite positive"),
    ({"solid_limits": {"max_triangles": float("inf")}}, "solid_limits.max_triangles must be a positive whole"),
    ({"csg_limits": {"max_abs": float("nan")}}, "csg_limits.max_abs must be a finite positive"),
    ({"csg_limits": {"max_nodes": True}}, "csg_limits.max_nodes must be a positive whole"),
    ({"tessellation_tolerance": float("nan")}, "tessellation_tolerance must be a finite positive"),
])
def test_a_nan_limit_is_refused_rather_than_disabling_its_gate(settings, message):
    with pytest.raises(ValueError, match=message):
        CadVerifier(**settings)


def test_a_nan_turn_limit_is_refused_rather_than_never_ending_the_episode():
    from rlvr_factory.domains.cad import CadDomain

    for turns in (float("nan"), float("inf"), 2.0, True):
        with pytest.raises(ValueError, match="max_turns must be at least 1"):
            CadDomain(max_turns=turns)
