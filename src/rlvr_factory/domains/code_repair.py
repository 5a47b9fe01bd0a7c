"""The code-repair domain: a workspace with failing tests; the model edits it until the tests pass.

Task sources (`sources`): procedural bugs planted (`code_repair_mutants.py`) in the correct
programs of the built-in code tasks (`builtin`), HumanEval (`humaneval`) and MBPP (`mbpp`, both
read from `$RLVR_SHARED_DATA`), and SWE-style rows from a JSONL file (`jsonl`, each row a
workspace reference, see `code_repair_workspace.py`). A mutant is kept only when it fails at least
one of its program's held-out tests (run in the sandbox), so leaving it unrepaired never earns a reward; its tests are split into visible (shown, run
after each edit) and held-out (the reward); its difficulty is the number of mutations plus the
number of files beyond one. Splits are drawn by program, so no held-out task shares its program
with a train task. `renamings` adds copies of each train program with its local names replaced by
random ones (`code_repair_mutants.rename_identifiers`), planted with bugs the same way: train tasks whose
lines cannot be memorised. The environment is `code_repair_env.CodeRepairEnvironment`.
"""

from __future__ import annotations

import ast
import json
import math
import random
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rlvr_factory.domains.base import Task
from rlvr_factory.domains.code import cycled, read_rows
from rlvr_factory.domains.code_repair_edits import Block, EditError, apply_edits, parse_edits
from rlvr_factory.domains.code_repair_env import CodeRepairEnvironment, environment_settings
from rlvr_factory.domains.code_repair_mutants import (
    KINDS, PATCH_SEARCH, canonical, mutate, rename_identifiers, repair_patch, sites, wrong_fix,
)
from rlvr_factory.domains.code_repair_workspace import Workspace, WorkspaceRunner
from rlvr_factory.domains.loaders import read_records
from rlvr_factory.verifiers.code import parse
from rlvr_factory.verifiers.isolation import OWN
from rlvr_factory.verifiers.score import Score

if TYPE_CHECKING:  # torch-free: workers that unpickle the domain import none of these
    from rlvr_factory.evaluation import Verdict
    from rlvr_factory.models.policy import Policy
    from rlvr_factory.rollout.agent_loop import RolloutConfig
    from rlvr_factory.rollout.engine import SamplingConfig
    from rlvr_factory.verification import VerifyConfig

PROGRAM_SOURCES = {"builtin": "builtin", "humaneval": "shared:humaneval/HumanEval.jsonl.gz",
                   "mbpp": "shared:mbpp/sanitized.jsonl"}
MODULE = "solution.py"
ASK = "Answer with SEARCH/REPLACE blocks that fix the bug, or DONE."


class CodeRepairVerifier:
    """The reward of a code-repair episode: the held-out tests on the final workspace.

    `score(completion, gold)` judges a one-shot repair: the completion's edits applied to the
    initial workspace (`gold` is the reference's JSON); the environment judges whole episodes.
    """

    isolation = OWN  # the workspace and its tests run in the code verifier's sandbox

    def __init__(self, runner: WorkspaceRunner) -> None:
        self.runner = runner

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """None: every repair is judged by running the held-out tests."""
        return None

    def score(self, completion: str, gold: str) -> Score:
        workspace = Workspace.from_reference(json.loads(gold))
        try:
            files = apply_edits(workspace.files, parse_edits(completion), workspace.editable)
        except ValueError:
            files = workspace.files
        return self.runner.held_out(workspace, files).score


def program_tests(row: Mapping[str, Any]) -> tuple[str, list[str], list[str]] | None:
    """A code task row's correct program, its tests as assert lines calling the function by name, and
    the test imports; None when its tests are not plain asserts (a HumanEval check with loops, say) or
    do not parse (parsed, bounded, never run)."""
    if {"prompt", "test", "entry_point"} <= row.keys():
        try:
            tree = parse(str(row["test"]), "the test")
        except ValueError:
            return None
        check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
        if check is None or not all(isinstance(s, ast.Assert) for s in check.body):
            return None
        rename = check.args.args[0].arg if check.args.args else "candidate"
        tests = [ast.unparse(_Rename(rename, row["entry_point"]).visit(s)) for s in check.body]
        return row["prompt"] + row.get("canonical_solution", ""), tests, []
    if {"code", "test_list"} <= row.keys():
        return row["code"], list(row["test_list"]), list(row.get("test_imports") or [])
    return None


class _Rename(ast.NodeTransformer):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def visit_Name(self, node: ast.Name) -> ast.Name:
        return ast.Name(self.new, node.ctx) if node.id == self.old else node


def repair_prompt(workspace: Workspace) -> str:
    """The task's prompt: the editable files, the visible tests and the answer format."""
    shown = "".join(f"{path}\n{workspace.files[path]}" for path in workspace.editable)
    tests = "\n".join(workspace.visible_tests)
    return f"{shown}tests:\n{tests}\n{ASK}"


class CodeRepairDomain:
    """Workspaces with failing tests; an episode edits one until its tests pass (see the module docstring)."""

    name = "code_repair"
    report_breakdown = ("process",)  # evaluation also reports partial credit: held-out tests repaired (see held_out)

    def __init__(
        self,
        sources: Sequence[str] = ("builtin",),
        jsonl: str | None = None,
        splits: Mapping[str, float] | None = None,
        seed: int = 0,
        kinds: Sequence[str] = KINDS,
        mutations: Sequence[int] = (1,),
        mutants_per_program: int = 4,
        test_mutants_per_program: int | None = None,  # the same for the test split's programs (null: mutants_per_program)
        max_programs: int | None = None,
        max_tests: int = 6,
        max_prompt_chars: int | None = None,
        max_turns: int = 3,
        renamings: int = 0,
        patch_search: str = "shortest",
        edit_error_decoys: float = 0.0,
        environment: Mapping[str, Any] | None = None,  # the repair environment's limits: max_edit_chars, max_file_chars, observation_chars
        verifier: Mapping[str, Any] | None = None,  # CodeVerifier's settings: sandbox, limits, reward weights (process: held-out tests passing)
    ) -> None:
        unknown = sorted(set(sources) - set(PROGRAM_SOURCES))
        if unknown:
            raise ValueError(f"unknown code_repair sources {unknown}; choose from {sorted(PROGRAM_SOURCES)}")
        self.sources = tuple(sources)  # programs to plant bugs in: builtin | humaneval | mbpp
        self.jsonl = jsonl  # SWE-style rows (workspace references), added to the procedural tasks
        self.splits = dict(splits or {"train": 0.7, "validation": 0.1, "test": 0.2})  # share of programs per split
        self.seed = seed  # mutation sites and splits
        if not kinds or set(kinds) - set(KINDS):
            raise ValueError(f"kinds must be a non-empty subset of {list(KINDS)}, got {list(kinds)}")
        self.kinds = tuple(kinds)  # mutation kinds planted
        if not mutations or min(mutations) < 1:
            raise ValueError(f"mutations must list counts >= 1, got {list(mutations)}")
        self.mutations = tuple(int(m) for m in mutations)  # mutations per mutant (difficulty)
        self.mutants_per_program = mutants_per_program  # kept mutants per program and mutation count, at most
        if test_mutants_per_program is not None and test_mutants_per_program < 1:
            raise ValueError(f"test_mutants_per_program must be >= 1 or null, got {test_mutants_per_program}")
        # the same for the test split's programs (null: `mutants_per_program`): each program's mutants are drawn
        # by its own seeded generator, so more of them measure a policy more finely and change no train or
        # validation task (with one mutation count, the test tasks drawn before stay too)
        self.test_mutants_per_program = test_mutants_per_program or mutants_per_program
        self.max_programs = max_programs  # per source, the first ones (null: all)
        self.max_tests = max_tests  # tests per program kept (visible: the first half)
        self.max_prompt_chars = max_prompt_chars  # programs whose prompt is longer are left out (null: none)
        self.max_turns = max_turns  # actions per episode in the environment
        if renamings < 0:
            raise ValueError(f"renamings must be >= 0, got {renamings}")
        self.renamings = renamings  # renamed copies of each train program, planted with bugs like it (train only)
        if patch_search not in PATCH_SEARCH:
            raise ValueError(f"patch_search must be one of {list(PATCH_SEARCH)}, got {patch_search!r}")
        self.patch_search = patch_search  # reference patches' SEARCH: shortest unique tokens, or whole lines
        if not 0.0 <= edit_error_decoys <= 1.0:
            raise ValueError(f"edit_error_decoys must be in [0, 1], got {edit_error_decoys}")
        self.edit_error_decoys = edit_error_decoys  # share of feedback demonstrations whose wrong first edit does not apply
        self.environment_settings = environment_settings(environment)
        self.runner = WorkspaceRunner(verifier)
        self.verifier = CodeRepairVerifier(self.runner)
        self._tasks: list[Task] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tasks": None}

    # -- tasks ---------------------------------------------------------------------------------------

    def generate_tasks(self) -> list[Task]:
        """The procedural mutants of every source's programs (and the JSONL rows), split by program."""
        return self._procedural() + [self._row_task(row, i) for i, row in enumerate(self._jsonl_rows())]

    def rows(self) -> list[dict[str, Any]]:
        """The raw task rows for curation (JSONL rows unvalidated: curate quarantines bad ones with reasons)."""
        return [t.to_row() for t in self._procedural()] + [self._raw_row(r, i) for i, r in enumerate(self._jsonl_rows())]

    def _procedural(self) -> list[Task]:
        """The mutants of every source (built once per domain object: each is checked in the sandbox)."""
        if self._tasks is None:
            self._tasks = [t for source in self.sources for t in self._mutants(source)]
        return list(self._tasks)

    def _jsonl_rows(self) -> list[dict[str, Any]]:
        return read_records(self.jsonl) if self.jsonl else []

    def _raw_row(self, row: Mapping[str, Any], index: int) -> dict[str, Any]:
        reference = {k: row.get(k) for k in ("files", "editable", "visible_tests", "held_out_tests", "test_imports",
                                             "reference_patch") if k in row}
        error = row.get("_error")
        try:
            prompt = repair_prompt(Workspace.from_reference(reference))
        except (ValueError, SyntaxError, KeyError, TypeError) as e:
            prompt, error = "", error or f"reference: not a code_repair workspace ({type(e).__name__}: {e})"
        return {"task_id": str(row.get("task_id") or f"{self.name}-jsonl-{index:05d}"), "domain": self.name,
                "prompt": prompt, "reference": json.dumps(reference, sort_keys=True, default=str),
                "difficulty": row.get("difficulty"), "split": row.get("split") or "train", "source": str(self.jsonl),
                "_error": error}

    def _row_task(self, row: Mapping[str, Any], index: int) -> Task:
        raw = self._raw_row(row, index)
        workspace = Workspace.from_reference(json.loads(raw["reference"]))
        difficulty = raw["difficulty"] or len(workspace.editable)
        return Task(raw["task_id"], self.name, raw["prompt"], workspace.as_reference(), int(difficulty),
                    raw["split"], raw["source"])

    def _mutants(self, source: str) -> list[Task]:
        rows = read_rows(PROGRAM_SOURCES[source])[: self.max_programs]
        programs = [(str(row.get("task_id")), found) for row in rows if (found := program_tests(row)) is not None]
        rng = random.Random(f"{self.seed}:{source}")
        order = list(range(len(programs)))
        rng.shuffle(order)
        split_of = _split_by_share(order, self.splits)
        tasks = []
        for index, (program_id, (program, tests, imports)) in enumerate(programs):
            tasks += self._program_mutants(source, program_id, program, tests[: self.max_tests], imports,
                                           split_of[index], random.Random(f"{self.seed}:{source}:{program_id}"),
                                           per_count=self.test_mutants_per_program if split_of[index] == "test" else None)
            if split_of[index] == "train":
                tasks += self._renamed_mutants(source, program_id, program, tests[: self.max_tests], imports)
        return tasks

    def _renamed_mutants(self, source: str, program_id: str, program: str, tests: list[str],
                         imports: list[str]) -> list[Task]:
        """The mutants of `renamings` copies of a train program whose identifiers are replaced by random ones
        (`rename_identifiers`, its tests renamed with it): the same kinds of bug in text the model cannot have
        memorised, so that repairing them takes copying the lines it edits from the prompt."""
        tasks = []
        try:
            correct = canonical(program)
        except (SyntaxError, ValueError):
            return []
        for copy_index in range(self.renamings):
            rng = random.Random(f"{self.seed}:{source}:{program_id}:renamed{copy_index}")
            try:
                renamed, renamed_tests = rename_identifiers(correct, tests, rng)
            except ValueError:  # a test that does not parse (the same for every copy)
                return []
            tasks += self._program_mutants(source, f"{program_id}-r{copy_index}", renamed, renamed_tests, imports,
                                           "train", rng, origin=f"{source}/{program_id}")
        return tasks

    def _program_mutants(self, source: str, program_id: str, program: str, tests: list[str], imports: list[str],
                         split: str, rng: random.Random, origin: str | None = None,
                         per_count: int | None = None) -> list[Task]:
        """Up to `per_count` (default `mutants_per_program`) kept mutants per mutation count."""
        per_count = per_count or self.mutants_per_program
        if len(tests) < 2:
            return []
        try:
            correct = canonical(program)
        except (SyntaxError, ValueError):
            return []
        half = math.ceil(len(tests) / 2)
        base = Workspace({MODULE: correct}, (MODULE,), tuple(tests[:half]), tuple(tests[half:]), tuple(imports))
        if self.max_prompt_chars is not None and len(repair_prompt(base)) > self.max_prompt_chars:
            return []  # too long for the run's context (an edit, the tests' report and another edit follow)
        if not self.runner.run(base, base.files, tests).all_passed:
            return []  # the program does not pass its own tests here (a source problem, not a bug to plant)
        candidates = [s for s in sites(correct) if s.kind in self.kinds]
        tasks, seen = [], set()
        for count in self.mutations:
            kept = 0
            for _ in range(4 * per_count):
                if kept == per_count or len(candidates) < count:
                    break
                picked = rng.sample(candidates, count)
                broken = mutate(correct, [s.index for s in picked])
                if broken == correct or broken in seen or self.runner.run(base, {MODULE: broken},
                                                                            base.held_out_tests).all_passed:
                    continue
                seen.add(broken)
                workspace = Workspace({MODULE: broken}, (MODULE,), base.visible_tests, base.held_out_tests,
                                      base.test_imports, repair_patch(MODULE, broken, correct, self.patch_search))
                reference = {**workspace.as_reference(), "kinds": sorted(s.kind for s in picked),
                             "program": origin or f"{source}/{program_id}"}
                task_id = f"{self.name}-{source}-{program_id.replace('/', '_')}-m{count}-{kept}"
                tasks.append(Task(task_id, self.name, repair_prompt(workspace), reference, count, split,
                                  f"mutant:{source}:seed={self.seed}"))
                kept += 1
        return tasks

    # -- the triple package --------------------------------------------------------------------------

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """The workspace as the verifier reads it (the reference patch left out); ValueError when it is invalid."""
        workspace = Workspace.from_reference(reference)
        return json.dumps({**workspace.as_reference(), "reference_patch": ""}, sort_keys=True)

    def environment(self) -> CodeRepairEnvironment:
        """A fresh repair environment (episodes of up to `max_turns` edits)."""
        return CodeRepairEnvironment(self.runner, self.max_turns, **self.environment_settings)

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The reference patch: the blocks that repair the workspace."""
        return task.reference["reference_patch"]

    def tool_demonstration(self, task: Task) -> list[str]:
        """An episode that reads the feedback: a wrong first edit (`wrong_fix`: another mutation on the bug's
        line, or an edit that changes nothing), the environment's report of the visible tests on it, and the
        edit that repairs the workspace from there. The reference patch alone when the task has no second turn.
        With `edit_error_decoys`, that share of them (seeded per task) has a first edit that does not apply
        instead (`edit_error_decoy`), the environment's edit error, and the reference patch."""
        workspace = Workspace.from_reference(task.reference)
        blocks = parse_edits(workspace.reference_patch, 1 << 20)
        path = blocks[0].path
        broken = workspace.files[path]
        fixed = apply_edits(workspace.files, blocks, workspace.editable)[path]
        first = None
        if self.edit_error_decoys and random.Random(f"{self.seed}:{task.task_id}:edit_error").random() < self.edit_error_decoys:
            first, second = edit_error_decoy(workspace, blocks), workspace.reference_patch  # a failed edit changes nothing
        if first is None:
            decoy = wrong_fix(broken, fixed, random.Random(f"{self.seed}:{task.task_id}"))
            first = (repair_patch(path, broken, decoy, self.patch_search) if decoy != broken
                     else "".join(Block(b.path, b.search, b.search).render() for b in blocks))
            second = repair_patch(path, decoy, fixed, self.patch_search)
        env = self.environment()
        env.reset(task)
        step = env.step(first)
        if step.done:  # one edit allowed, or the wrong fix passes the visible tests
            return [workspace.reference_patch]
        return [first, step.observation, second]

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """A one-shot repair judged by the held-out tests."""
        return self.verifier.score(completion, self.gold(reference))

    def evaluation_report(self, policy: Policy, tasks: Sequence[Task], verify: VerifyConfig, sampling: SamplingConfig,
                          rollout: RolloutConfig, greedy: Sequence[Verdict], sampled: Sequence[Sequence[Verdict]],
                          k: int) -> dict[str, float]:
        """The repair rates of `code_repair_eval.repair_rates` (@1 turn, @max_turns, pass@k, by mutation kind and
        difficulty) from evaluation's `greedy` and `sampled` verdicts and greedy first-edit-only episodes."""
        from rlvr_factory.domains.code_repair_eval import first_turn_verdicts, repair_rates  # torch-free unless asked

        first = first_turn_verdicts(policy, tasks, self, verify, sampling, rollout)
        return repair_rates(tasks, self.max_turns, first, greedy, sampled, k)

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """The repaired programs of the train split's tasks and the tasks with their repair, none whose
        prompt is in `exclude`, cycled to `size`."""
        train = [t for t in self.generate_tasks() if t.split == "train" and t.prompt not in exclude]
        repaired = [apply_edits(t.reference["files"], parse_edits(t.reference["reference_patch"], 1 << 20),
                                t.reference["editable"]) for t in train if t.reference.get("reference_patch")]
        documents = sorted({text for files in repaired for text in files.values()})
        documents += [f"{t.prompt}\n{t.reference['reference_patch']}" for t in train if t.reference.get("reference_patch")]
        if not documents:
            raise ValueError("no train task is left to pre-train on")
        return cycled(documents, size, seed)


def edit_error_decoy(workspace: Workspace, blocks: Sequence[Block]) -> str | None:
    """A first edit that does not apply, of the kind a policy writes most (docs/code_repair.md): the repair's
    blocks with SEARCH and REPLACE swapped, a SEARCH text that is the repaired code, which the broken file
    lacks (or has more than once). None when the swapped blocks would apply."""
    swapped = [Block(b.path, b.replace, b.search) for b in blocks]
    try:
        apply_edits(workspace.files, swapped, workspace.editable)
    except EditError:
        return "".join(b.render() for b in swapped)
    return None


def _split_by_share(order: list[int], shares: Mapping[str, float]) -> dict[int, str]:
    """Each index's split: `order` cut into consecutive runs by the splits' shares (the last takes the rest)."""
    total = sum(shares.values())
    out: dict[int, str] = {}
    start = 0
    names = list(shares)
    for k, name in enumerate(names):
        end = len(order) if k == len(names) - 1 else start + round(len(order) * shares[name] / total)
        out.update({i: name for i in order[start:end]})
        start = end
    return out
