"""CadQuery scripts in the sandbox: the OCCT kernel agrees with manifold3d, and failures come back as statuses."""

from __future__ import annotations

import json
import random

import pytest

from rlvr_factory.cad.csg import parse, to_source
from rlvr_factory.cad.scripts import (
    DEFAULT_LIMITS, ScriptFailed, cadquery_available, cadquery_expression, run_script, to_cadquery,
)
from rlvr_factory.cad.solid import SolidLimits, agreement, build, check, from_mesh
from rlvr_factory.domains.cad_tasks import FAMILIES
from rlvr_factory.sandbox import Limits, Sandbox
from rlvr_factory.verifiers.cad import Built, CadVerifier
from tests.sandbox.procs import needs_bwrap

needs_cadquery = pytest.mark.skipif(not cadquery_available(),
                                    reason="CadQuery is not installed (the cad extra: pip install -e '.[cad]')")
pytestmark = [needs_bwrap, needs_cadquery]
LIMITS = Limits.of(DEFAULT_LIMITS)


def test_to_cadquery_writes_each_operation_as_cadquery_does():
    script = to_cadquery(parse("difference(){cube([4,3,2],center=true);rotate([90,0,30])translate([1,0,0])"
                               "cylinder(h=2,r=1);}"))
    assert script.startswith("import cadquery as cq\n")
    assert ('result = cq.Workplane("XY").box(4, 3, 2, centered=True).cut(cq.Workplane("XY").cylinder(2, 1, '
            'centered=(True, True, False)).translate((1, 0, 0)).rotate((0, 0, 0), (1, 0, 0), 90)'
            '.rotate((0, 0, 0), (0, 0, 1), 30))') in script


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox("bubblewrap", LIMITS, workspace_mb=16) as box:
        yield box


def test_every_family_built_by_occt_in_the_sandbox_matches_its_manifold3d_target(sandbox):
    """One part per family: the CadQuery translation, run and tessellated in the sandbox, against the CSG target
    (built with 128 segments, as the verifier does when it accepts CadQuery scripts): the IoU and every feature."""
    rng = random.Random(0)
    trees = [family(rng).tree for level in sorted(FAMILIES) for family in FAMILIES[level]]
    script = "import cadquery as cq\nresult = cq.Workplane()\n" + "".join(  # one run: CadQuery imports once
        f"result = result.add({cadquery_expression(tree)}.translate(({300 * i}, 0, 0)))\n" for i, tree in enumerate(trees))
    mesh = run_script(sandbox, script, LIMITS)
    assert mesh.valid and mesh.solids == len(trees)
    built = from_mesh(mesh.vertices, mesh.triangles, SolidLimits(max_extent_mm=10_000))
    pieces = sorted(built.decompose(), key=lambda p: p.bounding_box()[0])
    assert len(pieces) == len(trees)
    verifier = CadVerifier(forms=["csg", "cadquery"])
    for i, (tree, piece) in enumerate(zip(trees, pieces)):
        assert agreement(piece, build(tree, segments=128).translate((300 * i, 0, 0))).iou > 0.99, tree
        gold = json.dumps({"program": to_source(tree)})  # and OCCT's tessellation misses no feature of the target
        assert verifier.missing_feature(Built(piece.translate((-300 * i, 0, 0)), None), verifier.target(gold),
                                        gold) is None, tree


@pytest.mark.parametrize("script,status,fragment", [
    ("result = 1", "script_error", "must be a cadquery Workplane or Shape, got int"),
    ("x = 1", "script_error", "must assign its part to `result`"),
    ("raise ValueError('bad fillet')", "script_error", "ValueError: bad fillet"),
    ("x = bytearray(10**11)", "memory", "MemoryError"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "kernel_crash", "SIGSEGV"),
    ("while True:\n    pass", "timeout", "ran past its limits"),
])
def test_a_failing_script_comes_back_as_a_status(sandbox, script, status, fragment):
    # Each run imports CadQuery afresh (a pristine process): a loaded machine needs a minute for
    # that; only the script that must run past its limit gets the short one.
    limit = 12 if status == "timeout" else 60
    limits = Limits.of(LIMITS, timeout_s=float(limit), cpu_s=limit)
    with pytest.raises(ScriptFailed) as caught:
        run_script(sandbox, script, limits)
    assert caught.value.status == status and fragment in caught.value.reason


def test_show_object_is_accepted_and_the_sandbox_serves_on_after_failures(sandbox):
    mesh = run_script(sandbox, "import cadquery as cq\nshow_object(cq.Workplane().box(2, 3, 4, centered=False))", LIMITS)
    assert check(from_mesh(mesh.vertices, mesh.triangles, SolidLimits()), SolidLimits()).volume == pytest.approx(24)
