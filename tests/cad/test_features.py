"""A target's features: each primitive's effect, split into pieces, judged in its own neighbourhood."""

from __future__ import annotations

import math

import pytest

from rlvr_factory.cad.csg import Combine, Cube, Cylinder, parse, to_source
from rlvr_factory.cad.features import (
    difference, errors, features, fine_triangles, neighbourhood, pieces_of, primitive_paths, primitive_source,
    thickest, volume_within, without,
)
from rlvr_factory.cad.solid import Manifold, build

PLATE = parse("difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}")
ROUNDED = parse("intersection(){cube(20,center=true);sphere(r=16);}")


def plate_features():
    return features(PLATE, build(PLATE), 48, 32)


def test_every_primitive_has_a_path_and_its_source_with_the_transforms_above_it():
    assert list(primitive_paths(PLATE)) == [(0,), (1, 0)]
    assert [primitive_source(PLATE, p) for p in primitive_paths(PLATE)] == [
        "cube([40,30,5]);", "translate([20,15,0])cylinder(h=5,r=3);"]


def test_leaving_a_primitive_out_keeps_the_rest_and_the_first_of_a_difference_takes_it_all():
    assert without(PLATE, (1, 0)) == Combine("difference", (Cube((40, 30, 5)),))
    assert without(PLATE, (0,)) is None
    assert to_source(without(ROUNDED, (1,))) == "intersection(){cube([20,20,20],center=true);}"


def test_a_hole_is_a_feature_of_its_own_volume_whatever_the_plate_around_it():
    plate, hole = plate_features()
    assert plate.volume == pytest.approx(build(PLATE).volume())
    assert hole.source == "translate([20,15,0])cylinder(h=5,r=3);"
    assert hole.volume == pytest.approx(5 * 24 * 9 * math.sin(2 * math.pi / 48))  # the 48-gon hole
    assert hole.region == pytest.approx((14.5, 9.5, -2.5, 25.5, 20.5, 7.5))  # its box grown by 2.5 mm (half of 5)


def test_the_corners_a_ball_rounds_off_are_eight_features():
    corners = [f for f in features(ROUNDED, build(ROUNDED), 48, 32) if f.source == "sphere(r=16);"]
    assert len(corners) == 8 and all(f.volume < 60 for f in corners)


def test_a_target_with_too_many_primitives_is_refused_naming_the_limit():
    with pytest.raises(ValueError, match="the limit is 1 .*max_features"):
        features(PLATE, build(PLATE), 48, 1)


def test_the_error_of_a_feature_is_the_difference_around_it_over_its_volume():
    target = build(PLATE)
    assert errors(difference(target, target), plate_features()) == [0.0, 0.0]
    plate_error, hole_error = errors(difference(build(Cube((40, 30, 5))), target), plate_features())
    assert hole_error == pytest.approx(1.0) and plate_error < 0.03  # the plate as a whole hardly sees it


def test_volume_within_a_box_cuts_only_what_sticks_out():
    cube = Manifold.cube([2, 2, 2])
    assert volume_within(cube, (-1, -1, -1, 3, 3, 3)) == pytest.approx(8)
    assert volume_within(cube, (1, 0, 0, 5, 5, 5)) == pytest.approx(4)
    assert volume_within(Manifold(), (0, 0, 0, 1, 1, 1)) == 0.0


def test_the_neighbourhood_grows_a_box_by_half_its_smallest_side():
    assert neighbourhood(Manifold.cube([4, 2, 10])) == pytest.approx((-1, -1, -1, 5, 3, 11))


def test_pieces_are_measured_with_their_thickness():
    slab, block = Manifold.cube([10, 10, 0.1]), Manifold.cube([2, 2, 2]).translate([20, 0, 0])
    thin, thick = sorted(pieces_of(slab + block), key=lambda p: p.thickness)
    assert thin.volume == pytest.approx(10) and thin.thickness == pytest.approx(0.1, rel=0.05)
    assert thick.thickness == pytest.approx(2 / 3) and thick.bbox == pytest.approx((20, 0, 0, 22, 2, 2))
    assert pieces_of(Manifold()) == []


def test_the_thickest_piece_of_a_difference_is_none_for_equal_solids():
    target = build(PLATE)
    assert thickest(difference(target, target)) is None
    assert thickest(difference(build(Cube((40, 30, 5))), target)).volume == pytest.approx(
        5 * 24 * 9 * math.sin(2 * math.pi / 48))


def test_a_fine_build_is_priced_by_its_primitives():
    assert fine_triangles(PLATE, 192) == 12 + 4 * 192
    assert fine_triangles(parse("sphere(1);"), 192) == 192 * 192 // 2
    assert fine_triangles(Cylinder(1, 1), 10) == 40
