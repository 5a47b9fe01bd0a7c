"""Exact volume IoU of CAD parts: manifold3d (the CSG verifier's kernel) vs OCCT (CadQuery's), same parts, same run.

    python benchmarks/cad.py [--parts 200] [--workers 2]

Each generated part (levels 1-4) is compared with a copy of itself shifted by 1 mm along x, so
every boolean has real work. Rows: building both solids and computing IoU = vol(A and B) /
(vol A + vol B - vol(A and B)) with manifold3d (128 segments per circle), the same with OCCT's
B-rep booleans through CadQuery (the peer; needs the cad extra), and the whole CSG reward (parse,
build, gate, IoU; 48 segments) through the verifier pool the pipeline uses, on the shifted copies
and on each part respelled (a correct answer, whose small features are then checked too:
`cad.features`). The last column counts
parts whose IoU is off by more than 0.01 from the reference (exact for boxes and spheres, else
manifold3d with 1,024 segments, converged to well under 0.001): polygonal circles cost manifold3d
far less than that; OCCT's booleans fail outright on some parts (two overlapping spheres
intersect to the whole sphere).
"""

from __future__ import annotations

import argparse
import math
import random
import time

from rlvr_factory.cad.csg import Cube, Sphere, Translate, to_source
from rlvr_factory.cad.scripts import cadquery_available, cadquery_expression
from rlvr_factory.cad.solid import agreement, build
from rlvr_factory.domains.cad import CadDomain
from rlvr_factory.domains.cad_tasks import draw_part
from rlvr_factory.verification import VerifyConfig, verify_batch


def occt_iou(a, b) -> float:
    """IoU with OCCT's booleans on the exact B-rep (CadQuery Workplanes); NaN when OCCT returns no solid."""
    shapes = a.intersect(b).vals()
    inter = sum(v.Volume() for v in shapes)
    union = a.val().Volume() + b.val().Volume() - inter
    return inter / union if union > 0 else float("nan")


def sphere_iou(r: float, d: float) -> float:
    """The exact IoU of two spheres of radius r whose centres are d apart."""
    lens = math.pi * (4 * r + d) * (2 * r - d) ** 2 / 12
    return lens / (2 * 4 / 3 * math.pi * r**3 - lens)


def pool_seconds(domain: CadDomain, completions: list[str], references: list[dict], workers: int) -> tuple[float, list]:
    """Seconds the pipeline's verifier pool takes to score the completions, and their scores."""
    start = time.perf_counter()
    scores, _ = verify_batch(domain, completions, references,
                             VerifyConfig(workers=workers, timeout_seconds=30.0, max_input_chars=100_000))
    return time.perf_counter() - start, scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    rng = random.Random(0)
    trees = [draw_part(rng, 1 + i % 4).tree for i in range(args.parts)]
    pairs = [(tree, Translate((1, 0, 0), tree)) for tree in trees]

    start = time.perf_counter()
    ours = [agreement(build(b, 128), build(a, 128)).iou for a, b in pairs]
    ours_s = time.perf_counter() - start

    rows = [("manifold3d booleans (ours)", ours_s, None)]
    if cadquery_available():
        import cadquery as cq

        namespace = {"cq": cq}
        start = time.perf_counter()
        peer = [occt_iou(eval(cadquery_expression(a), namespace), eval(cadquery_expression(b), namespace))
                for a, b in pairs]
        rows.append(("OCCT booleans via CadQuery (peer)", time.perf_counter() - start, peer))
    else:
        print("CadQuery is not installed (pip install -e '.[cad]'): the OCCT row is skipped")

    domain = CadDomain(splits={"test": 1})
    references = [{"program": to_source(a)} for a, _ in pairs]
    pool_s, scores = pool_seconds(domain, [to_source(b) for _, b in pairs], references, args.workers)
    assert all(s.breakdown["cad_status"] == "built" for s in scores)
    respelled = [f"rotate([0,0,90])rotate([0,0,-90]){to_source(a)}" for a, _ in pairs]  # correct: features checked
    respelled_s, scores = pool_seconds(domain, respelled, references, args.workers)
    assert all(s.correct for s in scores)

    reference = [sphere_iou(a.r, 1.0) if isinstance(a, Sphere) else (a.size[0] - 1) / (a.size[0] + 1)
                 if isinstance(a, Cube) else agreement(build(b, 1024), build(a, 1024)).iou for a, b in pairs]
    peer = rows[1][2] if len(rows) > 1 else None
    print(f"{args.parts} parts (levels 1-4), each against itself shifted 1 mm")
    print(f"{'IoU by':50} {'parts/s':>8} {'vs OCCT':>8} {'off by > 0.01':>14}")
    for label, seconds, values in rows:
        values = values or ours
        off = sum(not abs(v - r) <= 0.01 for v, r in zip(values, reference))  # NaN counts as off
        ratio = f"{rows[1][1] / seconds:7.1f}x" if peer is not None else "      -"
        print(f"{label:50} {args.parts / seconds:8.1f} {ratio:>8} {off:14d}")
    for label, seconds in ((f"CSG reward, VerifierPool ({args.workers} workers, 48 segments)", pool_s),
                           ("  the same, each part respelled (correct)", respelled_s)):
        ratio = f"{rows[1][1] / seconds:7.1f}x" if peer is not None else "      -"
        print(f"{label:50} {args.parts / seconds:8.1f} {ratio:>8}")


if __name__ == "__main__":
    main()
