"""Solids: CSG trees built by manifold3d, the gate every part passes, foreign meshes admitted or refused, agreement."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlvr_factory.cad.csg import parse
from rlvr_factory.cad.solid import (
    InvalidSolid, Manifold, SolidLimits, agreement, bounding_box, build, check, from_mesh, surface_agreement,
)

LIMITS = SolidLimits()


def solid(source: str) -> Manifold:
    return build(parse(source))


def mesh_of(part: Manifold) -> tuple[np.ndarray, np.ndarray]:
    mesh = part.to_mesh64()
    return np.array(mesh.vert_properties)[:, :3], np.array(mesh.tri_verts, dtype=np.int64)


def two(first: tuple[np.ndarray, np.ndarray], second: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Two meshes as one (their triangles side by side, no boolean)."""
    return np.vstack([first[0], second[0]]), np.vstack([first[1], second[1] + len(first[0])])


def test_a_box_has_its_exact_volume_and_box():
    measures = check(solid("cube([40,30,5]);"), LIMITS)
    assert measures.volume == pytest.approx(6000)
    assert measures.bbox == (0, 0, 0, 40, 30, 5)
    assert measures.components == 1 and measures.surface_area == pytest.approx(2 * (1200 + 200 + 150))


def test_a_cylinder_is_a_regular_prism_of_the_given_segments():
    for segments in (16, 48):
        volume = check(build(parse("cylinder(h=10,r=3);"), segments), LIMITS).volume
        assert volume == pytest.approx(0.5 * segments * 9 * math.sin(2 * math.pi / segments) * 10)


def test_difference_makes_a_through_hole_even_with_coplanar_faces():
    plate = check(solid("difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}"), LIMITS)
    assert plate.volume == pytest.approx(6000 - 5 * 0.5 * 48 * 9 * math.sin(2 * math.pi / 48))
    assert solid("difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}").genus() == 1


def test_rotate_turns_about_x_then_y_then_z_like_openscad():
    rod = bounding_box(solid("rotate([0,90,0])cylinder(h=30,r=2);"))
    assert rod[3] == pytest.approx(30) and rod[0] == pytest.approx(0, abs=1e-9)  # +z turned onto +x
    turned = bounding_box(solid("rotate([90,0,90])cube([1,2,3]);"))  # x: y->z (z->-y); then z: x->y, y->-x
    assert np.allclose(turned, (0, 0, 0, 3, 1, 2), atol=1e-9)


def test_union_and_intersection_volumes():
    assert check(solid("union(){cube(2);translate([1,0,0])cube(2);}"), LIMITS).volume == pytest.approx(12)
    assert check(solid("intersection(){cube(2);translate([1,0,0])cube(2);}"), LIMITS).volume == pytest.approx(4)


@pytest.mark.parametrize("source,status", [
    ("difference(){cube(1);cube(2);}", "empty"),
    ("intersection(){cube(1);translate([5,0,0])cube(1);}", "empty"),
    ("cube([10,10,0.000001]);", "degenerate"),
    ("cube([2000,1,1]);", "too_large"),
    ("translate([-600,0,0])cube(1);translate([600,0,0])cube(1);", "too_large"),
])
def test_the_gate_refuses_parts_that_cannot_be_scored(source, status):
    with pytest.raises(InvalidSolid) as caught:
        check(solid(source), LIMITS)
    assert caught.value.status == status and caught.value.reason


def test_the_gate_bounds_the_mesh_size():
    with pytest.raises(InvalidSolid, match="triangles; the limit is 100") as caught:
        check(solid("sphere(r=5);"), SolidLimits(max_triangles=100))
    assert caught.value.status == "too_complex"


def test_a_built_part_counts_its_pieces():
    assert check(solid("cube(1);translate([3,0,0])cube(1);translate([6,0,0])sphere(1);"), LIMITS).components == 3


def test_a_valid_foreign_mesh_is_admitted_with_its_volume():
    part = solid("difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}")
    admitted = from_mesh(*mesh_of(part), LIMITS)
    assert admitted.volume() == pytest.approx(part.volume())


def test_a_hollow_box_whose_cavity_faces_inward_is_a_valid_solid():
    box = mesh_of(solid("cube(10);"))
    cavity = (box[0] * 0.5 + 2.5, box[1][:, ::-1])
    assert from_mesh(*two(box, cavity), LIMITS).volume() == pytest.approx(1000 - 125)


@pytest.mark.parametrize("attack,status", [
    ("inverted", "inverted"),
    ("inverted_piece", "inverted"),
    ("overlapping_shells", "self_intersecting"),
    ("nested_same_way", "self_intersecting"),
    ("doubled", "self_intersecting"),
    ("open", "not_manifold"),
    ("nan", "non_finite"),
    ("inf", "non_finite"),
    ("huge", "too_large"),
    ("bad_index", "degenerate"),
    ("flat", "degenerate"),
    ("wrong_shape", "degenerate"),
])
def test_foreign_meshes_that_are_not_solids_are_refused(attack, status):
    vertices, triangles = mesh_of(solid("cube(10);"))
    meshes = {
        "inverted": (vertices, triangles[:, ::-1]),
        "inverted_piece": two((vertices, triangles), (vertices + 20, triangles[:, ::-1])),
        "overlapping_shells": two((vertices, triangles), (vertices + 5, triangles)),
        "nested_same_way": two((vertices, triangles), (vertices * 0.5 + 2.5, triangles)),
        "doubled": two((vertices, triangles), (vertices, triangles)),
        "open": (vertices, triangles[:-1]),
        "nan": (np.where(np.arange(len(vertices))[:, None] == 0, np.nan, vertices), triangles),
        "inf": (np.where(np.arange(len(vertices))[:, None] == 0, np.inf, vertices), triangles),
        "huge": (vertices * 1e7, triangles),
        "bad_index": (vertices, np.where(triangles == 0, 99, triangles)),
        "flat": (np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], float), np.array([[0, 1, 2], [0, 2, 1]])),
        "wrong_shape": (vertices[:, :2], triangles),
    }
    with pytest.raises(InvalidSolid) as caught:
        from_mesh(*meshes[attack], LIMITS)
    assert caught.value.status == status, caught.value.reason


def test_agreement_is_the_exact_volume_iou():
    a, b = solid("cube(2);"), solid("translate([1,0,0])cube(2);")
    assert agreement(a, a).iou == pytest.approx(1.0)
    assert agreement(a, b).iou == pytest.approx(4 / 12)  # 4 shared of 12 covered
    assert agreement(a, solid("translate([5,0,0])cube(2);")).iou == 0.0
    assert agreement(a, b).bbox_iou == pytest.approx(4 / 12)
    assert agreement(solid("cube(4);"), solid("difference(){cube(4);translate([1,1,1])cube(2);}")).bbox_iou == 1.0


def test_surface_agreement_is_one_for_the_same_part_and_falls_with_distance():
    part = solid("difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}")
    near = solid("difference(){cube([40,30,5]);translate([21,15,0])cylinder(h=5,r=3);}")
    far = solid("translate([10,0,0])cube([40,30,5]);")
    same = surface_agreement(part, part)
    assert same == pytest.approx(1.0)
    assert same > surface_agreement(near, part) > surface_agreement(far, part) > 0.0
