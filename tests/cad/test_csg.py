"""The CSG language: what it accepts, what it refuses (and where, and why), its limits and its printer."""

from __future__ import annotations

import random
import time

import pytest

from rlvr_factory.cad.csg import (
    Combine, CsgError, CsgLimits, Cube, Cylinder, Rotate, Sphere, Translate, format_number, parse, primitives, to_source,
)
from rlvr_factory.domains.cad_tasks import FAMILIES

PLATE = """difference() {
  cube([40, 30, 5]);                          // the plate
  translate([20, 15, 0]) cylinder(h=5, r=3);  // a hole through it
}"""


def test_the_documented_example_parses_to_its_tree():
    assert parse(PLATE) == Combine("difference", (
        Cube((40, 30, 5)), Translate((20, 15, 0), Cylinder(5, 3))))


def test_the_canonical_source_is_compact_and_parses_back_to_the_same_tree():
    tree = parse(PLATE)
    assert to_source(tree) == "difference(){cube([40,30,5]);translate([20,15,0])cylinder(h=5,r=3);}"
    assert parse(to_source(tree)) == tree


@pytest.mark.parametrize("level", sorted(FAMILIES))
def test_every_generated_target_round_trips_through_its_source(level):
    rng = random.Random(level)
    for family in FAMILIES[level]:
        for _ in range(20):
            tree = family(rng).tree
            assert parse(to_source(tree)) == tree


@pytest.mark.parametrize("source,tree", [
    ("cube(10);", Cube((10, 10, 10))),
    ("cube(size=[1,2,3], center=true);", Cube((1, 2, 3), center=True)),
    ("cylinder(h=4, d=6);", Cylinder(4, 3)),
    ("cylinder(r=2, h=4, center=false);", Cylinder(4, 2)),
    ("sphere(5);", Sphere(5)),
    ("sphere(d=5);", Sphere(2.5)),
    ("rotate([0, 90, 0]) translate([-1.5, .5, +2]) sphere(r=1);", Rotate((0, 90, 0), Translate((-1.5, 0.5, 2), Sphere(1)))),
    ("translate([1,0,0]) { cube(1); sphere(1); }", Translate((1, 0, 0), Combine("union", (Cube((1, 1, 1)), Sphere(1))))),
    ("cube(1); sphere(2);", Combine("union", (Cube((1, 1, 1)), Sphere(2)))),
    ("intersection(){cube(2,center=true);sphere(1.2);}", Combine("intersection", (Cube((2, 2, 2), True), Sphere(1.2)))),
])
def test_the_accepted_spellings(source, tree):
    assert parse(source) == tree


@pytest.mark.parametrize("source,line,column,fragment", [
    ("", 1, 1, "the program is empty"),
    ("cube([1,2]);", 1, 10, "expected ',' between the components"),
    ("cube([1,2,3,4]);", 1, 12, "more than three components"),
    ("cube([1,2,3])", 1, 14, "expected ';' after cube(...), found the end of the program"),
    ("cube([10,10,10]", 1, 16, "expected ',' or ')'"),
    ("cuboid([1,2,3]);", 1, 1, "unknown operation 'cuboid'"),
    ("cube([1,2,3]);;", 1, 15, "a statement ends with ';' only after a primitive"),
    ("translate([1,2,3]);", 1, 19, "expected a statement"),
    ("union() cube(1);", 1, 9, "expected '{' to open union's block"),
    ("difference(){}", 1, 14, "empty block"),
    ("difference(){\n  cube(1);\n", 3, 1, "the block opened at line 1, column 13 is never closed"),
    ("union(1){cube(1);}", 1, 7, "union takes no arguments"),
    ("cube(0);", 1, 6, "cube's x size must be positive"),
    ("cube([1,1,-1]);", 1, 6, "cube's z size must be positive, got -1"),
    ("cylinder(h=1);", 1, 1, "cylinder needs a radius r= or a diameter d="),
    ("cylinder(r=1);", 1, 1, "cylinder needs its height h="),
    ("cylinder(5, 3);", 1, 10, "keyword arguments only"),
    ("cylinder(h=1, r=1, d=2);", 1, 20, "got r and d for the same thing"),
    ("cylinder(h=1, r=1, r=2);", 1, 20, "got r= twice"),
    ("cylinder(h=1, r1=1, r2=2);", 1, 15, "cones (r1=, r2=) are not part of the language"),
    ("cylinder(h=1, r=1, $fn=100000);", 1, 20, "the verifier fixes the resolution"),
    ("cube(size=1, 1);", 1, 14, "a positional argument of cube follows a keyword argument"),
    ("cube(1, center=1);", 1, 9, "center must be true or false"),
    ("sphere(r=[1,2,3]);", 1, 8, "sphere's r must be a number"),
    ("sphere(r=nan);", 1, 10, "must be a finite number, found 'nan'"),
    ("sphere(r=inf);", 1, 10, "must be a finite number"),
    ("cube([1e3,1,1]);", 1, 7, "exponent notation is not accepted (1e3)"),
    ("sphere(r=1.);", 1, 10, "malformed number"),
    ("sphere(r=20000);", 1, 10, "numbers must lie within +-10000"),
    ("translate([1,2,3]) @", 1, 20, "unexpected character '@'"),
    ("cube(1);\n  sphere(r=);", 2, 12, "expected a number for sphere's r, found ')'"),
])
def test_refusals_say_where_and_what(source, line, column, fragment):
    with pytest.raises(CsgError) as caught:
        parse(source)
    error = caught.value
    assert (error.line, error.column) == (line, column), str(error)
    assert fragment in error.message
    assert str(error).startswith(f"line {line}, column {column}: ")


def test_comments_and_any_whitespace_are_ignored():
    assert parse("// a part\n\tcube(\n 1 // side\n);\n") == Cube((1, 1, 1))


@pytest.mark.parametrize("source,fragment", [
    ("cube(1);" * 201, "more than 200 operations"),
    ("translate([0,0,0])" * 30 + "cube(1);", "nested more than 24 levels"),
    ("union(){" * 30 + "cube(1);" + "}" * 30, "nested more than 24 levels"),
    ("cube(1);" + " " * 8000, "the limit is 8000"),
])
def test_limits_refuse_large_programs(source, fragment):
    with pytest.raises(CsgError, match=fragment.replace("(", r"\(").replace("+", r"\+")):
        parse(source)


def test_hostile_sizes_are_refused_fast():
    """A megabyte of nesting or statements is refused at once, not after building a deep tree."""
    hostile = ["union(){" * 200_000, "translate([1,1,1])" * 100_000 + "cube(1);", "cube(1);" * 200_000]
    start = time.perf_counter()
    for source in hostile:
        with pytest.raises(CsgError):
            parse(source, CsgLimits(max_chars=10_000_000))
    assert time.perf_counter() - start < 5.0


def test_limits_are_configurable():
    assert parse("cube(1);" * 3, CsgLimits(max_nodes=3)) == Combine("union", (Cube((1, 1, 1)),) * 3)
    with pytest.raises(CsgError, match="more than 2 operations"):
        parse("cube(1);" * 3, CsgLimits(max_nodes=2))


@pytest.mark.parametrize("value,text", [(20.0, "20"), (2.5, "2.5"), (-0.125, "-0.125"), (-0.0, "0"), (1 / 3, "0.3333")])
def test_numbers_print_without_exponents_or_trailing_zeros(value, text):
    assert format_number(value) == text


def test_primitives_counts_the_leaves():
    assert primitives(parse(PLATE)) == 2
    assert primitives(parse("cube(1);")) == 1
