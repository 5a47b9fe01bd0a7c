"""Environments for the agent loop's tests (module level, so scheduler workers can unpickle them)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlvr_factory.domains.base import Step
from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers.score import Score


class EchoEnvironment:
    """Echoes each action's length back; done after `turns` actions, rewarded 1 per turn."""

    def __init__(self, turns: int = 2) -> None:
        self.turns = turns
        self.seen = 0

    def reset(self, task):
        self.seen = 0
        return task.prompt

    def step(self, action):
        self.seen += 1
        done = self.seen >= self.turns
        return Step("" if done else f"<result>{len(action)}</result>", Score(1.0, True) if done else None, done,
                    reward=1.0, info={"echoes": 1.0})


class GradesEachAttempt(EchoEnvironment):
    """Like CAD's environment: every attempt is graded (reward 0.1 per turn so far), feedback follows until `turns`."""

    def step(self, action):
        self.seen += 1
        done = self.seen >= self.turns
        return Step("" if done else "<result>try again</result>", Score(0.1 * self.seen, False), done)


class FailsOnPrompt(EchoEnvironment):
    """Raises in `step` for the task whose prompt contains 'boom'; sleeps forever for 'hang'."""

    def step(self, action):
        if "boom" in self.prompt:
            raise RuntimeError("the environment broke")
        if "hang" in self.prompt:
            time.sleep(3600)
        return super().step(action)

    def reset(self, task):
        self.prompt = task.prompt
        return super().reset(task)


class FlakyStart(EchoEnvironment):
    """`reset` raises InfraError until a marker file under `directory` exists for the task (one failure each),
    or always for prompts containing 'dead'."""

    def __init__(self, directory: str) -> None:
        super().__init__(turns=1)
        self.directory = Path(directory)

    def reset(self, task):
        marker = self.directory / task.task_id
        if "dead" in task.prompt or not marker.exists():
            marker.touch()
            raise InfraError(f"sandbox for {task.task_id} did not start (pid {os.getpid()})")
        return super().reset(task)


EPISODES_SEEN = []  # what `KeepsModuleState` leaves in its worker's memory


class KeepsModuleState:
    """Remembers every reset in its module, and says how many it saw: state that outlives an episode."""

    untrusted = False

    def reset(self, task):
        EPISODES_SEEN.append(task.task_id)
        return task.prompt

    def step(self, action):
        return Step(f"episodes seen in this process: {len(EPISODES_SEEN)}", None, done=False)


class ThirdPartyKeepsModuleState(KeepsModuleState):
    """The same, marked as a third-party package's code."""

    untrusted = True
