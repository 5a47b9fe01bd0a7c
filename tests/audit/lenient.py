"""A third-party domain whose reward has one of the classic flaws the reward audit must catch (or none).

    flaw: substring  pays len(reference) / len(answer) for any answer that contains the reference
          truthy     pays any non-empty answer
          prefix     pays any prefix of the reference
          eval       evaluates the answer as Python in the verifier's own process (while claiming to parse)
          none       exact comparison: nothing to catch
"""

import random

from rlvr_factory.domains import Score, Task

FLAWS = ("substring", "truthy", "prefix", "eval", "none")


class LenientVerifier:
    isolation = "parse"  # what it claims; `eval` is the lie the audit's canary exposes

    def __init__(self, flaw: str) -> None:
        self.flaw = flaw

    def quick_score(self, completion, gold):
        return None  # always the full check, in the pool's worker processes

    def score(self, completion, gold):
        answer = completion.strip()
        if self.flaw == "eval":
            try:
                paid = float(eval(answer) == int(gold))  # the flaw under test
            except Exception:  # noqa: BLE001
                paid = 0.0
        elif self.flaw == "substring":
            paid = 1.0 if answer == gold else len(gold) / len(answer) if gold in answer else 0.0
        elif self.flaw == "truthy":
            paid = float(bool(answer))
        elif self.flaw == "prefix":
            paid = float(bool(answer) and gold.startswith(answer))
        else:
            paid = float(answer == gold)
        return Score(reward=paid, correct=paid == 1.0, breakdown={"outcome": paid})


class LenientDomain:
    name = "lenient"

    def __init__(self, flaw: str = "none", splits=None, seed: int = 0):
        if flaw not in FLAWS:
            raise ValueError(f"flaw must be one of {FLAWS}")
        self.splits = dict(splits or {"train": 8, "validation": 2, "test": 2})
        self.seed, self.verifier = seed, LenientVerifier(flaw)

    def generate_tasks(self):
        rng = random.Random(self.seed)
        tasks = []
        for split, count in self.splits.items():
            for i in range(count):
                a, b = rng.randrange(100, 1000), rng.randrange(100, 1000)
                tasks.append(Task(f"lenient-{split}-{i}", self.name, f"What is {a} + {b}?", {"answer": str(a + b)},
                                  1, split, "generated"))
        return tasks

    def gold(self, reference):
        return reference["answer"]

    def demonstration(self, task, worked=True):
        return task.reference["answer"]

    def score(self, completion, reference):
        return self.verifier.score(completion, self.gold(reference))

    def pretraining_corpus(self, size, seed, exclude):
        return []
