"""A domain whose reward is learned: a reward model alone, or mixed with the domain's verifier.

`domain.reward: model` (or component weights, `{verifier: 1.0, rm: 0.5}`) with a
`domain.reward_model` block wraps the configured domain: tasks, demonstrations and corpus are
the domain's own, but every completion is scored by both components, the reward model (on
the prompt and completion, batched through its own pool) and the domain's verifier (through
its pool), and `verifiers.reward_model.combine` makes one Score of them. The verifier's verdict
stays the `correct` of every sample (the gold that pass rates and held-out accuracy report),
whatever it weighs in the reward, so a run on a learned reward shows whether it still earns
what the verifier counts. The wrapper adds each task's prompt to its reference (the reward
model reads it), so curate again after turning a learned reward on.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from rlvr_factory.domains.base import Domain, SingleTurnEnvironment, Task, environment_for, row_reference, source_rows
from rlvr_factory.verifiers.reward_model import (
    LearnedRewardVerifier, RewardModelVerifier, combine, parse_weights, reward_model_gold,
)
from rlvr_factory.verifiers.score import Score

if TYPE_CHECKING:
    from rlvr_factory.verification import VerifyConfig

PROMPT_KEY = "prompt"  # the reference key holding the task's prompt


def _with_prompt(row: dict[str, Any]) -> dict[str, Any]:
    """A raw task row whose reference also holds its prompt; a row it cannot read is left for validation to refuse."""
    reference = row_reference(row)
    if reference is None or not isinstance(row.get("prompt"), str):
        return row
    return {**row, "reference": {**reference, PROMPT_KEY: row["prompt"]}}


class _Component:
    """One reward component seen as a domain by `verify_batch`: its verifier and what it reads as gold."""

    def __init__(self, verifier: Any, gold: Any) -> None:
        self.verifier = verifier
        self.gold = gold


class LearnedRewardDomain:
    """`inner` with a reward made of components: its verifier and a reward model, weighted by `weights`."""

    # the reward audit holds the verifier's verdict (`correct`) to account, not the reward: a learned reward is a
    # proxy that scores any text by design, and the run's overoptimisation plot measures what it pays beside the gold
    shaped_reward = "a learned reward model scores any text by design (a proxy); the verifier's verdict is audited"

    def __init__(self, inner: Domain, weights: Mapping[str, float], reward_model: RewardModelVerifier) -> None:
        if not isinstance(environment_for(inner), SingleTurnEnvironment):
            raise ValueError(f"domain {inner.name!r} has its own multi-turn environment; a learned reward "
                             "scores single-turn domains")
        self.inner = inner
        self.weights = dict(weights)
        self.reward_model = reward_model
        self.name = inner.name
        self.verifier = LearnedRewardVerifier(inner.verifier, reward_model, self.weights)
        self._rm = _Component(reward_model, lambda reference: reward_model_gold(self.prompt(reference)))

    def __getattr__(self, attribute: str) -> Any:
        if attribute == "inner":  # not yet set (e.g. while unpickling): no recursion
            raise AttributeError(attribute)
        return getattr(self.inner, attribute)  # tasks, demonstrations, corpus, members, answer keys ...

    @staticmethod
    def prompt(reference: dict[str, Any]) -> str:
        """The task's prompt, which the wrapper put in its reference."""
        if not isinstance(reference.get(PROMPT_KEY), str):
            raise ValueError(f"a learned reward needs the task's prompt in its reference (key {PROMPT_KEY!r}); "
                             "run the curate stage again with domain.reward set")
        return reference[PROMPT_KEY]

    def rows(self) -> list[dict[str, Any]]:
        """The domain's raw task rows, each reference holding its prompt."""
        return [_with_prompt(row) for row in source_rows(self.inner)]

    def generate_tasks(self) -> list[Task]:
        """The domain's tasks, each reference holding its prompt."""
        return [Task(t.task_id, t.domain, t.prompt, {**t.reference, PROMPT_KEY: t.prompt}, t.difficulty, t.split,
                     t.source) for t in self.inner.generate_tasks()]

    def gold(self, reference: dict[str, Any]) -> str:
        """The verifier's gold and the prompt, for `LearnedRewardVerifier`."""
        return json.dumps({"gold": self.inner.gold(reference), "prompt": self.prompt(reference)})

    def score(self, completion: str, reference: dict[str, Any]) -> Score:
        """Both components of one completion, in this process."""
        return self.verifier.score(completion, self.gold(reference))

    def verify_batch(self, completions: Sequence[str], references: Sequence[dict[str, Any]], verify: VerifyConfig
                     ) -> tuple[list[Score], dict[str, float]]:
        """Each component through its own pool (the reward model batched), combined per sample; the
        verifier's stats as they are and the reward model's as `rm_<stat>`."""
        from rlvr_factory.verification import verify_batch

        gold, gold_stats = verify_batch(self.inner, completions, references, verify)
        learned, rm_stats = verify_batch(self._rm, completions, references, verify)
        scores = [combine(v, r, self.weights) for v, r in zip(gold, learned)]
        return scores, {**gold_stats, **{f"rm_{k}": v for k, v in rm_stats.items()}}


def with_learned_reward(domain: Domain, reward: str | Mapping[str, float], reward_model: Mapping[str, Any]
                        ) -> LearnedRewardDomain:
    """`domain` scored by the learned reward `reward` asks for (`model`, or component weights) with
    the reward model `reward_model` describes (`RewardModelVerifier`'s arguments)."""
    if not reward_model or "path" not in reward_model:
        raise ValueError("domain.reward uses a reward model: set domain.reward_model.path (e.g. "
                         "data/06_models/reward_model, built by `kedro run --pipeline=reward_model`)")
    return LearnedRewardDomain(domain, parse_weights(reward), RewardModelVerifier(**reward_model))
