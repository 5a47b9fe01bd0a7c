"""The embedded default domain: seeded integer arithmetic with step-by-step solutions, and a calculator.

A task is an expression such as ``37+5*6``; its demonstration reduces it one operation
at a time (multiplication first, then left to right) and states the result as
``\\boxed{67}``. Difficulty levels set the number of digits, the number of operands
and the operators that may appear.

With `tool.enabled`, episodes run in `CalculatorEnvironment`: an action may call the
calculator (``<calc>37+5*6</calc>``), whose result is the next observation
(``<result>67</result>``), until an action without a call gives the final answer.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

from rlvr_factory.domains.base import Scorer, SingleTurnEnvironment, Step, Task
from rlvr_factory.domains.calculator import CalculatorLimits, answer_call, find_call
from rlvr_factory.domains.math import math_answer_key, reference_answer
from rlvr_factory.verifiers.score import Score
from rlvr_factory.verifiers.math import MathVerifier

_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


@dataclass(frozen=True)
class Level:
    """How hard a task is: operand size, operand count and allowed operators."""

    digits: int  # largest operand has this many digits
    operands: int  # number of operands in the expression
    ops: str  # operators to draw from, e.g. "+-" or "+-*"

    def __post_init__(self) -> None:
        if self.digits < 1 or self.operands < 2:
            raise ValueError(f"a level needs digits >= 1 and operands >= 2, got {self}")
        if not self.ops or set(self.ops) - set(_APPLY):
            raise ValueError(f"ops must be a non-empty subset of '+-*', got {self.ops!r}")


def solve_steps(numbers: list[int], ops: list[str], slips: Mapping[int, int] | None = None) -> tuple[list[str], int]:
    """Reduce an expression one operation at a time: every `*` first, then left to right.

    Returns the steps as ``"a op b=c"`` strings and the final value. `slips` maps a step's
    index to an error added to its result (carried into the later steps), for flawed solutions.
    """
    numbers, ops = list(numbers), list(ops)
    steps = []
    while ops:
        i = ops.index("*") if "*" in ops else 0
        a, op, b = numbers[i], ops[i], numbers[i + 1]
        value = _APPLY[op](a, b) + (slips or {}).get(len(steps), 0)
        steps.append(f"{a}{op}{b}={value}")
        numbers[i : i + 2] = [value]
        del ops[i]
    return steps, numbers[0]


@dataclass(frozen=True)
class ToolSettings:
    enabled: bool = False  # episodes may call the calculator (multi-turn); false: one answer per episode
    max_tool_calls: int = 3  # calls per episode; the next one ends the episode (finish_reason max_tool_calls)
    limits: CalculatorLimits = CalculatorLimits()

    def __post_init__(self) -> None:
        if self.max_tool_calls < 0:
            raise ValueError(f"tool.max_tool_calls must be >= 0, got {self.max_tool_calls}")


class CalculatorEnvironment:
    """An episode on one arithmetic task with the calculator at hand.

    An action with a ``<calc>`` call gets the result (or a parseable error) as the next
    observation and counts as a tool call (`info`: `tool_calls`, and `tool_errors` for a
    malformed, oversized or refused call); an action without one is the final answer, judged
    by `scorer` (the verify station's verifier by default in the pipeline). A call beyond
    `max_tool_calls` ends the episode unjudged (reward 0, finish_reason `max_tool_calls`).
    """

    def __init__(self, domain: ArithmeticDomain, scorer: Scorer | None = None, tool: ToolSettings = ToolSettings()) -> None:
        self.scorer = scorer or domain.score
        self.tool = tool
        self.task: Task | None = None
        self.calls = 0

    def reset(self, task: Task) -> str:
        """The task's prompt."""
        self.task, self.calls = task, 0
        return task.prompt

    def step(self, action: str) -> Step:
        """Answer the action's calculator call, or judge the action as the final answer."""
        if self.task is None:
            raise RuntimeError("step() before reset(): call reset(task) to start an episode")
        call = find_call(action)
        if call is None:
            return Step("", self.scorer(action, self.task.reference), done=True)
        if self.calls >= self.tool.max_tool_calls:
            return Step("", Score(0.0, False, breakdown={"tool_budget_exhausted": 1.0}), done=True,
                        finish_reason="max_tool_calls", out_of_budget=True)
        self.calls += 1
        observation, failed = answer_call(call, self.tool.limits)
        return Step(observation, None, done=False, info={"tool_calls": 1.0, "tool_errors": float(failed)})


def parse_expression(expression: str) -> tuple[list[int], list[str]]:
    """The operands and operators of an expression such as ``37+5*6`` (the inverse of how tasks are written)."""
    parts = re.findall(r"\d+|[-+*]", expression)
    if "".join(parts) != expression.replace(" ", "") or len(parts) % 2 == 0:
        raise ValueError(f"not an expression of non-negative integers and + - *: {expression!r}")
    return [int(p) for p in parts[::2]], parts[1::2]


def _error(rng: random.Random) -> int:
    """A small non-zero arithmetic error."""
    return rng.choice([-1, 1]) * rng.randint(1, 10)


# How a flawed demonstration falls short of the worked, correct one (`flawed_demonstration`).
FLAWS = ("direct", "direct_wrong", "slip", "wrong_final")


# The default run's levels (difficulty -> digits per operand, operands, operators) and tasks per split.
LEVELS = {1: {"digits": 2, "operands": 2, "ops": "+"}, 2: {"digits": 2, "operands": 2, "ops": "+-"},
          3: {"digits": 1, "operands": 3, "ops": "+-*"}, 4: {"digits": 2, "operands": 3, "ops": "+-"}}
SPLITS = {"train": 4000, "validation": 400, "test": 400}


class ArithmeticDomain:
    """Seeded arithmetic tasks, split into train / validation / test without overlap."""

    name = "arithmetic"
    verifier_class = MathVerifier  # the reward, built from the block's `verifier` options

    def __init__(
        self,
        levels: Mapping[int | str, Mapping[str, Any]] = LEVELS,  # difficulty -> {digits, operands, ops} (Level)
        splits: Mapping[str, int] = SPLITS,  # tasks per split (levels take equal shares)
        seed: int = 0,  # task generation seed
        verifier: Mapping[str, Any] | None = None,  # MathVerifier's settings (verifiers/math.py)
        tool: Mapping[str, Any] | None = None,  # the calculator tool: {enabled, max_tool_calls, limits} (ToolSettings)
    ) -> None:
        self.levels = {int(k): Level(**v) for k, v in levels.items()}
        self.splits = dict(splits)
        self.seed = seed
        self.verifier = self.verifier_class(**(verifier or {}))
        tool = dict(tool or {})
        self.tool = ToolSettings(**{**tool, "limits": CalculatorLimits(**tool.get("limits", {}))})

    def environment(self, scorer: Scorer | None = None) -> CalculatorEnvironment | SingleTurnEnvironment:
        """A fresh environment: with the calculator when `tool.enabled`, else the single-turn one."""
        if self.tool.enabled:
            return CalculatorEnvironment(self, scorer, self.tool)
        return SingleTurnEnvironment(self, scorer)

    def _draw(self, rng: random.Random, level: Level) -> tuple[list[int], list[str]]:
        numbers = [rng.randint(0, 10**level.digits - 1) for _ in range(level.operands)]
        ops = [rng.choice(level.ops) for _ in range(level.operands - 1)]
        return numbers, ops

    def _expression(self, rng: random.Random, difficulty: int) -> tuple[str, list[str], int]:
        numbers, ops = self._draw(rng, self.levels[difficulty])
        expression = "".join(f"{n}{o}" for n, o in zip(numbers, ops)) + str(numbers[-1])
        steps, answer = solve_steps(numbers, ops)
        return expression, steps, answer

    def generate_tasks(self) -> list[Task]:
        """Draw each split's tasks, levels in equal shares; no expression appears twice."""
        levels = sorted(self.levels)
        demand = {d: 0 for d in levels}
        for count in self.splits.values():
            for i in range(count):
                demand[levels[i % len(levels)]] += 1
        for d, wanted in demand.items():
            if wanted > self._capacity(self.levels[d]) // 2:
                raise ValueError(
                    f"level {d} ({self.levels[d]}) has too few distinct expressions for "
                    f"{wanted} tasks; lower the split sizes or widen the level"
                )
        rng = random.Random(self.seed)
        seen: set[str] = set()
        tasks = []
        for split, count in self.splits.items():
            for i in range(count):
                difficulty = levels[i % len(levels)]
                expression, steps, answer = self._expression(rng, difficulty)
                while expression in seen:
                    expression, steps, answer = self._expression(rng, difficulty)
                seen.add(expression)
                tasks.append(
                    Task(
                        task_id=f"arithmetic-{split}-{i:05d}",
                        domain=self.name,
                        prompt=f"Compute {expression}",
                        reference={"answer": str(answer), "steps": steps},
                        difficulty=difficulty,
                        split=split,
                        source=f"generated:seed={self.seed}",
                    )
                )
        return tasks

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        """Worked expressions in plain text (no chat format), none of whose prompts is in `exclude`.

        Pass the held-out prompts as `exclude` so the base model never sees an evaluation task.
        """
        rng = random.Random(seed)
        levels = sorted(self.levels)
        lines = []
        while len(lines) < size:
            expression, steps, answer = self._expression(rng, levels[len(lines) % len(levels)])
            prompt = f"Compute {expression}"
            if prompt not in exclude:
                lines.append(prompt + "\n" + "\n".join(steps) + f"\n\\boxed{{{answer}}}")
        return lines

    @staticmethod
    def _capacity(level: Level) -> int:
        return (10**level.digits) ** level.operands * len(level.ops) ** (level.operands - 1)

    def demonstration(self, task: Task, worked: bool = True) -> str:
        """The step-by-step solution ending in the boxed answer, or (`worked=False`) the answer alone."""
        boxed = f"\\boxed{{{task.reference['answer']}}}"
        return "\n".join(task.reference["steps"]) + "\n" + boxed if worked else boxed

    def tool_demonstration(self, task: Task) -> list[str]:
        """A calculator episode: the call with the task's expression, the calculator's answer, the boxed result."""
        call = f"<calc>{task.prompt.removeprefix('Compute ')}</calc>"
        observation, _ = answer_call(find_call(call), self.tool.limits)
        return [call, observation, f"\\boxed{{{task.reference['answer']}}}"]

    def flawed_demonstration(self, task: Task, flaw: str, rng: random.Random) -> str:
        """A completion worse than the worked solution, for preference pairs: `direct` (the right
        answer, unexplained), `direct_wrong` (a wrong answer, unexplained), `slip` (worked, with an
        arithmetic error in one step carried to the answer) or `wrong_final` (right steps, wrong answer)."""
        answer = int(task.reference["answer"])
        if flaw == "direct":
            return f"\\boxed{{{answer}}}"
        if flaw == "direct_wrong":
            return f"\\boxed{{{answer + _error(rng)}}}"
        if flaw == "wrong_final":
            return "\n".join(task.reference["steps"]) + f"\n\\boxed{{{answer + _error(rng)}}}"
        if flaw == "slip":
            numbers, ops = parse_expression(task.prompt.removeprefix("Compute "))
            steps, value = solve_steps(numbers, ops, {rng.randrange(len(ops)): _error(rng)})
            return "\n".join(steps) + f"\n\\boxed{{{value}}}"
        raise ValueError(f"unknown flaw {flaw!r}; choose one of {FLAWS}")

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        """What the verifier compares a completion with: the reference answer (a ValueError unless a string)."""
        return reference_answer(reference)

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """Verify one completion in this process (the pipeline verifies through a worker pool)."""
        return self.verifier.score(completion, self.gold(reference))

    @staticmethod
    def answer_key(completion: str) -> str | None:
        """The final answer in canonical spelling (for majority voting)."""
        return math_answer_key(completion)
