"""Orthographic views of solids: depth images, which views of two parts differ, and a picture of both.

Three views, as on a drawing: `top` (looking down -z; x right, y up), `front` (looking along +y;
x right, z up) and `side` (looking along -x; y right, z up). Each is a depth image rendered by
a small z-buffer rasteriser (numpy): the height of the nearest surface toward the viewer, or NaN
where the view sees no material. Two parts are framed together, so their pixels line up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from rlvr_factory.cad.solid import Manifold, bounding_box

# view -> (axis the viewer looks along, sign of the side it looks from, image x axis, image y axis)
VIEWS: dict[str, tuple[int, int, int, int]] = {"top": (2, 1, 0, 1), "front": (1, -1, 0, 2), "side": (0, 1, 1, 2)}


@dataclass(frozen=True)
class Frame:
    """The box (xmin, ymin, zmin, xmax, ymax, zmax) the views show, padded a little."""

    box: tuple[float, float, float, float, float, float]

    @classmethod
    def around(cls, *solids: Manifold) -> Frame:
        boxes = np.array([bounding_box(s) for s in solids if not s.is_empty()] or [(0, 0, 0, 1, 1, 1)])
        low, high = boxes[:, :3].min(0), boxes[:, 3:].max(0)
        pad = 0.05 * max(float((high - low).max()), 1e-6)
        return cls(tuple(np.concatenate([low - pad, high + pad]).tolist()))  # type: ignore[arg-type]


def depth_image(solid: Manifold, view: str, frame: Frame, size: int = 96) -> np.ndarray:
    """A `size` x `size` image (row 0 at the top) of the nearest surface's height toward the viewer, NaN for none."""
    axis, sign, ux, uy = VIEWS[view]
    low, high = np.array(frame.box[:3]), np.array(frame.box[3:])
    scale = size / max(high[ux] - low[ux], high[uy] - low[uy])
    depth = np.full((size, size), -np.inf)
    if solid.is_empty():
        return np.full((size, size), np.nan)
    mesh = solid.to_mesh64()
    corners = np.asarray(mesh.vert_properties)[:, :3][np.asarray(mesh.tri_verts)]
    px = (corners[..., ux] - low[ux]) * scale
    py = (corners[..., uy] - low[uy]) * scale
    pz = sign * corners[..., axis]
    for (x0, x1, x2), (y0, y1, y2), (z0, z1, z2) in zip(px, py, pz):
        area = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
        if abs(area) < 1e-12:
            continue
        xs = np.arange(max(int(np.floor(min(x0, x1, x2))), 0), min(int(np.ceil(max(x0, x1, x2))), size))
        ys = np.arange(max(int(np.floor(min(y0, y1, y2))), 0), min(int(np.ceil(max(y0, y1, y2))), size))
        if not len(xs) or not len(ys):
            continue
        gx, gy = np.meshgrid(xs + 0.5, ys + 0.5)
        w1 = ((gx - x0) * (y2 - y0) - (x2 - x0) * (gy - y0)) / area
        w2 = ((x1 - x0) * (gy - y0) - (gx - x0) * (y1 - y0)) / area
        inside = (w1 >= 0) & (w2 >= 0) & (w1 + w2 <= 1)
        z = z0 + w1 * (z1 - z0) + w2 * (z2 - z0)
        rows, cols = gy[inside].astype(int), gx[inside].astype(int)
        np.maximum.at(depth, (rows, cols), z[inside])
    depth[np.isinf(depth)] = np.nan
    return depth[::-1]  # image row 0 is the top of the view


def differing_views(solid: Manifold, target: Manifold, size: int = 64, depth_tolerance: float = 0.02,
                    pixel_fraction: float = 0.02) -> dict[str, float]:
    """For each view, the fraction of pixels (of those either part covers) where the two parts differ:
    material on one side only, or depths further apart than `depth_tolerance` of the frame.
    Views whose fraction exceeds `pixel_fraction` are the ones that differ."""
    frame = Frame.around(solid, target)
    span = max(frame.box[3] - frame.box[0], frame.box[4] - frame.box[1], frame.box[5] - frame.box[2])
    out = {}
    for view in VIEWS:
        a, b = depth_image(solid, view, frame, size), depth_image(target, view, frame, size)
        covered = ~np.isnan(a) | ~np.isnan(b)
        differ = (np.isnan(a) != np.isnan(b)) | (np.abs(np.nan_to_num(a) - np.nan_to_num(b)) > depth_tolerance * span)
        out[view] = float((differ & covered).sum() / max(covered.sum(), 1))
    return {view: fraction for view, fraction in out.items() if fraction > pixel_fraction}


def shaded(depth: np.ndarray, low: float, high: float, pixel: float) -> np.ndarray:
    """An RGB picture of a depth image (depths from `low` to `high`, `pixel` mm per pixel): nearer is lighter,
    steps steeper than a 70-degree slope drawn as dark edges, no material white."""
    level = np.clip((np.nan_to_num(depth, nan=low) - low) / max(high - low, 1e-9), 0, 1)
    gray = 0.35 + 0.55 * level
    empty = np.isnan(depth)
    filled = np.where(empty, low - (high - low), depth)
    step = max(0.01 * (high - low), 2.75 * pixel)
    edge = np.zeros_like(empty)
    edge[1:, :] |= np.abs(np.diff(filled, axis=0)) > step
    edge[:, 1:] |= np.abs(np.diff(filled, axis=1)) > step
    rgb = np.stack([gray * 0.80, gray * 0.88, gray], axis=-1)
    rgb[edge] = (0.1, 0.1, 0.15)
    rgb[empty & ~edge] = 1.0
    return rgb


def figure(target: Manifold, built: Manifold | None, title: str, size: int = 160) -> Figure:
    """The target (top row) and the built part (bottom row) in the three views, framed alike and depth-shaded."""
    fig = Figure(figsize=(9, 6.4), dpi=100)
    frame = Frame.around(target, *([built] if built is not None else []))
    rows = [("target", target), ("built", built)]
    for r, (label, solid) in enumerate(rows):
        for c, view in enumerate(VIEWS):
            ax = fig.add_subplot(2, 3, 3 * r + c + 1)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{label}: {view}", fontsize=9)
            if solid is None:
                ax.text(0.5, 0.5, "did not build", ha="center", va="center", transform=ax.transAxes, color="crimson")
                continue
            axis, sign, ux, uy = VIEWS[view]
            low, high = sorted((sign * frame.box[axis], sign * frame.box[axis + 3]))
            pixel = max(frame.box[ux + 3] - frame.box[ux], frame.box[uy + 3] - frame.box[uy]) / size
            ax.imshow(shaded(depth_image(solid, view, frame, size), low, high, pixel), interpolation="nearest")
    fig.suptitle(title, fontsize=9)
    lines = title.count("\n") + 1
    fig.subplots_adjust(top=1.0 - 0.045 * lines - 0.03)  # the title's lines above the first row's view titles
    return fig
