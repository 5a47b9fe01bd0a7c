"""Orthographic views: depth images line up with the part, differing views are named, pictures are drawn."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.figure import Figure

from rlvr_factory.cad.csg import parse
from rlvr_factory.cad.solid import Manifold, build
from rlvr_factory.cad.views import VIEWS, Frame, depth_image, differing_views, figure, shaded

PLATE = "difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}"


def solid(source: str) -> Manifold:
    return build(parse(source))


def test_the_top_view_of_a_box_is_its_footprint_at_its_top_height():
    frame = Frame((0, 0, 0, 40, 40, 40))  # 1 pixel per mm at size 40
    image = depth_image(solid("translate([10,5,0])cube([20,10,7]);"), "top", frame, size=40)
    covered = ~np.isnan(image)
    assert covered.sum() == 20 * 10
    rows, cols = np.nonzero(covered)
    assert (cols.min(), cols.max()) == (10, 29)  # x from 10 to 30
    assert (rows.min(), rows.max()) == (40 - 15, 40 - 6)  # y from 5 to 15, row 0 at the top of the view
    assert np.allclose(image[covered], 7.0)


def test_the_front_and_side_views_see_the_nearest_face():
    frame = Frame((0, 0, 0, 40, 40, 40))
    part = solid("translate([0,3,0])cube([10,5,20]);")
    front = depth_image(part, "front", frame, size=40)  # looks along +y: the nearest face is at y=3
    side = depth_image(part, "side", frame, size=40)  # looks along -x: the nearest face is at x=10
    assert np.allclose(front[~np.isnan(front)], -3.0) and (~np.isnan(front)).sum() == 10 * 20
    assert np.allclose(side[~np.isnan(side)], 10.0) and (~np.isnan(side)).sum() == 5 * 20


def test_a_through_hole_shows_as_no_material_in_the_top_view():
    frame = Frame.around(solid(PLATE))
    with_hole = depth_image(solid(PLATE), "top", frame, size=80)
    without = depth_image(solid("cube([40,30,5]);"), "top", frame, size=80)
    hole_pixels = np.isnan(with_hole) & ~np.isnan(without)
    pixel_area = ((frame.box[3] - frame.box[0]) / 80) ** 2
    assert hole_pixels.sum() * pixel_area == pytest.approx(np.pi * 9, rel=0.15)


def test_identical_parts_differ_in_no_view():
    assert differing_views(solid(PLATE), solid(PLATE)) == {}


def test_a_pocket_differs_in_the_top_view_only():
    pocket = "difference(){cube([40,30,10]);translate([10,10,6])cube([20,10,10]);}"
    differ = differing_views(solid(pocket), solid("cube([40,30,10]);"))
    assert set(differ) == {"top"} and 0.1 < differ["top"] < 0.3


def test_a_shifted_part_differs_in_every_view_it_shifts_in():
    differ = differing_views(solid("translate([0,0,8])cube([40,30,5]);"), solid("cube([40,30,5]);"))
    assert set(differ) == {"top", "front", "side"}  # top: depth; front and side: silhouette


def test_the_picture_shows_both_parts_in_three_views():
    fig = figure(solid(PLATE), solid("cube([40,30,5]);"), "a plate")
    assert isinstance(fig, Figure) and len(fig.axes) == 2 * len(VIEWS)
    assert [ax.get_title() for ax in fig.axes[:3]] == ["target: top", "target: front", "target: side"]
    missing = figure(solid(PLATE), None, "nothing built")
    assert len(missing.axes[3].images) == 0 and "did not build" in missing.axes[3].texts[0].get_text()


def test_shading_is_lighter_nearer_dark_at_steps_and_white_where_empty():
    ramp = np.tile(np.linspace(0.0, 1.0, 8), (3, 1))  # a gentle slope: no edges
    rgb = shaded(ramp, 0.0, 1.0, pixel=1.0)
    brightness = rgb[1].sum(axis=1)
    assert np.all(np.diff(brightness) > 0)
    cliff = shaded(np.array([[0.0, 0.0, 9.0, 9.0]]), 0.0, 10.0, pixel=1.0)
    assert cliff[0, 2].sum() < 0.5 and cliff[0, 3].sum() > cliff[0, 1].sum()  # an edge at the step
    assert np.allclose(shaded(np.full((3, 3), np.nan), 0.0, 1.0, pixel=1.0), 1.0)  # no material: white
