"""Sums: a `verifiers` v1 taskset (scaffolded with `vf-init sums`) whose tasks are seeded additions.

Written against verifiers' own API (`vf.Taskset`, `vf.Task`, `@vf.reward`), as any environment of the
ecosystem is: RLVR Factory runs it unchanged through `vf-eval` and its OpenAI-compatible endpoint.
"""

import random

import verifiers.v1 as vf


class SumsData(vf.TaskData):
    answer: str = ""


class SumsTask(vf.Task[SumsData]):
    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        """1 when the last reply is the sum and nothing else (surrounding whitespace aside)."""
        return float(trace.last_reply.strip() == self.data.answer)


class SumsConfig(vf.TasksetConfig):
    num_tasks: int = 16
    """How many tasks to build."""
    seed: int = 0
    """Seed of the operands."""
    digits: int = 1
    """Digits per operand."""


class SumsTaskset(vf.Taskset[SumsTask, SumsConfig]):
    def load(self) -> list[SumsTask]:
        rng = random.Random(self.config.seed)
        top = 10 ** self.config.digits - 1
        tasks = []
        for _ in range(self.config.num_tasks):
            a, b = rng.randint(0, top), rng.randint(0, top)
            tasks.append(SumsTask(SumsData(prompt=f"{a}+{b}=", answer=str(a + b)), self.config.task))
        return tasks
