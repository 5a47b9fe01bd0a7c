"""Code-repair workspaces: their contract, their snapshots, and their tests run in the sandbox.

A workspace reference (a task's `reference`, and a row of an SWE-style JSONL file) holds:

    files           {path: text}      the initial (buggy) workspace: modules and read-only test files
    editable        [path]            the only files an edit may change (Python modules, not tests)
    visible_tests   [assert line]     run after every edit; the model sees which failed and why
    held_out_tests  [assert line]     never shown; they decide the reward on the final workspace
    test_imports    [line]            optional imports / set-up the tests need
    reference_patch str               search/replace blocks that repair the workspace

Tests are assert lines that call the workspace's functions (`assert add(2, 3) == 5`). They run
as the code verifier runs MBPP tests (`verifiers/code.py`, `verifiers/code_judge.py`): in the
sandbox, in the judge's process, with every call to a workspace function made in a child process
of its own, where the workspace's modules are imported. Nothing of a row is evaluated here (its
tests are only parsed). So early exits, tampered equality, patched test runners and fake result
files change nothing, and a row's test lines, imports or set-up can touch nothing of the host.
What a failed test's call gave is described in the sandbox too, within the run's limits and cut to
a few dozen characters however large or strange the value. Each run restores the sandbox's
workspace from the files' snapshot, and the sandbox resets after the run, so nothing outlives it.

The held-out verdict (`WorkspaceRunner.held_out`) pays `process` for improvement only: the share
of the held-out tests the starting workspace failed that now pass (`verifiers.code.improvement`),
so an untouched workspace, an edit that changes nothing and an edit that breaks passing tests
earn no partial credit.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from rlvr_factory.domains.code_repair_edits import (
    EditError, apply_edits, is_test_path, location_problem, parse_edits, path_problem,
)
from rlvr_factory.sandbox import Sandbox, SandboxError, SandboxStartError, Snapshot
from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers.code import CodeTask, CodeVerifier, Verdict, hack_signs, judge_program
from rlvr_factory.verifiers.score import Score

REFERENCE_KEYS = ("files", "editable", "visible_tests", "held_out_tests")
MAX_REMEMBERED_STARTS = 4096  # tasks whose starting pass count a runner keeps
_SANDBOXES: dict[tuple, Sandbox] = {}  # this process's warm sandboxes, one per setting (kept across episodes)


@dataclass(frozen=True)
class Workspace:
    """A validated workspace reference (see the module docstring)."""

    files: dict[str, str]
    editable: tuple[str, ...]
    visible_tests: tuple[str, ...]
    held_out_tests: tuple[str, ...]
    test_imports: tuple[str, ...] = ()
    reference_patch: str = ""

    @classmethod
    def from_reference(cls, reference: Mapping[str, Any]) -> Workspace:
        """Validate a reference; ValueError says what is wrong with it."""
        missing = [k for k in REFERENCE_KEYS if k not in reference]
        if missing:
            raise ValueError(f"a code_repair reference needs {list(REFERENCE_KEYS)}; missing {missing}")
        files = reference["files"]
        if not isinstance(files, dict) or not files or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
            raise ValueError("files: expected a non-empty object of path -> text")
        editable = _strings(reference["editable"], "editable")
        for path in files:
            problem = location_problem(path)
            if problem is not None:
                raise ValueError(f"files: {problem}")
        for path in editable:
            problem = path_problem(path, list(files))
            if problem is not None or not path.endswith(".py"):
                raise ValueError(f"editable: {problem or f'{path!r} is not a Python module'}")
        workspace = cls(
            files=dict(files), editable=tuple(editable),
            visible_tests=tuple(_strings(reference["visible_tests"], "visible_tests")),
            held_out_tests=tuple(_strings(reference["held_out_tests"], "held_out_tests")),
            test_imports=tuple(_strings(reference.get("test_imports") or [], "test_imports", empty=True)),
            reference_patch=str(reference.get("reference_patch") or ""),
        )
        workspace.code_task(workspace.visible_tests)  # the tests parse and call a function
        workspace.code_task(workspace.held_out_tests)
        if workspace.reference_patch:
            try:
                apply_edits(workspace.files, parse_edits(workspace.reference_patch, max_chars=1 << 20), workspace.editable)
            except EditError as e:
                raise ValueError(f"reference_patch does not apply: {e}") from e
        return workspace

    def as_reference(self) -> dict[str, Any]:
        """The workspace as a reference dict (JSON-ready)."""
        return {"files": self.files, "editable": list(self.editable), "visible_tests": list(self.visible_tests),
                "held_out_tests": list(self.held_out_tests), "test_imports": list(self.test_imports),
                "reference_patch": self.reference_patch}

    def modules(self) -> list[str]:
        """The importable modules of the workspace (its non-test .py files), as dotted names."""
        return sorted(p[:-3].replace("/", ".").removesuffix(".__init__") for p in self.files
                      if p.endswith(".py") and not is_test_path(p))

    def code_task(self, tests: Sequence[str]) -> CodeTask:
        """The tests as the code verifier's MBPP-format task (parsed, never run); ValueError if they are not Python."""
        return CodeTask.from_reference({"format": "mbpp", "test_list": list(tests),
                                        "test_imports": list(self.test_imports)})

    def key(self) -> str:
        """A digest of the whole reference: what identifies the task's starting point."""
        return hashlib.sha256(json.dumps(self.as_reference(), sort_keys=True).encode()).hexdigest()


def _strings(value: Any, name: str, empty: bool = False) -> list[str]:
    if not isinstance(value, list) or (not value and not empty) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name}: expected a {'' if empty else 'non-empty '}list of strings")
    return value


def snapshot(files: Mapping[str, str]) -> Snapshot:
    """The files as a workspace snapshot: regular files only (no links, no modes of the author's choosing)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        directories: set[str] = set()
        for path in sorted(files):
            parts = path.split("/")[:-1]
            for k in range(1, len(parts) + 1):
                directory = "/".join(parts[:k])
                if directory not in directories:
                    directories.add(directory)
                    info = tarfile.TarInfo(directory)
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    tar.addfile(info)
            data = files[path].encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return Snapshot(buffer.getvalue())


def loader_source(modules: Sequence[str]) -> str:
    """The program the sandbox runs: import every workspace module and expose its names to the tests."""
    imports = "".join(f"from {m} import *\n" for m in modules)
    return f"import os, sys\nsys.dont_write_bytecode = True\nsys.path.insert(0, os.getcwd())\n{imports}"


@dataclass
class TestRun:
    """What one run of tests against a workspace found."""

    passed: list[bool]  # per test
    failures: list[str] = field(default_factory=list)  # per failed test: the test and what happened
    error: str = ""  # the workspace did not load, or its run ended early (timeout, crash, exit)
    timed_out: bool = False
    stderr: str = ""
    seconds: float = 0.0
    restarts: int = 0  # sandboxes started anew during the run
    score: Score | None = None  # the code verifier's verdict on the run

    @property
    def all_passed(self) -> bool:
        return bool(self.passed) and all(self.passed) and not self.error


class WorkspaceRunner:
    """Runs tests against workspace files in this process's warm sandbox (started once per process,
    replaced when it breaks); reward weights, limits and backend are the code verifier's settings."""

    def __init__(self, code: Mapping[str, Any] | None = None, diagnose: bool = True) -> None:
        self.verifier = CodeVerifier(**dict(code or {}))
        self.diagnose = diagnose  # say what each failed visible test's call returned or raised
        self._passed_before: dict[str, int] = {}  # workspace key -> held-out tests its starting files pass

    def sandbox(self) -> Sandbox:
        """This process's sandbox for these settings, started; InfraError when none starts."""
        key = (self.verifier.backend, self.verifier.limits, self.verifier.workspace_mb,
               json.dumps(self.verifier.backend_options, sort_keys=True))
        try:
            box = _SANDBOXES.get(key)
            if box is None:
                box = _SANDBOXES[key] = Sandbox(**self.verifier.sandbox_options())
            box.start()
        except SandboxStartError as e:
            raise InfraError(f"no sandbox for the workspace: {e}") from e
        return box

    def held_out(self, workspace: Workspace, files: Mapping[str, str]) -> TestRun:
        """The held-out tests on `files`, scored with `process` the improvement over the starting workspace
        (its `passed_before` recorded in the breakdown); InfraError when no sandbox starts."""
        return self.run(workspace, files, workspace.held_out_tests, passed_before=self.passed_before(workspace))

    def passed_before(self, workspace: Workspace) -> int:
        """How many held-out tests the workspace's starting files pass (run once per task and process)."""
        key = workspace.key()
        if key not in self._passed_before:
            if len(self._passed_before) >= MAX_REMEMBERED_STARTS:
                self._passed_before.pop(next(iter(self._passed_before)))
            start = self.run(workspace, workspace.files, workspace.held_out_tests)
            self._passed_before[key] = sum(start.passed)
        return self._passed_before[key]

    def run(self, workspace: Workspace, files: Mapping[str, str], tests: Sequence[str],
            passed_before: int | None = None) -> TestRun:
        """Run `tests` against `files` (the workspace as it stands); InfraError when no sandbox starts.
        With `passed_before`, the score's `process` is the improvement over it (`CodeVerifier.verdict_score`)."""
        box = self.sandbox()
        starts, started = box.starts, time.perf_counter()
        task = workspace.code_task(tests)
        for attempt in range(2):  # a sandbox lost mid-run is retried once in a fresh one
            try:
                run = self._run_in(box, workspace, files, task, passed_before)
                break
            except SandboxStartError as e:
                raise InfraError(f"the sandbox did not start: {e}") from e
            except SandboxError as e:
                if attempt:  # lost twice: the workspace takes its sandbox down, and scores nothing
                    error = f"the run took its sandbox down ({e})"
                    run = TestRun([False] * len(tests), error=error,
                                  score=self.verifier.lost_sandbox_score(task, error, passed_before))
                self.sandbox()
        run.seconds, run.restarts = time.perf_counter() - started, box.starts - starts
        return run

    def _run_in(self, box: Sandbox, workspace: Workspace, files: Mapping[str, str], task: CodeTask,
                passed_before: int | None) -> TestRun:
        box.restore(snapshot(files), as_base=True)
        verdict = judge_program(box, loader_source(workspace.modules()), task, self.verifier.limits, self.diagnose)
        lines = task.tests.splitlines()
        passed = [verdict.passed.get(i, False) for i in range(len(lines))]
        failures = [f"{line}: {verdict.failures.get(i, 'failed')}" for i, (line, ok) in enumerate(zip(lines, passed))
                    if not ok and not verdict.load_error and verdict.ended is None and not verdict.setup_error]
        signs = sorted(set(_signs(files, workspace.editable)) - set(_signs(workspace.files, workspace.editable)))
        score = self.verifier.verdict_score(verdict, signs, passed_before)
        return TestRun(passed, failures, _error(verdict, score, self.verifier.limits.timeout_s),
                       score.status == "timeout", verdict.stderr, score=score)


def _error(verdict: Verdict, score: Score, timeout_s: float) -> str:
    """Why a run ended before its tests did: the workspace did not import, it timed out, or a process ended."""
    if verdict.setup_error:
        return f"the tests could not run: {verdict.setup_error}"
    if verdict.load_error is not None:
        return f"the workspace did not import: {verdict.load_error[0]}: {verdict.load_error[1]}"
    if verdict.ended is None:
        return verdict.judge_error
    # the verifier's own judgement of a timeout (the wall-clock deadline or the CPU-time limit's SIGXCPU,
    # whichever a busy loop hits first), so the observation and the reward never disagree
    if score.status == "timeout":
        return f"the tests ran past the {timeout_s:g} s limit"
    who = "the tests' judge was ended" if verdict.ended.judge else "the program ended during the tests"
    return f"{who} (exit code {verdict.ended.exit_code})"


def _signs(files: Mapping[str, str], editable: Sequence[str]) -> list[str]:
    return [sign for path in editable for sign in hack_signs(files.get(path, ""))]


def render_run(run: TestRun, budget: int) -> str:
    """The observation after a test run: a summary line, each failure, the error and the stderr tail,
    cut to `budget` characters."""
    lines = [f"visible tests: {sum(run.passed)}/{len(run.passed)} passed"]
    if run.error:
        lines.append(f"error: {run.error}")
    lines += [f"FAIL {f}" for f in run.failures]
    tail = run.stderr.strip()[-200:]
    if tail:
        lines.append(f"stderr: {tail}")
    text = "\n".join(lines)
    return text if len(text) <= budget else text[: max(budget - 4, 0)] + " ..."
