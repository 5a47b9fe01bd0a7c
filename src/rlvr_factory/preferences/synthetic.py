"""The embedded default: preference pairs generated from a domain's own tasks, no download.

For each task of the chosen splits, the worked, correct demonstration is preferred to a flawed
one (`domain.flawed_demonstration(task, flaw, rng)`; the arithmetic domain offers an unexplained
answer, a wrong unexplained answer, a worked solution with a slip, right steps with a wrong
answer). A seeded `label_noise` share of the train pairs is swapped, as annotators disagree;
held-out pairs keep the true preference, so held-out accuracy measures agreement with it.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field

from rlvr_factory.domains.base import Domain, Task, member
from rlvr_factory.preferences.contract import PreferencePair, finite_number

NOISY_SPLIT = "train"  # the split whose labels are noised


@dataclass(frozen=True)
class SyntheticPairs:
    seed: int = 0  # flaws, their errors and the noise
    splits: tuple[str, ...] = ("train", "validation")  # task splits that get pairs (each pair keeps its task's split)
    flaws: dict[str, float] = field(default_factory=lambda: {
        "direct": 1.0, "direct_wrong": 1.0, "slip": 1.0, "wrong_final": 1.0})  # flaw -> weight of the rejected kind
    label_noise: float = 0.1  # share of train pairs with chosen and rejected swapped
    max_pairs: dict[str, int] = field(default_factory=dict)  # split -> at most this many pairs (the first tasks)

    def __post_init__(self) -> None:
        if not 0.0 <= finite_number(self.label_noise, "label_noise") < 0.5:
            raise ValueError(f"label_noise must be in [0, 0.5), got {self.label_noise}")
        weights = [finite_number(w, f"flaws.{flaw}") for flaw, w in self.flaws.items()]
        if not weights or min(weights) < 0 or sum(weights) <= 0:
            raise ValueError(f"flaws needs non-negative weights with a positive sum, got {self.flaws}")


def synthetic_rows(domain: Domain, tasks: list[Task], config: SyntheticPairs) -> list[dict]:
    """One raw pair row per task of `config.splits`: worked demonstration vs a flawed one."""
    rng = random.Random(config.seed)
    flaws, weights = list(config.flaws), list(config.flaws.values())
    counts: dict[str, int] = {}
    rows = []
    for task in tasks:
        if task.split not in config.splits or counts.get(task.split, 0) >= config.max_pairs.get(task.split, len(tasks)):
            continue
        owner = member(domain, task.domain)
        if not callable(getattr(owner, "flawed_demonstration", None)):
            raise ValueError(f"domain {task.domain!r} cannot generate preference pairs (no flawed_demonstration); "
                             "give preference data with `preferences.sources`")
        flaw = rng.choices(flaws, weights)[0]
        chosen, rejected = owner.demonstration(task, worked=True), owner.flawed_demonstration(task, flaw, rng)
        flipped = task.split == NOISY_SPLIT and rng.random() < config.label_noise
        if flipped:
            chosen, rejected = rejected, chosen
        counts[task.split] = counts.get(task.split, 0) + 1
        rows.append({**asdict(PreferencePair(
            pair_id=f"{task.task_id}-pair", prompt=task.prompt, chosen=chosen, rejected=rejected, domain=task.domain,
            split=task.split, source=f"generated:seed={config.seed}:{task.task_id}" + (":flipped" if flipped else ""),
            kind=flaw,
        )), "margin": None})  # a raw row says "no margin" with None
    return rows
