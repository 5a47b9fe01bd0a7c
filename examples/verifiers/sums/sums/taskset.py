"""Sums: a `verifiers` v1 taskset (scaffolded with `vf-init sums`) whose tasks are seeded additions.

Written against verifiers' own API (`vf.Taskset`, `vf.Task`, `@vf.reward`), as any environment of the
ecosystem is: RLVR Factory runs it unchanged through `vf-eval` and its OpenAI-compatible endpoint.
"""

import random
import re

import verifiers.v1 as vf

BOXED = re.compile(r"\\boxed\{([^{}]*)\}")


def stated_answer(reply: str) -> str:
    """What a reply states: the one `\\boxed{...}` in it, else the reply itself (surrounding whitespace aside).
    A reply with two boxed answers is not read as either."""
    boxed = BOXED.findall(reply)
    return (boxed[0] if len(boxed) == 1 else reply).strip()


class SumsData(vf.TaskData):
    answer: str = ""


class SumsTask(vf.Task[SumsData]):
    @vf.reward(weight=1.0)
    async def exact(self, trace: vf.Trace) -> float:
        """1 when the last reply states the sum (`stated_answer`)."""
        return float(stated_answer(trace.last_reply) == self.data.answer)


class SumsConfig(vf.TasksetConfig):
    num_tasks: int = 16
    """How many tasks to build."""
    seed: int = 0
    """Seed of the operands."""
    digits: int = 1
    """Digits per operand."""
    template: str = "{a}+{b}="
    """The prompt, with the operands as {a} and {b}."""


class SumsTaskset(vf.Taskset[SumsTask, SumsConfig]):
    def load(self) -> list[SumsTask]:
        rng = random.Random(self.config.seed)
        top = 10 ** self.config.digits - 1
        tasks = []
        for _ in range(self.config.num_tasks):
            a, b = rng.randint(0, top), rng.randint(0, top)
            tasks.append(SumsTask(SumsData(prompt=self.config.template.format(a=a, b=b), answer=str(a + b)), self.config.task))
        return tasks
