"""Solids through manifold3d: build a CSG tree, admit an untrusted mesh, check a solid, measure agreement.

A solid is a `manifold3d.Manifold`, which is an oriented closed 2-manifold by construction
(booleans keep it so). `check` is the gate every built part passes before it earns anything:
valid, non-empty, positive volume above a floor, a bounded number of triangles and a bounded
size. `from_mesh` admits a triangle mesh from elsewhere (a CadQuery script's tessellation,
which its sandboxed author controls): finite coordinates, valid indices, a closed oriented
manifold, and a winding number of 0 or 1 along a grid of rays on every axis, so inverted
pieces, overlapping shells and nested copies are refused before any boolean sees them.
`agreement` compares a solid with a target: exact volume IoU by boolean intersection and
union, and the IoU of the bounding boxes; `surface_agreement` scores their surface distance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import manifold3d
import numpy as np

from rlvr_factory.cad.csg import Combine, Cube, Cylinder, Node, Rotate, Sphere, Translate, require_positive

Manifold = manifold3d.Manifold
_OPS = {"union": manifold3d.OpType.Add, "difference": manifold3d.OpType.Subtract,
        "intersection": manifold3d.OpType.Intersect}


@dataclass(frozen=True)
class SolidLimits:
    """What a built part must satisfy to be scored at all."""

    max_extent_mm: float = 1000.0  # largest bounding-box side
    max_triangles: int = 200_000  # mesh size of the part
    min_volume_mm3: float = 1e-3  # smaller volumes are a degenerate (zero-volume) shell
    winding_rays: int = 24  # rays per axis side when admitting a foreign mesh (24 x 24 per axis)

    def __post_init__(self) -> None:
        require_positive({"solid_limits.max_extent_mm": self.max_extent_mm,
                          "solid_limits.min_volume_mm3": self.min_volume_mm3},
                         {"solid_limits.max_triangles": self.max_triangles,
                          "solid_limits.winding_rays": self.winding_rays})


class InvalidSolid(ValueError):
    """A part that cannot be scored: `status` names the defect (e.g. `not_manifold`), the message says what."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


@dataclass(frozen=True)
class Measures:
    """What a checked solid measures."""

    volume: float  # mm^3
    bbox: tuple[float, float, float, float, float, float]  # xmin, ymin, zmin, xmax, ymax, zmax
    components: int  # disconnected pieces
    triangles: int
    surface_area: float  # mm^2


@dataclass(frozen=True)
class Agreement:
    """How well a solid matches a target."""

    iou: float  # vol(A and B) / vol(A or B), exact booleans
    bbox_iou: float  # the same for the axis-aligned bounding boxes


def build(node: Node, segments: int = 48) -> Manifold:
    """The solid a CSG tree describes; curved surfaces get `segments` facets around."""
    if isinstance(node, Cube):
        return Manifold.cube(node.size, node.center)
    if isinstance(node, Cylinder):
        return Manifold.cylinder(node.h, node.r, circular_segments=segments, center=node.center)
    if isinstance(node, Sphere):
        return Manifold.sphere(node.r, segments)
    if isinstance(node, Translate):
        return build(node.child, segments).translate(node.offset)
    if isinstance(node, Rotate):
        return build(node.child, segments).rotate(node.angles)
    return Manifold.batch_boolean([build(c, segments) for c in node.children], _OPS[node.op])


def bounding_box(solid: Manifold) -> tuple[float, float, float, float, float, float]:
    """(xmin, ymin, zmin, xmax, ymax, zmax) of a solid."""
    return tuple(float(v) for v in solid.bounding_box())  # type: ignore[return-value]


def check(solid: Manifold, limits: SolidLimits) -> Measures:
    """The solid's measures, or `InvalidSolid` when it is not a part that can be scored."""
    status = solid.status()
    if status != manifold3d.Error.NoError:
        raise InvalidSolid("not_manifold", f"the kernel reports {status.name}: the mesh is not a closed manifold")
    if solid.is_empty():
        raise InvalidSolid("empty", "the part is empty (no material left; e.g. everything was subtracted)")
    triangles = solid.num_tri()
    if triangles > limits.max_triangles:
        raise InvalidSolid("too_complex", f"the part has {triangles} triangles; the limit is {limits.max_triangles}")
    volume = solid.volume()
    if volume < 0:
        raise InvalidSolid("inverted", f"the part's volume is negative ({volume:.6g} mm^3): the surface is inside out")
    if volume < limits.min_volume_mm3:
        raise InvalidSolid("degenerate", f"the part's volume is {volume:.3g} mm^3: a shell without volume")
    box = bounding_box(solid)
    extent = max(box[3] - box[0], box[4] - box[1], box[5] - box[2])
    if not math.isfinite(extent) or extent > limits.max_extent_mm:
        raise InvalidSolid("too_large", f"the part spans {extent:.6g} mm; the limit is {limits.max_extent_mm:g} mm")
    return Measures(volume=volume, bbox=box, components=len(solid.decompose()), triangles=triangles,
                    surface_area=solid.surface_area())


def from_mesh(vertices: np.ndarray, triangles: np.ndarray, limits: SolidLimits) -> Manifold:
    """An untrusted triangle mesh as a solid, or `InvalidSolid` saying what is wrong with it."""
    vertices = np.asarray(vertices)
    triangles = np.asarray(triangles)
    if vertices.ndim != 2 or vertices.shape[1] != 3 or triangles.ndim != 2 or triangles.shape[1] != 3:
        raise InvalidSolid("degenerate", f"a mesh needs (n, 3) vertices and (m, 3) triangles, got "
                                         f"{vertices.shape} and {triangles.shape}")
    if len(triangles) < 4:
        raise InvalidSolid("degenerate", f"a closed solid needs at least 4 triangles, got {len(triangles)}")
    if len(triangles) > limits.max_triangles:
        raise InvalidSolid("too_complex", f"the mesh has {len(triangles)} triangles; the limit is {limits.max_triangles}")
    if not np.issubdtype(vertices.dtype, np.number) or not np.issubdtype(triangles.dtype, np.integer):
        raise InvalidSolid("degenerate", f"vertices must be numbers and triangles integers, got {vertices.dtype}, "
                                         f"{triangles.dtype}")
    if not np.isfinite(vertices).all():
        raise InvalidSolid("non_finite", "the mesh has NaN or infinite coordinates")
    if triangles.min() < 0 or triangles.max() >= len(vertices):
        raise InvalidSolid("degenerate", "the mesh's triangles index vertices that do not exist")
    if np.abs(vertices).max() > 1e6:
        raise InvalidSolid("too_large", f"the mesh has coordinates up to {np.abs(vertices).max():.3g} mm")
    mesh = manifold3d.Mesh64(np.array(vertices, dtype=np.float64, order="C"),
                             np.array(triangles, dtype=np.uint64, order="C"))
    mesh.merge()  # weld coincident vertices along open edges (a B-rep tessellation repeats them per face)
    solid = Manifold(mesh)
    status = solid.status()
    if status != manifold3d.Error.NoError:
        raise InvalidSolid("not_manifold", f"the mesh is not a closed oriented manifold ({status.name})")
    _check_winding(solid, limits.winding_rays)
    return solid


def _check_winding(solid: Manifold, rays: int) -> None:
    """Refuse a solid whose winding number leaves {0, 1} along any of a grid of rays on each axis:
    inverted pieces (-1), overlapping or nested shells (2)."""
    if solid.is_empty():
        return
    low, high = np.array(solid.bounding_box()[:3]), np.array(solid.bounding_box()[3:])
    span = np.maximum(high - low, 1e-9)
    jitter = (np.arange(rays) + 0.5 + 0.1234567) / (rays + 0.5)  # off-grid, so rays miss edges of round numbers
    for axis in range(3):
        u, v = [a for a in range(3) if a != axis]
        for a in jitter:
            for b in jitter:
                start, end = low.copy(), high.copy()
                start[u] = end[u] = low[u] + a * span[u]
                start[v] = end[v] = low[v] + b * span[v]
                start[axis], end[axis] = low[axis] - 1.0, high[axis] + 1.0
                winding = 0
                for hit in solid.ray_cast(start.tolist(), end.tolist()):
                    winding += 1 if hit.normal[axis] < 0 else -1  # entering through a face that looks back at us
                    if winding not in (0, 1):
                        what = "inside out" if winding < 0 else "overlapping or nested shells (self-intersecting)"
                        raise InvalidSolid("inverted" if winding < 0 else "self_intersecting",
                                           f"the mesh is {what}: winding number {winding} along a ray on the "
                                           f"{'xyz'[axis]} axis")


def agreement(solid: Manifold, target: Manifold) -> Agreement:
    """Volume IoU (exact boolean intersection; the union's volume is vol(A) + vol(B) - vol(A and B)) and
    bounding-box IoU of a checked solid with the target."""
    inter = (solid ^ target).volume()
    union = solid.volume() + target.volume() - inter
    iou = inter / union if union > 0 else 0.0
    return Agreement(iou=float(min(max(iou, 0.0), 1.0)), bbox_iou=_box_iou(bounding_box(solid), bounding_box(target)))


def _box_iou(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    inter = np.prod([max(0.0, min(a[i + 3], b[i + 3]) - max(a[i], b[i])) for i in range(3)])
    volume = lambda box: np.prod([box[i + 3] - box[i] for i in range(3)])  # noqa: E731
    union = volume(a) + volume(b) - inter
    return float(inter / union) if union > 0 else 0.0


def surface_points(solid: Manifold, samples: int, seed: int = 0) -> np.ndarray:
    """`samples` points on the surface, area-weighted, from a seeded generator."""
    mesh = solid.to_mesh64()
    vertices = np.asarray(mesh.vert_properties)[:, :3]
    corners = vertices[np.asarray(mesh.tri_verts)]
    areas = 0.5 * np.linalg.norm(np.cross(corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]), axis=1)
    rng = np.random.default_rng(seed)
    chosen = rng.choice(len(corners), size=samples, p=areas / areas.sum())
    u, v = rng.random(samples), rng.random(samples)
    flip = u + v > 1
    u[flip], v[flip] = 1 - u[flip], 1 - v[flip]
    tri = corners[chosen]
    return tri[:, 0] + u[:, None] * (tri[:, 1] - tri[:, 0]) + v[:, None] * (tri[:, 2] - tri[:, 0])


def _nearest(points: np.ndarray, others: np.ndarray, chunk: int = 256) -> np.ndarray:
    return np.concatenate([
        np.sqrt(((points[i:i + chunk, None, :] - others[None, :, :]) ** 2).sum(-1).min(1))
        for i in range(0, len(points), chunk)
    ])


def surface_agreement(solid: Manifold, target: Manifold, tolerance: float = 0.02, samples: int = 1000) -> float:
    """exp(-d / (tolerance * the target's bounding-box diagonal)): 1 for identical surfaces, d the symmetric
    Chamfer distance between `samples` seeded, area-weighted points on each surface."""
    p, q = surface_points(solid, samples), surface_points(target, samples)
    chamfer = 0.5 * (_nearest(p, q).mean() + _nearest(q, p).mean())
    box = bounding_box(target)
    diagonal = math.dist(box[:3], box[3:])
    return float(math.exp(-chamfer / (tolerance * diagonal))) if diagonal > 0 else 0.0
