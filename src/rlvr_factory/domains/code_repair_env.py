"""The code-repair environment: edit the workspace, run the visible tests, read the failures, try again.

Each episode starts from the task's pristine files (a copy; never another episode's). An action
is search/replace blocks (`code_repair_edits.py`) or `DONE`. A well-formed edit is applied and
the visible tests run in the sandbox; the observation is their bounded report. An edit that does
not parse or apply, or touches a file it may not, changes nothing and is answered with the error
(`edit_errors`). The episode ends when the model says `DONE`, when the visible tests pass, or
after `max_turns` actions; then the held-out tests, which the model never saw, decide the
reward on the final workspace (`process`: the share of the held-out tests the starting workspace
failed that pass now, so an untouched or only broken workspace earns no partial credit).
"""

from __future__ import annotations

from typing import Any, Mapping

from rlvr_factory.domains.base import Step, Task
from rlvr_factory.domains.code_repair_edits import EditError, apply_edits, parse_edits
from rlvr_factory.domains.code_repair_workspace import TestRun, Workspace, WorkspaceRunner, render_run


class CodeRepairEnvironment:
    """One episode on one code-repair task; see the module docstring. Picklable (the sandbox is per process)."""

    def __init__(self, runner: WorkspaceRunner, max_turns: int = 3, max_edit_chars: int = 4000,
                 max_file_chars: int = 20_000, observation_chars: int = 400) -> None:
        self.runner = runner
        self.max_turns = max_turns  # actions per episode; the last one is judged
        self.max_edit_chars = max_edit_chars  # a longer action is refused
        self.max_file_chars = max_file_chars  # an edit that makes a file longer is refused
        self.observation_chars = observation_chars  # observations are cut to this many characters
        self.workspace: Workspace | None = None
        self.files: dict[str, str] = {}
        self.turn = 0

    def reset(self, task: Task) -> str:
        """The task's prompt; the workspace restored from the task's snapshot. InfraError when no sandbox starts."""
        self.workspace = Workspace.from_reference(task.reference)
        self.files, self.turn = dict(self.workspace.files), 0
        self.runner.sandbox()  # start (or find warm) now, so a sandbox that cannot start is infra_error
        return task.prompt

    def step(self, action: str) -> Step:
        """Apply the edit and run the visible tests; at the end, the held-out tests' verdict."""
        if self.workspace is None:
            raise RuntimeError("step() before reset(): call reset(task) to start an episode")
        self.turn += 1
        info: dict[str, float] = {"edits": 1.0}
        last = self.turn >= self.max_turns
        try:
            blocks = parse_edits(action, self.max_edit_chars)
            if not blocks:
                return self._finish(info, "declared_done")
            self.files = apply_edits(self.files, blocks, self.workspace.editable, self.max_file_chars)
        except EditError as e:
            info["edit_errors"] = 1.0
            if last:
                return self._finish(info, "max_turns")
            return Step(f"edit error: {e}\nnothing was changed", None, done=False, info=info)
        run = self.runner.run(self.workspace, self.files, self.workspace.visible_tests)
        _count(info, run)
        if run.all_passed or last:
            return self._finish(info, "visible_tests_pass" if run.all_passed else "max_turns")
        left = self.max_turns - self.turn
        return Step(f"{render_run(run, self.observation_chars)}\n({left} edit{'s' if left > 1 else ''} left)",
                    None, done=False, info=info)

    def _finish(self, info: dict[str, float], reason: str) -> Step:
        """The episode's verdict: the held-out tests on the final workspace."""
        workspace, self.workspace = self.workspace, None
        run = self.runner.held_out(workspace, self.files)
        _count(info, run)
        return Step("", run.score, done=True, info=info, finish_reason=reason, out_of_budget=reason == "max_turns")


def _count(info: dict[str, float], run: TestRun) -> None:
    info["test_runs"] = info.get("test_runs", 0.0) + 1.0
    info["sandbox_restarts"] = info.get("sandbox_restarts", 0.0) + run.restarts
    info["test_timeouts"] = info.get("test_timeouts", 0.0) + float(run.timed_out)


def environment_settings(settings: Mapping[str, Any] | None) -> dict[str, Any]:
    """The environment's keyword arguments from the domain block's `environment` settings (unknown keys refused)."""
    known = {"max_edit_chars", "max_file_chars", "observation_chars"}
    settings = dict(settings or {})
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"unknown code_repair environment settings {unknown}; expected some of {sorted(known)}")
    return settings
