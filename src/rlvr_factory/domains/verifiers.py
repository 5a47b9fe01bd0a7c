"""A `verifiers` v1 environment (Prime Intellect's environments; `bash scripts/install_verifiers.sh`) as a domain:
`domain.name: verifiers`, `env_id: sums`.

verifiers drives the model itself, so this domain holds no environment of its own: the rollout station runs the
environment's `vf-eval` on a round's tasks against the policy's OpenAI-compatible endpoint, and each episode is
the endpoint's token-exact record of one trace, with the environment's reward (the weighted sum of its
`@vf.reward` scores) as its verdict (`rollout/verifiers_adapter.py`). A task is a position in the taskset (the
order of its `load()`); its prompt and its reference stay the environment's own, so the tasks table names each
task by position, and the positions are split by a seeded shuffle.

There are no demonstrations and no pre-training corpus: a run starts from a model (`model.name_or_path`) with
`sft.num_examples: 0` (conf/verifiers). The environment's code runs in the verifiers venv's processes, outside
the sandbox (docs/security.md).
"""

from __future__ import annotations

import random
from typing import Any, Mapping, Sequence

from rlvr_factory.domains.base import Task
from rlvr_factory.verifiers.score import Score

DEFAULT_VENV = ".venv-verifiers"


class TracesOnly:
    """The verifier of a domain whose environment judges its own traces: every episode arrives with the
    environment's verdict, so a completion alone cannot be judged here (an `error`, never a wrong answer)."""

    MESSAGE = ("a verifiers environment judges its own traces (through vf-eval); a completion alone has no "
               "verdict here")

    def quick_score(self, completion: str, gold: str) -> Score | None:
        return None

    def score(self, completion: str, gold: str) -> Score:
        return Score(0.0, False, status="error", message=self.MESSAGE)


class VerifiersDomain:
    """A verifiers v1 environment: tasks are positions in its taskset; `vf-eval` samples and judges them."""

    name = "verifiers"
    not_audited = ("the environment judges its own traces inside vf-eval, which the audit cannot reach from here; "
                   "attack it with its own tests")

    def __init__(
        self,
        env_id: str = "sums",  # the installed verifiers environment (vf-eval's first argument)
        splits: Mapping[str, int] | None = None,  # task positions per split, the first of the taskset shuffled (default: train 12, validation 4)
        seed: int = 0,  # shuffles the positions into splits
        venv: str = DEFAULT_VENV,  # the venv with verifiers and the environment (scripts/install_verifiers.sh)
        success_reward: float = 1.0,  # an episode whose reward reaches this is correct
        max_concurrent: int = 32,  # episodes vf-eval runs at once (its requests batch in the engine)
        timeout_seconds: float = 1800.0,  # one vf-eval run (a round's or an evaluation's episodes); past it, they are infra_error
        env_args: Sequence[str] = (),  # further vf-eval arguments, e.g. [--env.taskset.num-tasks, "64"]
    ) -> None:
        self.splits = dict(splits or {"train": 12, "validation": 4})
        if any(count < 0 for count in self.splits.values()) or not sum(self.splits.values()):
            raise ValueError(f"domain.splits must give a non-negative number of tasks per split, some, got {self.splits}")
        if max_concurrent < 1 or not timeout_seconds > 0:
            raise ValueError("domain.max_concurrent must be at least 1 and domain.timeout_seconds positive, got "
                             f"{max_concurrent} and {timeout_seconds}")
        self.env_id = env_id
        self.seed = seed
        self.venv = venv
        self.success_reward = success_reward
        self.max_concurrent = max_concurrent
        self.timeout_seconds = timeout_seconds
        self.env_args = tuple(str(a) for a in env_args)
        self.verifier = TracesOnly()

    def generate_tasks(self) -> list[Task]:
        """One task per taskset position: the first `sum(splits)` positions, shuffled with `seed`, split in order."""
        positions = list(range(sum(self.splits.values())))
        random.Random(self.seed).shuffle(positions)
        tasks, at = [], 0
        for split, count in self.splits.items():
            for i, position in enumerate(positions[at: at + count]):
                tasks.append(Task(f"{self.name}-{split}-{i:05d}", self.name, f"{self.env_id} task {position}",
                                  {"index": position}, 1, split, f"verifiers:{self.env_id}"))
            at += count
        return tasks

    @staticmethod
    def position(task: Task) -> int:
        """The task's position in the taskset."""
        return int(task.reference["index"])

    @staticmethod
    def gold(reference: dict[str, Any]) -> str:
        return str(reference["index"])

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        return self.verifier.score(completion, self.gold(reference))

    def environment(self, scorer: Any = None) -> Any:
        raise ValueError("a verifiers environment drives the model itself (through vf-eval): it runs as the run's "
                         "domain, not as a member of a mix or in the agent loop")

    def demonstration(self, task: Task, worked: bool = True) -> str:
        raise ValueError("a verifiers environment has no demonstrations: set sft.num_examples: 0 and start from a "
                         "model (model.name_or_path), as conf/verifiers does")

    def pretraining_corpus(self, size: int, seed: int, exclude: set[str]) -> list[str]:
        raise ValueError("a verifiers environment has no pre-training corpus for the embedded model: set "
                         "model.name_or_path to a model (a Hugging Face directory), as conf/verifiers does")
