"""A third-party domain written as one module, for the registry tests: is a number even or odd?"""

PARITY_MODULE = '''
"""Parity: a whole domain in one module (task source, reward; the default single-turn environment)."""
import random

from rlvr_factory.domains import Score, Task


class ParityVerifier:
    def quick_score(self, completion, gold):
        return None  # always the full check, so it runs in the pool's worker processes

    def score(self, completion, gold):
        said = completion.strip().lower()
        return Score(reward=float(said == gold), correct=said == gold, breakdown={"outcome": float(said == gold)})


class ParityDomain:
    name = "parity"

    def __init__(self, splits, seed=0):
        self.splits, self.seed, self.verifier = dict(splits), seed, ParityVerifier()

    def generate_tasks(self):
        numbers = random.Random(self.seed).sample(range(10_000), sum(self.splits.values()))
        tasks = []
        for split, count in self.splits.items():
            for i in range(count):
                n = numbers.pop()
                tasks.append(Task(f"parity-{split}-{i}", self.name, f"Is {n} even or odd?",
                                  {"answer": "even" if n % 2 == 0 else "odd"}, 1, split, "generated"))
        return tasks

    def gold(self, reference):
        return reference["answer"]

    def demonstration(self, task, worked=True):
        return task.reference["answer"]

    def score(self, completion, reference):
        return self.verifier.score(completion, self.gold(reference))

    def pretraining_corpus(self, size, seed, exclude):
        rng = random.Random(seed)
        numbers = (rng.randrange(10_000) for _ in iter(int, 1))
        texts = (f"Is {n} even or odd?\\n{'even' if n % 2 == 0 else 'odd'}" for n in numbers)
        return [t for t, _ in zip((t for t in texts if t.split("\\n")[0] not in exclude), range(size))]
'''


def install_module(directory, name="parity_domain"):
    """Write the parity domain as `<name>.py` into `directory`."""
    (directory / f"{name}.py").write_text(PARITY_MODULE)


def install_entry_point(directory, name="parity_domain"):
    """Declare the module's domain in the `rlvr_factory.domains` entry point group, as an installed
    distribution would (a dist-info directory next to the module)."""
    dist = directory / "parity_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: parity-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[rlvr_factory.domains]\nparity = {name}:ParityDomain\n")
