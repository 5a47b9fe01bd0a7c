"""The CAD task generator: mechanical parts described in words, each with its exact CSG target.

Families by level (dimensions in whole millimetres, drawn from a seeded generator):

1. one primitive: a block, a cylinder, a ball;
2. one boolean: a plate with a through hole, a tube, a base with a boss, a block with a pocket,
   a cube rounded by a ball (intersection);
3. several operations: a plate with two holes, an L-bracket, a stepped shaft, an L-bracket
   with a hole in its base;
4. patterns: a row of holes, four corner holes, a flange with a bolt circle.

The wording gives every dimension a drawing would (sizes from the origin, hole centres,
depths as the floor left below a pocket), so a part is fully determined by its description.
Boxes start at the origin ("from the origin") unless centred; cylinders stand on the XY plane.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from rlvr_factory.cad.csg import Combine, Cube, Cylinder, Node, Rotate, Sphere, Translate

LEVELS = (1, 2, 3, 4)


@dataclass(frozen=True)
class Part:
    """A described part: the words, the exact target as a CSG tree, its family and level."""

    description: str
    tree: Node
    family: str
    level: int


def _hole(x: float, y: float, r: float, h: float) -> Node:
    return Translate((x, y, 0.0), Cylinder(h, r))


# -- level 1 --------------------------------------------------------------------------------------

def block(rng: random.Random) -> Part:
    x, y, z = rng.randint(10, 60), rng.randint(10, 60), rng.randint(4, 40)
    return Part(f"A block {x} x {y} x {z} mm from the origin.", Cube((x, y, z)), "block", 1)


def cylinder(rng: random.Random) -> Part:
    r, h = rng.randint(3, 30), rng.randint(4, 50)
    return Part(f"A cylinder of radius {r} mm and height {h} mm standing on the origin.", Cylinder(h, r), "cylinder", 1)


def ball(rng: random.Random) -> Part:
    r = rng.randint(3, 30)
    return Part(f"A ball of radius {r} mm centred at the origin.", Sphere(r), "ball", 1)


# -- level 2 --------------------------------------------------------------------------------------

def plate_with_hole(rng: random.Random) -> Part:
    x, y, t = rng.randint(20, 80), rng.randint(20, 60), rng.randint(3, 10)
    r = rng.randint(2, min(x, y) // 4)
    hx, hy = rng.randint(r + 2, x - r - 2), rng.randint(r + 2, y - r - 2)
    return Part(f"A plate {x} x {y} x {t} mm from the origin with a through hole of radius {r} mm "
                f"at x={hx}, y={hy}.",
                Combine("difference", (Cube((x, y, t)), _hole(hx, hy, r, t))), "plate_with_hole", 2)


def tube(rng: random.Random) -> Part:
    outer = rng.randint(6, 30)
    inner, h = rng.randint(2, outer - 2), rng.randint(5, 50)
    return Part(f"A tube of outer radius {outer} mm, inner radius {inner} mm and height {h} mm standing on the origin.",
                Combine("difference", (Cylinder(h, outer), Cylinder(h, inner))), "tube", 2)


def base_with_boss(rng: random.Random) -> Part:
    x, y, t = rng.randint(20, 60), rng.randint(20, 60), rng.randint(3, 10)
    r, h = rng.randint(2, min(x, y) // 4), rng.randint(3, 30)
    bx, by = rng.randint(r, x - r), rng.randint(r, y - r)
    return Part(f"A base {x} x {y} x {t} mm from the origin with a round boss of radius {r} mm and height "
                f"{h} mm on its top, at x={bx}, y={by}.",
                Combine("union", (Cube((x, y, t)), Translate((bx, by, t), Cylinder(h, r)))), "base_with_boss", 2)


def block_with_pocket(rng: random.Random) -> Part:
    x, y, z = rng.randint(20, 60), rng.randint(20, 60), rng.randint(6, 30)
    ax, ay = rng.randint(2, x // 3), rng.randint(2, y // 3)
    px, py, floor = rng.randint(4, x - ax - 2), rng.randint(4, y - ay - 2), rng.randint(2, z - 2)
    return Part(f"A block {x} x {y} x {z} mm from the origin with a rectangular pocket {px} x {py} mm cut into "
                f"its top face from x={ax}, y={ay}, leaving a floor {floor} mm thick.",
                Combine("difference", (Cube((x, y, z)), Translate((ax, ay, floor), Cube((px, py, z))))),
                "block_with_pocket", 2)


def rounded_cube(rng: random.Random) -> Part:
    side = 2 * rng.randint(5, 25)
    r = rng.randint(side // 2 + 1, side * 17 // 20)  # between the face and the corner distance
    return Part(f"A cube of side {side} mm centred at the origin, intersected with a ball of radius {r} mm.",
                Combine("intersection", (Cube((side, side, side), center=True), Sphere(r))), "rounded_cube", 2)


# -- level 3 --------------------------------------------------------------------------------------

def plate_with_two_holes(rng: random.Random) -> Part:
    x, y, t = rng.randint(40, 90), rng.randint(15, 50), rng.randint(3, 10)
    r = rng.randint(2, max(2, min(y // 4, x // 10)))
    hy = rng.randint(r + 2, y - r - 2)
    x1 = rng.randint(r + 2, x // 2 - r - 1)
    x2 = rng.randint(x // 2 + r + 1, x - r - 2)
    return Part(f"A plate {x} x {y} x {t} mm from the origin with two through holes of radius {r} mm "
                f"at x={x1} and x={x2}, both at y={hy}.",
                Combine("difference", (Cube((x, y, t)), _hole(x1, hy, r, t), _hole(x2, hy, r, t))),
                "plate_with_two_holes", 3)


def _l_bracket(rng: random.Random) -> tuple[int, int, int, int, int, Node]:
    x, y, t = rng.randint(25, 70), rng.randint(10, 50), rng.randint(3, 8)
    wall, h = rng.randint(3, 8), rng.randint(15, 60)
    return x, y, t, wall, h, Combine("union", (Cube((x, y, t)), Cube((wall, y, h))))


def l_bracket(rng: random.Random) -> Part:
    x, y, t, wall, h, tree = _l_bracket(rng)
    return Part(f"An L-bracket from the origin: base {x} x {y} x {t} mm and wall {wall} x {y} x {h} mm standing "
                f"on its x=0 end.", tree, "l_bracket", 3)


def stepped_shaft(rng: random.Random) -> Part:
    r1, h1 = rng.randint(6, 30), rng.randint(4, 30)
    r2, h2 = rng.randint(2, r1 - 2), rng.randint(4, 40)
    return Part(f"A stepped shaft on the z axis, from the origin up: radius {r1} mm for {h1} mm, then radius {r2} mm "
                f"for {h2} mm.",
                Combine("union", (Cylinder(h1, r1), Translate((0, 0, h1), Cylinder(h2, r2)))), "stepped_shaft", 3)


def bracket_with_hole(rng: random.Random) -> Part:
    x, y, t, wall, h, bracket = _l_bracket(rng)
    r = rng.randint(2, max(2, min(y // 4, (x - wall) // 4)))
    hx, hy = rng.randint(wall + r + 2, max(wall + r + 2, x - r - 2)), rng.randint(r + 1, max(r + 1, y - r - 1))
    return Part(f"An L-bracket from the origin: base {x} x {y} x {t} mm and wall {wall} x {y} x {h} mm standing "
                f"on its x=0 end, with a through hole of radius {r} mm in the base at x={hx}, y={hy}.",
                Combine("difference", (bracket, _hole(hx, hy, r, t))), "bracket_with_hole", 3)


# -- level 4 --------------------------------------------------------------------------------------

def row_of_holes(rng: random.Random) -> Part:
    n, r = rng.randint(3, 5), rng.randint(2, 4)
    spacing = rng.randint(2 * r + 3, 2 * r + 12)
    first = rng.randint(r + 3, r + 10)
    x = first + (n - 1) * spacing + rng.randint(r + 3, r + 10)
    y, t = rng.randint(2 * r + 6, 2 * r + 20), rng.randint(3, 8)
    hy = y // 2
    holes = tuple(_hole(first + k * spacing, hy, r, t) for k in range(n))
    return Part(f"A bar {x} x {y} x {t} mm from the origin with a row of {n} through holes of radius {r} mm at "
                f"y={hy}, spaced {spacing} mm apart, the first at x={first}.",
                Combine("difference", (Cube((x, y, t)),) + holes), "row_of_holes", 4)


def corner_holes(rng: random.Random) -> Part:
    x, y, t = rng.randint(30, 90), rng.randint(30, 90), rng.randint(3, 10)
    r = rng.randint(2, 5)
    inset = rng.randint(r + 2, r + 8)
    holes = tuple(_hole(hx, hy, r, t) for hy in (inset, y - inset) for hx in (inset, x - inset))
    return Part(f"A plate {x} x {y} x {t} mm from the origin with four through holes of radius {r} mm, "
                f"each centred {inset} mm in from the two nearest edges.",
                Combine("difference", (Cube((x, y, t)),) + holes), "corner_holes", 4)


def bolt_flange(rng: random.Random) -> Part:
    n = rng.choice((3, 4, 6))
    bore, r = rng.randint(3, 10), rng.randint(2, 4)
    circle = bore + r + rng.randint(3, 10)
    outer, t = circle + r + rng.randint(3, 8), rng.randint(3, 10)
    holes = tuple(Rotate((0, 0, 360 * k / n), Translate((circle, 0, 0), Cylinder(t, r))) for k in range(n))
    return Part(f"A flange: a disc of radius {outer} mm and thickness {t} mm standing on the origin, with a central "
                f"bore of radius {bore} mm and {n} bolt holes of radius {r} mm evenly spaced on a circle of radius "
                f"{circle} mm, the first on the +x axis.",
                Combine("difference", (Cylinder(t, outer), Cylinder(t, bore)) + holes), "bolt_flange", 4)


FAMILIES: dict[int, tuple[Callable[[random.Random], Part], ...]] = {
    1: (block, cylinder, ball),
    2: (plate_with_hole, tube, base_with_boss, block_with_pocket, rounded_cube),
    3: (plate_with_two_holes, l_bracket, stepped_shaft, bracket_with_hole),
    4: (row_of_holes, corner_holes, bolt_flange),
}


def draw_part(rng: random.Random, level: int) -> Part:
    """One part of the given level, its family chosen uniformly."""
    if level not in FAMILIES:
        raise ValueError(f"CAD levels are {sorted(FAMILIES)}, got {level}")
    return rng.choice(FAMILIES[level])(rng)


__all__ = ["FAMILIES", "LEVELS", "Part", "draw_part"]
