"""Scoring throughput (answers/s) before and after the move of third-party scorers into the scoring sandbox.

    python benchmarks/scoring.py [--workers 2] [--answers 200]

Three ways to score the same answers, in the same run, through a `VerifierPool` of `--workers` workers:

- before: the verifier's full check in the pool worker itself, as every check ran before the trust boundary
  (model output evaluated by Math-Verify or a reasoning-gym scorer in a long-lived worker on the host);
- after: the pipeline's path now: the full check in the scoring sandbox, one forked process per answer;
- quick: what the caller's process decides without any worker (exact reasoning-gym families; a math answer
  the string and numeric checks settle).

Answer sets: each scored reasoning-gym family (its references and a wrong answer per task), MATH-500's reference
solutions (`$RLVR_SHARED_DATA`, skipped when absent) and the arithmetic domain's symbolic checks. Each set is
scored at `--answers` and at four times as many, so the table shows how the cost grows with the work.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from rlvr_factory.verifiers.math import MathVerifier
from rlvr_factory.verifiers.pool import VerifierPool

DATA = Path(os.environ.get("RLVR_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data"))


class InWorker:
    """The design before the trust boundary: a verifier's full check run in the pool worker itself."""

    isolation = "parse"

    def __init__(self, verifier) -> None:
        self.verifier = verifier

    def quick_score(self, completion: str, gold: str):
        return self.verifier.quick_score(completion, gold)

    def score(self, completion: str, gold: str):
        return self.verifier.full_check(completion, gold)


def reasoning_gym_pairs(count: int) -> list[tuple[str, str]]:
    """References and wrong answers of the scored families (the ones that still reach a scorer)."""
    import reasoning_gym

    from rlvr_factory.verifiers.reasoning_gym import entry_literal, make_gold
    from rlvr_factory.verifiers.reasoning_gym_rules import SCORED

    from rlvr_factory.domains.reasoning_gym import reference_answer

    families = sorted(SCORED)
    pairs: list[tuple[str, str]] = []
    per_family = max(1, count // (2 * len(families)))
    for family in families:
        for item in reasoning_gym.create_dataset(family, size=per_family, seed=7):
            answer = reference_answer(family, item)
            if answer is None:
                continue
            gold = make_gold(family, answer, entry_literal(item))
            wrong = answer[:-1] or "?"  # a prefix: wrong, but in the family's own form
            pairs += [(f"<answer>{answer}</answer>", gold), (f"<answer>{wrong}</answer>", gold)]
    return (pairs * (count // len(pairs) + 1))[:count]


def math500_pairs(count: int) -> list[tuple[str, str]]:
    path = DATA / "math500" / "test.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.open()]
    pairs = [(r["solution"], r["answer"]) for r in rows]
    return (pairs * (count // len(pairs) + 1))[:count]


def symbolic_pairs(count: int) -> list[tuple[str, str]]:
    """Answers the quick checks cannot settle: polynomials in other forms."""
    return [(f"\\boxed{{x^2+{2 * i}x+{i * i}}}", f"(x+{i})^2") for i in range(1, count + 1)]


def rate(verifier, pairs: list[tuple[str, str]], workers: int) -> tuple[float, int]:
    """Answers per second through a warm pool (start-up not counted), and how many were scored correct."""
    with VerifierPool(verifier, workers=workers, timeout=10.0) as pool:
        pool.score_many(pairs[:4])
        start = time.perf_counter()
        scores = pool.score_many([(c + " ", g) for c, g in pairs])  # not the warm-up's cache entries
        return len(pairs) / (time.perf_counter() - start), sum(s.correct for s in scores)


def quick_rate(verifier, pairs: list[tuple[str, str]]) -> float:
    start = time.perf_counter()
    decided = sum(verifier.quick_score(c, g) is not None for c, g in pairs)
    return decided / max(time.perf_counter() - start, 1e-9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--answers", type=int, default=200)
    args = parser.parse_args()
    from rlvr_factory.verifiers.reasoning_gym import ReasoningGymVerifier

    sets = {"reasoning-gym (scored families)": (ReasoningGymVerifier(), reasoning_gym_pairs),
            "MATH-500 references": (MathVerifier(), math500_pairs),
            "math, symbolic only": (MathVerifier(), symbolic_pairs)}
    print(f"{'answers':34} {'n':>5} {'before/s':>9} {'after/s':>8} {'after/before':>13} {'same verdicts':>14}")
    for label, (verifier, make) in sets.items():
        for count in (args.answers, 4 * args.answers):
            pairs = make(count)
            if not pairs:
                print(f"{label:34} (no data: set RLVR_SHARED_DATA)")
                break
            before, correct_before = rate(InWorker(verifier), pairs, args.workers)
            after, correct_after = rate(verifier, pairs, args.workers)
            print(f"{label:34} {len(pairs):5d} {before:9.1f} {after:8.1f} {after / before:13.2f} "
                  f"{'yes' if correct_before == correct_after else f'{correct_before} vs {correct_after}':>14}")
    print("quick path (caller's process, no worker):")
    for label, (verifier, make) in sets.items():
        pairs = make(args.answers)
        if pairs:
            print(f"  {label:32} {quick_rate(verifier, pairs):10.0f} decided answers/s")


if __name__ == "__main__":
    main()
