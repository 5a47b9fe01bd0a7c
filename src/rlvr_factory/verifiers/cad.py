"""The CAD reward: build the completion's part with a real kernel, gate it, then score its volume IoU.

A completion states a program in one of two forms: the CSG language (`cad.csg`, built with
manifold3d in this process, bounded by the parser's limits) or a CadQuery script (run in the
project's sandbox, `cad.scripts`, tessellated there and admitted here as an untrusted mesh).
The program may stand alone or sit in a fenced block (the last block counts).

The reward is gated: only a part that builds into a valid, closed, oriented solid with a
positive volume, a bounded size and mesh, and no more disconnected pieces than the target
earns anything. Then the reward is the exact volume IoU with the target (boolean intersection
over union), optionally refined by bounding-box and surface-distance agreement:

    reward = IoU * ((1 - bbox_weight - surface_weight) + bbox_weight * bbox_IoU + surface_weight * surface)

so it never exceeds the IoU: no term pays for a part that does not occupy the target's volume.
`correct` needs IoU >= `correct_iou` and the target's small features too, which the IoU hardly
sees (a 2 mm hole is 0.3% of an 80 x 60 mm plate): the part must have the target's genus
(through-holes), and must match every feature of the target within `feature_tolerance` of the
feature's own volume, compared in the feature's neighbourhood (`cad.features`); the reason says
which feature is missing. Every verdict carries `cad_status` (`built`, or what went
wrong: `no_program`, `parse_error`, `build_error`, `form_not_allowed`, `script_error`,
`empty`, `degenerate`, `not_manifold`, `inverted`, `self_intersecting`, `non_finite`,
`too_large`, `too_complex`, `extra_pieces`, `timeout`, `memory`, `kernel_crash`) and a
`reason` in its breakdown. A script over its time limit scores with status `timeout`, a crashed
kernel with status `error` (that sample only); a sandbox that cannot start raises `InfraError`.
"""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping

from rlvr_factory.cad import csg
from rlvr_factory.cad.features import (
    Difference, Feature, difference, errors, features, fine_triangles, thickest,
)
from rlvr_factory.cad.scripts import DEFAULT_LIMITS, ScriptFailed, require_cadquery, run_script
from rlvr_factory.cad.solid import (
    InvalidSolid, Manifold, Measures, SolidLimits, agreement, build, check, from_mesh, surface_agreement,
)
from rlvr_factory.sandbox import Limits, Sandbox, SandboxError, SandboxStartError
from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers.isolation import OWN
from rlvr_factory.verifiers.score import Score

logger = logging.getLogger(__name__)

FORMS = ("csg", "cadquery")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CADQUERY_TAGS = {"python", "py", "python3", "cadquery"}
_CADQUERY_SIGNS = re.compile(r"\bimport\s+cadquery\b|\bcq\.\w+")
_SCORE_STATUS = {"timeout": "timeout", "kernel_crash": "error"}  # every other cad_status is a judged answer


def extract_program(completion: str) -> tuple[str, str] | None:
    """(form, source) of the program a completion states: its last fenced block, else the whole text; None if empty."""
    blocks = _FENCE.findall(completion)
    tag, source = blocks[-1] if blocks else ("", completion)
    source = source.strip()
    if not source:
        return None
    cadquery = tag.lower() in _CADQUERY_TAGS or bool(_CADQUERY_SIGNS.search(source))
    return ("cadquery" if cadquery else "csg"), source


@dataclass(frozen=True)
class Assessment:
    """A verdict with what it was measured on (for the multi-turn report and the pictures)."""

    score: Score
    target: Manifold
    target_measures: Measures
    solid: Manifold | None = None  # the built part, when it passed the gate
    measures: Measures | None = None
    missing: str | None = None  # what of the target's small features a part whose IoU passes gets wrong


@dataclass(frozen=True)
class Target:
    """A gold's target: its tree, the solid at the reward's resolution and that solid's measures."""

    tree: csg.Node
    solid: Manifold
    measures: Measures


@dataclass(frozen=True)
class Built:
    """A candidate that built: its solid, and its CSG tree (None for a script's mesh, which cannot be rebuilt)."""

    solid: Manifold
    tree: csg.Node | None


class _Rejected(Exception):
    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class CadVerifier:
    """Reward for CAD programs: gated on a valid solid, then volume IoU with the target (see the module docstring).

    The gold string is the task's reference as JSON: `{"program": <CSG source of the target>}`.
    Targets are built once per process and cached.
    """

    isolation = OWN  # CSG is parsed by the project's own bounded parser; CadQuery scripts run in its sandbox

    def __init__(
        self,
        forms: tuple[str, ...] | list[str] = ("csg",),
        segments: int | None = None,
        correct_iou: float = 0.99,
        feature_tolerance: float = 0.05,
        max_deviation_mm: float = 0.25,
        feature_segments: int = 192,
        max_features: int = 32,
        bbox_weight: float = 0.0,
        surface_weight: float = 0.0,
        surface_tolerance: float = 0.02,
        csg_limits: Mapping[str, Any] | None = None,
        solid_limits: Mapping[str, Any] | None = None,
        backend: str = "bubblewrap",
        limits: Mapping[str, Any] | None = None,
        workspace_mb: int = 16,
        tessellation_tolerance: float = 0.01,
        backend_options: Mapping[str, Any] | None = None,
    ) -> None:
        unknown = set(forms) - set(FORMS)
        if unknown or not forms:
            raise ValueError(f"forms must be a non-empty subset of {FORMS}, got {list(forms)}")
        if not (0 <= bbox_weight and 0 <= surface_weight and bbox_weight + surface_weight < 1):
            raise ValueError("bbox_weight and surface_weight must be >= 0 and sum to less than 1 "
                             f"(they refine the IoU, never replace it); got {bbox_weight}, {surface_weight}")
        csg.require_positive({"correct_iou": correct_iou, "feature_tolerance": feature_tolerance,
                              "max_deviation_mm": max_deviation_mm, "surface_tolerance": surface_tolerance,
                              "tessellation_tolerance": tessellation_tolerance},
                             {"feature_segments": feature_segments, "max_features": max_features,
                              "segments": 48 if segments is None else segments, "workspace_mb": workspace_mb})
        if correct_iou > 1:
            raise ValueError(f"correct_iou is an IoU: at most 1, got {correct_iou!r}")
        if "cadquery" in forms:
            require_cadquery()
        self.forms = tuple(forms)  # program forms accepted: csg (manifold3d) and/or cadquery (OCCT, in the sandbox)
        # facets around curved CSG surfaces, targets and candidates alike; by default 48, or 128 when CadQuery
        # scripts are accepted (OCCT tessellates them near the true circle: a 48-gon target would cost them IoU)
        self.segments = segments or (128 if "cadquery" in forms else 48)
        self.correct_iou = correct_iou  # IoU at or above which a part counts as correct (its features must match too)
        self.feature_tolerance = feature_tolerance  # largest error on a feature, as a fraction of its own volume
        self.max_deviation_mm = max_deviation_mm  # thickest piece on which a correct part may differ from the target
        self.feature_segments = feature_segments  # facets around curved surfaces when features are compared
        self.max_features = max_features  # primitives a target may have (feature checks build each one left out)
        self.bbox_weight = bbox_weight  # share of the IoU that depends on bounding-box agreement
        self.surface_weight = surface_weight  # share that depends on surface-distance agreement
        self.surface_tolerance = surface_tolerance  # Chamfer distance scale, as a fraction of the target's diagonal
        self.csg_limits = csg.CsgLimits(**(csg_limits or {}))
        self.solid_limits = SolidLimits(**(solid_limits or {}))
        self.backend = backend  # the sandbox CadQuery scripts run in: bubblewrap | docker | process (not isolation)
        self.limits = Limits.of({**DEFAULT_LIMITS, **(limits or {})})
        self.workspace_mb = workspace_mb
        self.tessellation_tolerance = tessellation_tolerance  # mm, for OCCT's tessellation of script results
        self.backend_options = dict(backend_options or {})
        self._sandbox: Sandbox | None = None
        self._targets: dict[str, Target] = {}
        self._features: dict[str, tuple[Manifold, tuple[Feature, ...]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sandbox": None, "_targets": {}, "_features": {}}  # per-process state stays behind

    def close(self) -> None:
        """Stop this process's sandbox, if one was started."""
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    # -- the Verifier protocol --------------------------------------------------------------------

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """The verdict of a completion with no program or a CSG program that does not parse; None when it must be built."""
        try:
            program = extract_program(completion)
            if program is None:
                return self._failure("no_program", "the completion states no program")
            form, source = program
            if form not in self.forms:
                return self._failure("form_not_allowed", f"this run accepts {' and '.join(self.forms)} programs, "
                                                         f"not {form}", form)
            if form == "csg":
                csg.parse(source, self.csg_limits)
        except csg.CsgError as e:
            return self._failure("parse_error", str(e), "csg")
        return None

    def score(self, completion: str, gold: str) -> Score:
        """Build the completion's part and score it against the target (see the module docstring)."""
        return self.assess(completion, gold).score

    # -- the full check ---------------------------------------------------------------------------

    def target(self, gold: str) -> Target:
        """The target of a gold string: its tree, solid and measures (built once per process)."""
        if gold not in self._targets:
            reference = json.loads(gold)
            if not isinstance(reference, dict) or not isinstance(reference.get("program"), str):
                raise ValueError("a cad gold must be a JSON object with the target's CSG source under 'program'")
            tree = csg.parse(reference["program"], self.csg_limits)
            solid = build(tree, self.segments)
            self._targets[gold] = Target(tree, solid, check(solid, self.solid_limits))
        return self._targets[gold]

    def target_features(self, gold: str) -> tuple[Manifold, tuple[Feature, ...]]:
        """The target built at `feature_segments`, and its features (found at the reward's resolution, which is
        enough for their regions and volumes); computed once per process, when first needed."""
        if gold not in self._features:
            target = self.target(gold)
            found = features(target.tree, target.solid, self.segments, self.max_features)
            self._features[gold] = build(target.tree, self.feature_segments), found
        return self._features[gold]

    def assess(self, completion: str, gold: str) -> Assessment:
        """The verdict together with the target and the built part (when it built)."""
        target = self.target(gold)
        quick = self.quick_score(completion, gold)
        if quick is not None:
            return Assessment(quick, target.solid, target.measures)
        form, source = extract_program(completion)  # type: ignore[misc]  # quick_score found one
        try:
            built = self._build(form, source)
            measures = check(built.solid, self.solid_limits)
            if measures.components > target.measures.components:
                raise _Rejected("extra_pieces", f"the part has {measures.components} disconnected pieces; the target "
                                                f"has {target.measures.components}")
        except (InvalidSolid, _Rejected) as e:
            return Assessment(self._failure(e.status, e.reason, form), target.solid, target.measures)
        score, missing = self._scored(built, measures, target, gold, form)
        return Assessment(score, target.solid, target.measures, built.solid, measures, missing)

    def _build(self, form: str, source: str) -> Built:
        if form == "csg":
            tree = csg.parse(source, self.csg_limits)
            try:
                return Built(build(tree, self.segments), tree)
            except (RuntimeError, ValueError) as e:  # the kernel refused an operation
                raise _Rejected("build_error", f"the kernel could not build the part: {e}") from e
        mesh = self._run_script(source)
        if mesh.solids == 0:
            raise _Rejected("degenerate", "the script's result holds no solid (a sketch, wire or face only?)")
        return Built(from_mesh(mesh.vertices, mesh.triangles, self.solid_limits), None)

    def _run_script(self, source: str):
        for attempt in range(2):  # a sandbox lost mid-run is retried once in a fresh one
            try:
                return run_script(self.sandbox(), source, self.limits, self.tessellation_tolerance)
            except ScriptFailed as e:
                raise _Rejected(e.status, e.reason) from e
            except SandboxStartError as e:
                self.close()
                raise InfraError(f"no sandbox for the CadQuery script: {e}") from e
            except SandboxError as e:
                logger.warning("the sandbox was lost during a CadQuery script (attempt %d): %s", attempt + 1, e)
                self.close()
        raise _Rejected("kernel_crash", "the script took its sandbox down twice")

    def sandbox(self) -> Sandbox:
        """This process's sandbox for CadQuery scripts (started on first use)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(self.backend, self.limits, self.workspace_mb, **self.backend_options)
        return self._sandbox

    # -- verdicts ---------------------------------------------------------------------------------

    def _failure(self, cad_status: str, reason: str, form: str = "") -> Score:
        breakdown = {"builds": 0.0, "iou": 0.0, "bbox_iou": 0.0, "volume": 0.0, "components": 0.0,
                     "cad_status": cad_status, "reason": reason, "form": form}
        return Score(reward=0.0, correct=False, status=_SCORE_STATUS.get(cad_status, "ok"), breakdown=breakdown)

    def _scored(self, built: Built, measures: Measures, target: Target, gold: str, form: str
                ) -> tuple[Score, str | None]:
        match = agreement(built.solid, target.solid)
        surface = surface_agreement(built.solid, target.solid, self.surface_tolerance) if self.surface_weight else 0.0
        refine = 1 - self.bbox_weight - self.surface_weight + self.bbox_weight * match.bbox_iou
        reward = match.iou * (refine + self.surface_weight * surface)
        missing = self.missing_feature(built, target, gold) if match.iou >= self.correct_iou else None
        reason = f"built a valid solid; volume IoU {match.iou:.3f} with the target"
        breakdown = {"builds": 1.0, "iou": match.iou, "bbox_iou": match.bbox_iou, "volume": measures.volume,
                     "components": float(measures.components), "cad_status": "built",
                     "reason": reason if missing is None else f"{reason}, but {missing}", "form": form}
        if self.surface_weight:
            breakdown["surface"] = surface
        return Score(reward=reward, correct=match.iou >= self.correct_iou and missing is None,
                     breakdown=breakdown), missing

    def missing_feature(self, built: Built, target: Target, gold: str) -> str | None:
        """What of the target's small features the part gets wrong: its through-holes (genus), a feature of the
        target it does not match, or a thick piece the target does not have or lacks; None when nothing."""
        if built.tree == target.tree:  # the target's own program, however spaced: the same solid at any resolution
            return None
        if built.solid.genus() != target.solid.genus():
            return (f"its genus (through-holes) is {built.solid.genus()} where the target's is "
                    f"{target.solid.genus()}: a hole is missing, blind, or extra")
        coarse = difference(built.solid, target.solid)
        if coarse.extra.is_empty() and coarse.missing.is_empty():
            return None  # the target's solid, built another way
        fine_target, target_features = self.target_features(gold)
        if self._mismatch(coarse, target_features) is None:
            return None  # tessellation noise only adds to a difference: what passes as built is right
        return self._mismatch(difference(self._fine(built), fine_target), target_features)

    def _mismatch(self, diff: Difference, target_features: tuple[Feature, ...]) -> str | None:
        return self._unmatched(diff, target_features) or self._thick(diff)

    def _unmatched(self, diff: Difference, target_features: tuple[Feature, ...]) -> str | None:
        error, feature = max(zip(errors(diff, target_features), target_features), key=lambda pair: pair[0],
                             default=(0.0, None))
        if feature is None or error <= self.feature_tolerance:
            return None
        return (f"the target's feature {feature.source} ({feature.volume:.3g} mm^3 of it) is not matched: the "
                f"part differs from the target by {error:.0%} of that volume around it")

    def _thick(self, diff: Difference) -> str | None:
        piece = thickest(diff)
        if piece is None or piece.thickness <= self.max_deviation_mm:
            return None
        box = ", ".join(f"{'xyz'[i]} {piece.bbox[i]:.1f}..{piece.bbox[i + 3]:.1f}" for i in range(3))
        return (f"it differs from the target by a piece {piece.thickness:.2f} mm thick ({piece.volume:.3g} mm^3 at "
                f"{box}) that the target does not have or lacks: a feature is extra, missing or misplaced")

    def _fine(self, built: Built) -> Manifold:
        """The candidate at `feature_segments`, when it is a CSG tree whose fine build stays within the triangle
        limit; else as it was built."""
        if built.tree is None or fine_triangles(built.tree, self.feature_segments) > self.solid_limits.max_triangles:
            return built.solid
        return build(built.tree, self.feature_segments)

