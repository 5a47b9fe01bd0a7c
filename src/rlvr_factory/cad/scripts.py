"""CadQuery scripts: run in the project's sandbox, tessellated by OCCT there, brought back as a mesh.

A script builds its part with CadQuery and assigns it to `result` (or passes it to
`show_object`, as CQ-editor scripts do). It runs in a `rlvr_factory.sandbox.Sandbox` (bubblewrap
by default) under its limits, with CadQuery imported by a small harness in the same process; the
harness checks the shape with OCCT (`isValid`) and tessellates it. Only plain bytes come back,
and since the script shares the harness's process, nothing it returns is trusted: the mesh is
admitted by `cad.solid.from_mesh` like any foreign mesh.

`to_cadquery` writes a CSG tree as a CadQuery script, so every CSG task also has a CadQuery
reference program (and the two kernels can be checked against each other).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlvr_factory.cad.csg import Combine, Cube, Cylinder, Node, Rotate, Sphere, Translate, format_number
from rlvr_factory.sandbox import CandidateError, Limits, ProgramEnded, Sandbox, SandboxError, SandboxStartError

# CadQuery imports OCCT and VTK: ~2 GB of address space and a few seconds before the script starts.
DEFAULT_LIMITS = {"timeout_s": 30.0, "cpu_s": 30, "memory_mb": 3072, "nproc": 32, "file_size_mb": 16,
                  "open_files": 256, "output_bytes": 65536}
_SIGNALS_OF_A_CRASH = {-4: "SIGILL", -6: "SIGABRT", -7: "SIGBUS", -8: "SIGFPE", -11: "SIGSEGV"}

HARNESS = '''
import array
import math

import cadquery as cq

_shown = []


def show_object(obj, *args, **kwargs):
    _shown.append(obj)


def build(script, tolerance, angular_tolerance):
    namespace = {"cq": cq, "cadquery": cq, "math": math, "show_object": show_object, "__name__": "__cadquery__"}
    exec(compile(script, "<script>", "exec"), namespace)
    result = namespace.get("result", _shown[-1] if _shown else None)
    if result is None:
        raise NameError("the script must assign its part to `result` (or call show_object(part))")
    if isinstance(result, cq.Workplane):
        shapes = [v for v in result.vals() if isinstance(v, cq.Shape)]
        if not shapes:
            raise TypeError("`result` is a Workplane with no shape on its stack")
        shape = shapes[0] if len(shapes) == 1 else cq.Compound.makeCompound(shapes)
    elif isinstance(result, cq.Shape):
        shape = result
    else:
        raise TypeError(f"`result` must be a cadquery Workplane or Shape, got {type(result).__name__}")
    vertices, triangles = shape.tessellate(tolerance, angular_tolerance)
    flat = array.array("d", [c for v in vertices for c in v.toTuple()])
    indices = array.array("q", [i for t in triangles for i in t])
    return {"valid": bool(shape.isValid()), "solids": len(shape.Solids()),
            "vertices": flat.tobytes(), "triangles": indices.tobytes()}
'''


@dataclass(frozen=True)
class ScriptMesh:
    """What a script built, as reported from the sandbox (untrusted)."""

    vertices: np.ndarray  # (n, 3) float64
    triangles: np.ndarray  # (m, 3) int64
    valid: bool  # OCCT's BRepCheck verdict, as the harness reported it
    solids: int


class ScriptFailed(Exception):
    """The script did not produce a mesh: `status` is `script_error`, `timeout`, `memory` or `kernel_crash`."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


def cadquery_available() -> bool:
    """Whether CadQuery is installed (the `.[cad]` extra)."""
    return importlib.util.find_spec("cadquery") is not None


def require_cadquery() -> None:
    """Raise a clear error when CadQuery scripts are asked for but CadQuery is not installed."""
    if not cadquery_available():
        raise ImportError("CadQuery scripts need the cad extra: pip install -e '.[cad]' (cadquery and its OCCT kernel)")


def run_script(sandbox: Sandbox, script: str, limits: Limits, tolerance: float = 0.01,
               angular_tolerance: float = 0.1) -> ScriptMesh:
    """Run a CadQuery script in the sandbox and return its tessellated part.

    `ScriptFailed` when the script raised, ran past its limits or crashed the kernel;
    `SandboxStartError` when the sandbox (or CadQuery inside it) could not start, and
    `SandboxError` when the sandbox was lost: infrastructure failures, not the script's.
    """
    with sandbox.load(HARNESS, limits) as program:
        if program.load_error is not None:
            raise SandboxStartError(f"the CadQuery harness did not load in the sandbox: {': '.join(program.load_error)}"
                                    " (is the cad extra installed, and memory_mb at least 2048?)")
        try:
            reply = program.call("build", script, tolerance, angular_tolerance)
        except CandidateError as e:
            status = "memory" if e.kind == "MemoryError" else "script_error"
            raise ScriptFailed(status, f"the script raised {e.kind}: {e.message}"[:500]) from None
        except ProgramEnded as e:
            raise _ended(e) from None
    return _mesh(reply)


def _ended(e: ProgramEnded) -> ScriptFailed:
    code = e.result.exit_code
    if e.result.timed_out or code in (-9, -24):  # the deadline, or the CPU limit (SIGKILL / SIGXCPU)
        return ScriptFailed("timeout", f"the script ran past its limits ({e})")
    if code in _SIGNALS_OF_A_CRASH:
        return ScriptFailed("kernel_crash", f"the geometry kernel crashed ({_SIGNALS_OF_A_CRASH[code]})")
    return ScriptFailed("script_error", f"the script ended the process ({e})")


def _mesh(reply: Any) -> ScriptMesh:
    if type(reply) is not dict or not {"valid", "solids", "vertices", "triangles"} <= reply.keys():
        raise ScriptFailed("script_error", "the sandbox returned something that is not a mesh")
    vertices, triangles = reply["vertices"], reply["triangles"]
    if type(vertices) is not bytes or type(triangles) is not bytes or len(vertices) % 24 or len(triangles) % 24:
        raise ScriptFailed("script_error", "the sandbox returned a malformed mesh")
    return ScriptMesh(np.frombuffer(vertices, dtype=np.float64).reshape(-1, 3),
                      np.frombuffer(triangles, dtype=np.int64).reshape(-1, 3),
                      reply["valid"] is True, reply["solids"] if type(reply["solids"]) is int else 0)


def to_cadquery(node: Node) -> str:
    """A CadQuery script that builds the same part as a CSG tree (its result in `result`)."""
    return f"import cadquery as cq\n\nresult = {cadquery_expression(node)}\n"


def cadquery_expression(node: Node) -> str:
    """The CadQuery expression (a Workplane) that builds a CSG tree."""
    n = format_number
    if isinstance(node, Cube):
        x, y, z = (n(v) for v in node.size)
        return f'cq.Workplane("XY").box({x}, {y}, {z}, centered={node.center})'
    if isinstance(node, Cylinder):
        return f'cq.Workplane("XY").cylinder({n(node.h)}, {n(node.r)}, centered=(True, True, {node.center}))'
    if isinstance(node, Sphere):
        return f'cq.Workplane("XY").sphere({n(node.r)})'
    if isinstance(node, Translate):
        return f"{cadquery_expression(node.child)}.translate(({', '.join(n(v) for v in node.offset)}))"
    if isinstance(node, Rotate):
        axes = ("(1, 0, 0)", "(0, 1, 0)", "(0, 0, 1)")
        return cadquery_expression(node.child) + "".join(
            f".rotate((0, 0, 0), {axis}, {n(angle)})" for axis, angle in zip(axes, node.angles) if angle)
    method = {"union": "union", "difference": "cut", "intersection": "intersect"}[node.op]
    first, *rest = (cadquery_expression(c) for c in node.children)
    return first + "".join(f".{method}({other})" for other in rest)


__all__ = ["DEFAULT_LIMITS", "HARNESS", "ScriptFailed", "ScriptMesh", "SandboxError", "cadquery_available",
           "cadquery_expression", "require_cadquery", "run_script", "to_cadquery"]
