"""The CAD domain: the model writes a part as a program, a geometry kernel builds it, geometry decides the reward.

Tasks are mechanical parts described in words (`domains/cad_tasks.py`: blocks, plates with
holes, tubes, bosses, pockets, brackets, shafts, hole patterns, flanges; levels 1-4); the
reference is the exact target as a CSG program. Completions are CSG programs (`cad/csg.py`,
built with manifold3d) or, with `form: cadquery`, CadQuery scripts run in the sandbox; the
reward is `verifiers.cad.CadVerifier` (gated on a valid solid, then volume IoU).

`environment()` gives the multi-turn environment: after an attempt that is not yet right, it
answers with a measured report of the built part (or why it did not build) and the model may
correct its program, up to `max_turns` attempts.
"""

from __future__ import annotations

import json
import random
import re
import textwrap
from typing import Any, Mapping, Sequence

from matplotlib.figure import Figure

from rlvr_factory.cad.csg import Node, parse, to_source
from rlvr_factory.cad.scripts import to_cadquery
from rlvr_factory.cad.solid import Measures
from rlvr_factory.cad.views import differing_views, figure
from rlvr_factory.domains.base import AnswerForm, Domain, Step, Task, draw_split_tasks, member
from rlvr_factory.domains.cad_tasks import LEVELS, Part, draw_part
from rlvr_factory.verifiers.cad import Assessment, CadVerifier
from rlvr_factory.verifiers.score import Score

INSTRUCTIONS = {
    "csg": ("Write the part in the CSG language (an OpenSCAD subset, sizes in mm): cube([x,y,z]) from the origin "
            "(center=true centres it), cylinder(h=,r=) standing on the origin, sphere(r=) centred; translate([x,y,z]) "
            "and rotate([ax,ay,az]) apply to the statement after them; union(){...}, difference(){first; minus the "
            "rest;} and intersection(){...} combine blocks. Answer with the program only."),
    "cadquery": ("Write a CadQuery script (import cadquery as cq) that builds the part, sizes in mm, and assigns it "
                 "to `result`. Answer with the script in a ```python block."),
}
CORPORA = ("programs", "described")
_CURVED_CALL = re.compile(r"((?:cylinder|sphere)\([^)]*)\)")
_FN_VALUES = (32, 48, 64, 100)  # the resolutions OpenSCAD code commonly pins
ASK_FOR_CORRECTION = "Correct the program and answer with the whole corrected program."
FAR_OFF_MM = 1000  # where the reward audit puts a second part beside the reference (parts here span under 200 mm)


class CadDomain:
    """Described mechanical parts; the reward builds the completion's part and compares its volume with the target."""

    name = "cad"
    report_breakdown = ("builds", "iou")  # breakdown entries evaluation averages over greedy completions
    # the reward audit fails an attack on this domain only when it is judged correct
    shaped_reward = "the reward is the volume IoU with the target: a part that overlaps it earns that share by design"
    verifier_class = CadVerifier  # the reward, built from the block's `verifier` options (`rlvr verify` too)

    def __init__(
        self,
        splits: Mapping[str, int] | None = None,
        levels: Sequence[int] = LEVELS,
        seed: int = 0,
        form: str = "csg",
        instructions: bool = False,
        corpus: str = "programs",
        fn_fraction: float = 0.0,  # share of corpus and SFT programs with $fn= pinned, which the language refuses (mixed-quality data)
        max_turns: int = 3,
        verifier: Mapping[str, Any] | None = None,  # CadVerifier's settings (verifiers/cad.py)
    ) -> None:
        self.splits = dict(splits or {"train": 2000, "validation": 100, "test": 100})  # tasks per split
        self.levels = tuple(int(level) for level in levels)  # difficulty levels drawn, in equal shares
        if not self.levels or set(self.levels) - set(LEVELS):
            raise ValueError(f"levels must be a non-empty subset of {list(LEVELS)}, got {list(levels)}")
        self.seed = seed  # task generation seed
        self.form = form  # what the prompts ask for and demonstrations show: csg | cadquery
        self.instructions = instructions  # prefix every prompt with a summary of the program form (for real models)
        if corpus not in CORPORA:
            raise ValueError(f"corpus must be one of {CORPORA}, got {corpus!r}")
        self.corpus = corpus  # what the embedded base model reads: programs alone | each after its part's description
        if not 0.0 <= fn_fraction <= 1.0 or (fn_fraction and form != "csg"):
            raise ValueError(f"fn_fraction must lie in [0, 1] (and be 0 unless form is csg), got {fn_fraction}")
        # share of corpus and demonstration programs written as much OpenSCAD code is, with the resolution pinned
        # on curved primitives ($fn=...), which the language refuses: data of mixed quality, as scraped code is
        self.fn_fraction = fn_fraction
        if isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be at least 1 (a whole number), got {max_turns!r}")
        self.max_turns = max_turns  # attempts per episode in the multi-turn environment
        settings = dict(verifier or {})
        settings.setdefault("forms", [form])
        self.verifier = self.verifier_class(**settings)
        if form not in self.verifier.forms:
            raise ValueError(f"form {form!r} must be one of the verifier's forms {list(self.verifier.forms)}")

    def prompt(self, part: Part) -> str:
        """The task's prompt: the part's description, with the form's instructions when `instructions`."""
        return f"{part.description}\n{INSTRUCTIONS[self.form]}" if self.instructions else part.description

    def _draw(self, rng: random.Random, level: int) -> tuple[str, dict[str, Any]]:
        part = draw_part(rng, level)
        return self.prompt(part), {"program": to_source(part.tree), "family": part.family}

    def generate_tasks(self) -> list[Task]:
        """Each split's parts, levels in equal shares; no prompt appears twice (held-out parts are new parts)."""
        return draw_split_tasks(self.name, self.splits, self.levels, self.seed, self._draw)

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The target the verifier builds: the reference's CSG program, as JSON."""
        return json.dumps({"program": reference["program"]})

    def program(self, tree: Node, rng: random.Random) -> str:
        """A part's program in the domain's form: CSG source (with `$fn=` pinned on its curved primitives for a
        seeded `fn_fraction` of programs), or a CadQuery script in a fenced block."""
        if self.form == "cadquery":
            return f"```python\n{to_cadquery(tree)}```"
        source = to_source(tree)
        if rng.random() < self.fn_fraction:
            source = _CURVED_CALL.sub(lambda m: f"{m.group(1)},$fn={rng.choice(_FN_VALUES)})", source)
        return source

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The reference program in the domain's form, drawn for `fn_fraction` from the scraped-code dialect (seeded
        by the task); a program has no separate worked form, so `worked` changes nothing."""
        return self.program(parse(task.reference["program"]), random.Random(f"{self.seed}:{task.task_id}"))

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """Verify one completion in this process (the pipeline verifies through a worker pool)."""
        return self.verifier.score(completion, self.gold(reference))

    def answer_form(self, task: Task) -> AnswerForm:
        """How the reward audit states an answer: the program itself; the reference program is the slot's text
        (so its prefixes, a part with features left out, are attacks), for CSG. Another part stated beside the
        reference is moved far off: one inside the reference's part would make their union the reference's part."""
        return AnswerForm({"program": task.reference["program"] if self.form == "csg" else None},
                          lambda texts: texts["program"], apart=_far_off)

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Programs of freshly drawn parts (`corpus: programs`, like code a model reads on the web), or each after
        a comment describing its part (`corpus: described`, documented code); no part whose prompt is in `exclude`."""
        rng = random.Random(seed)
        documents: list[str] = []
        while len(documents) < size:
            part = draw_part(rng, self.levels[len(documents) % len(self.levels)])
            if self.prompt(part) not in exclude:
                program = self.program(part.tree, rng)
                documents.append(program if self.corpus == "programs" else f"// {part.description}\n{program}")
        return documents

    def environment(self) -> CadEnvironment:
        """A fresh multi-turn environment of this domain."""
        return CadEnvironment(self)


def _far_off(program: str) -> str:
    """A CSG program's part moved far from the origin, so that beside another part it is a second solid."""
    return f"translate([{FAR_OFF_MM}, 0, 0]) {{ {program} }}"


def describe_attempt(assessment: Assessment, views: dict[str, float] | None = None) -> str:
    """The measured report of an attempt: what was built (volume, bounding box, IoU), the small feature it gets
    wrong when its IoU alone would pass, and which views differ; or why nothing was built."""
    breakdown = assessment.score.breakdown
    if assessment.measures is None:
        return f"Your program did not build a valid part ({breakdown['cad_status']}): {breakdown['reason']}"
    m: Measures = assessment.measures
    box = m.bbox
    lines = [
        f"Your part built: volume {m.volume:.0f} mm^3, bounding box x {box[0]:.1f}..{box[3]:.1f}, "
        f"y {box[1]:.1f}..{box[4]:.1f}, z {box[2]:.1f}..{box[5]:.1f} mm, {m.components} piece(s).",
        f"Volume IoU with the requested part: {breakdown['iou']:.3f}.",
    ]
    if assessment.missing is not None:
        lines.append(f"It is not yet the requested part: {assessment.missing}.")
    if views:
        shown = ", ".join(f"{view} ({100 * fraction:.0f}% of pixels)" for view, fraction in views.items())
        lines.append(f"Views that differ from the requested part: {shown}.")
    elif views is not None:
        lines.append("The top, front and side views match the requested part.")
    return "\n".join(lines)


class CadEnvironment:
    """Multi-turn CAD: an attempt is built and scored; until it is right (or `max_turns` attempts are spent),
    the observation is a measured report of the built part and the model answers with a corrected program."""

    def __init__(self, domain: CadDomain) -> None:
        self.domain = domain
        self.task: Task | None = None
        self.turn = 0

    def reset(self, task: Task) -> str:
        """The task's prompt; a new episode."""
        self.task, self.turn = task, 0
        return task.prompt

    def step(self, action: str) -> Step:
        """Build and score the attempt; done when it is correct or the last attempt was made, else the report."""
        if self.task is None:
            raise RuntimeError("step() before reset(): call reset(task) to start an episode")
        self.turn += 1
        assessment = self.domain.verifier.assess(action, self.domain.gold(self.task.reference))
        done = assessment.score.correct or self.turn >= self.domain.max_turns
        if done:
            self.task = None
            return Step(observation="", score=assessment.score, done=True)
        views = differing_views(assessment.solid, assessment.target) if assessment.solid is not None else None
        left = self.domain.max_turns - self.turn
        report = describe_attempt(assessment, views)
        return Step(observation=f"{report}\n{ASK_FOR_CORRECTION} ({left} attempt{'s' if left > 1 else ''} left)",
                    score=assessment.score, done=False)


def part_view_figures(domain: Domain, rollouts: Sequence[Mapping[str, Any]], tasks: Mapping[str, Task],
                      per_round: int) -> dict[str, Figure]:
    """For the first and the last round among `rollouts` (rows with round, task_id, completion), up to
    `per_round` CAD rollouts each: the target and the built part in three views, one picture per rollout,
    named `round_NNN_<task>_<k>.png`. Rollouts of other domains are skipped; none at all gives no pictures."""
    cad = [r for r in rollouts if isinstance(member(domain, tasks[r["task_id"]].domain), CadDomain)]
    rounds = sorted({int(r["round"]) for r in cad})
    figures: dict[str, Figure] = {}
    for round_index in dict.fromkeys(rounds[:1] + rounds[-1:]):
        for k, row in enumerate([r for r in cad if int(r["round"]) == round_index][:per_round]):
            task = tasks[row["task_id"]]
            owner = member(domain, task.domain)
            assessment = owner.verifier.assess(row["completion"], owner.gold(task.reference))
            breakdown = assessment.score.breakdown
            program = row["completion"].strip().replace("\n", " ")
            title = (f"round {round_index} - {task.task_id} - {breakdown['cad_status']}, IoU {breakdown['iou']:.3f}\n"
                     + textwrap.fill(task.prompt, 110) + "\n" + textwrap.shorten(f"wrote: {program}", 220))
            figures[f"round_{round_index:03d}_{task.task_id}_{k}.png"] = figure(assessment.target, assessment.solid,
                                                                                title)
    return figures
