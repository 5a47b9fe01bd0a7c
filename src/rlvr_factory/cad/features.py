"""A target's features, and how far a candidate part is from each, measured at the feature's own scale.

Volume IoU judges a part as a whole, so a feature much smaller than its part hardly moves it: a
2 mm hole left out of an 80 x 60 x 10 mm plate costs 0.3% of the IoU. The checks here do not
scale with the part:

- topology: `genus` counts through-holes, so a through-hole left out or made blind (whatever
  floor it leaves) changes it;
- features: every primitive of the target's CSG tree is a feature. Its effect is where the target
  differs from the target built without it (the empty cylinder of a hole, the material of a
  boss, the corners a ball rounds off a cube), split into connected pieces. Each piece is judged
  in its neighbourhood, its bounding box grown by half its smallest side on every side: the
  volume on which candidate and target differ there, as a fraction of the piece's own volume, is
  its `error`. A piece left out has error 1 at any part size; a 2 mm hole moved by 1 mm has
  0.63 and one widened to 3 mm has 1.25. Both sides are compared finer than the reward builds
  them (the verifier's `feature_segments`), so tessellation noise (a sphere's facets turned, OCCT's mesh of a
  CadQuery script) stays near 0.01 even on the corners a large ball rounds off a cube;
- deviations: where the part and the target differ, every connected piece must be thin (its
  `thickness`, 2 x volume / surface area, is a slab's thickness): tessellation leaves slivers
  hundredths of a millimetre thick, while a feature the target does not have (an extra pocket or
  boss) or a hole one millimetre too wide leaves a piece half a millimetre thick or more.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from rlvr_factory.cad.csg import Combine, Cube, Cylinder, Node, Sphere, Translate, format_number, to_source
from rlvr_factory.cad.solid import Manifold, bounding_box, build

Path = tuple[int, ...]  # child indices from the root of a tree down to one primitive
Box = tuple[float, float, float, float, float, float]  # xmin, ymin, zmin, xmax, ymax, zmax
_PRIMITIVES = (Cube, Cylinder, Sphere)
MIN_PIECE_MM3 = 1e-3  # effect pieces smaller than this are boolean round-off, not features


@dataclass(frozen=True)
class Feature:
    """One connected piece of what one primitive changes in the target."""

    source: str  # the primitive with the transforms above it, as CSG source (what a verdict names)
    volume: float  # mm^3 of the target this piece changes
    region: Box  # the neighbourhood in which a candidate must agree with the target


def primitive_paths(node: Node, path: Path = ()) -> Iterator[Path]:
    """The path of every primitive of a tree, depth first."""
    if isinstance(node, _PRIMITIVES):
        yield path
    elif isinstance(node, Combine):
        for index, child in enumerate(node.children):
            yield from primitive_paths(child, path + (index,))
    else:
        yield from primitive_paths(node.child, path + (0,))


def without(node: Node, path: Path) -> Node | None:
    """The tree with the primitive at `path` left out; None when nothing is left (the first child of a
    difference takes the whole difference with it)."""
    if not path:
        return None
    if not isinstance(node, Combine):
        child = without(node.child, path[1:])
        return None if child is None else replace(node, child=child)
    index = path[0]
    child = without(node.children[index], path[1:])
    if child is None and node.op == "difference" and index == 0:
        return None
    children = node.children[:index] + (() if child is None else (child,)) + node.children[index + 1:]
    return Combine(node.op, children) if children else None


def primitive_source(node: Node, path: Path) -> str:
    """The primitive at `path` with the transforms above it (booleans left out), as CSG source."""
    if not path:
        return to_source(node)
    if isinstance(node, Combine):
        return primitive_source(node.children[path[0]], path[1:])
    name, vector = ("translate", node.offset) if isinstance(node, Translate) else ("rotate", node.angles)
    return f"{name}([{','.join(format_number(v) for v in vector)}])" + primitive_source(node.child, path[1:])


def neighbourhood(piece: Manifold) -> Box:
    """The piece's bounding box grown by half its smallest side on every side."""
    box = bounding_box(piece)
    margin = 0.5 * min(box[i + 3] - box[i] for i in range(3))
    return tuple(v - margin for v in box[:3]) + tuple(v + margin for v in box[3:])  # type: ignore[return-value]


def volume_within(solid: Manifold, box: Box) -> float:
    """The volume of the solid inside the box (no boolean when the solid lies wholly inside it)."""
    if solid.is_empty():
        return 0.0
    bounds = bounding_box(solid)
    if all(box[i] <= bounds[i] and bounds[i + 3] <= box[i + 3] for i in range(3)):
        return solid.volume()
    size = [box[i + 3] - box[i] for i in range(3)]
    return (solid ^ Manifold.cube(size).translate(list(box[:3]))).volume()


def features(tree: Node, target: Manifold, segments: int, max_features: int) -> tuple[Feature, ...]:
    """Every connected piece of every primitive's effect on the target (see the module docstring).

    A tree with more than `max_features` primitives is refused (`ValueError`): each costs a build."""
    paths = list(primitive_paths(tree))
    if len(paths) > max_features:
        raise ValueError(f"the target has {len(paths)} primitives; feature checks build each one left out, and "
                         f"the limit is {max_features} (raise max_features or simplify the target)")
    return tuple(feature for path in paths for feature in _effect(tree, path, target, segments))


def _effect(tree: Node, path: Path, target: Manifold, segments: int) -> Iterator[Feature]:
    rest = without(tree, path)
    reduced = Manifold() if rest is None else build(rest, segments)
    source = primitive_source(tree, path)
    for piece in ((target - reduced) + (reduced - target)).decompose():
        if piece.volume() >= MIN_PIECE_MM3:
            yield Feature(source, piece.volume(), neighbourhood(piece))


def fine_triangles(tree: Node, segments: int) -> int:
    """About how many triangles the tree's primitives have at `segments` facets around (what a fine build costs)."""
    sizes = {Cube: 12, Cylinder: 4 * segments, Sphere: segments * segments // 2}
    return sum(sizes[type(_primitive(tree, path))] for path in primitive_paths(tree))


def _primitive(node: Node, path: Path) -> Node:
    for index in path:
        node = node.children[index] if isinstance(node, Combine) else node.child
    return node


@dataclass(frozen=True)
class Difference:
    """Where a part and its target differ: material the target lacks, and material the part lacks."""

    extra: Manifold
    missing: Manifold


@dataclass(frozen=True)
class Piece:
    """One connected piece of a `Difference`."""

    volume: float  # mm^3
    thickness: float  # 2 x volume / surface area, in mm: a slab's thickness, a long cylinder's radius
    bbox: Box


def difference(solid: Manifold, target: Manifold) -> Difference:
    """Where `solid` and `target` differ (exact booleans)."""
    return Difference(extra=solid - target, missing=target - solid)


def errors(diff: Difference, target_features: tuple[Feature, ...]) -> list[float]:
    """Each feature's error: the volume of the difference inside its region, over the feature's volume."""
    return [(volume_within(diff.extra, f.region) + volume_within(diff.missing, f.region)) / f.volume
            for f in target_features]


def thickest(diff: Difference) -> Piece | None:
    """The thickest connected piece of the difference; None when they do not differ."""
    pieces = [piece for part in (diff.extra, diff.missing) for piece in pieces_of(part)]
    return max(pieces, key=lambda piece: piece.thickness, default=None)


def pieces_of(solid: Manifold) -> list[Piece]:
    """The solid's connected pieces, measured from its mesh in one pass (thousands of tessellation slivers cost
    milliseconds, where `decompose` would build a solid of each)."""
    mesh = solid.to_mesh64()
    vertices, triangles = np.asarray(mesh.vert_properties)[:, :3], np.asarray(mesh.tri_verts, dtype=np.int64)
    if len(triangles) == 0:
        return []
    edges = np.concatenate([triangles[:, :2], triangles[:, 1:]])
    graph = coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(len(vertices),) * 2)
    label = connected_components(graph, directed=False)[1][triangles[:, 0]]
    a, b, c = (vertices[triangles[:, k]] for k in range(3))
    volume = np.bincount(label, np.einsum("ij,ij->i", a, np.cross(b, c)) / 6)
    area = np.bincount(label, np.linalg.norm(np.cross(b - a, c - a), axis=1) / 2)
    low, high = np.full((len(volume), 3), np.inf), np.full((len(volume), 3), -np.inf)
    np.minimum.at(low, label, np.minimum(np.minimum(a, b), c))
    np.maximum.at(high, label, np.maximum(np.maximum(a, b), c))
    return [Piece(float(v), float(2 * v / s), tuple(float(x) for x in (*lo, *hi)))  # type: ignore[arg-type]
            for v, s, lo, hi in zip(volume, area, low, high) if s > 0]
