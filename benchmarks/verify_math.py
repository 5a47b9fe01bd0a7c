"""Verifications per second on MATH-500: our verifier pool vs a plain Math-Verify loop.

    python benchmarks/verify_math.py [--workers 2]

Each MATH-500 reference solution is verified against its own answer, in the same run,
by (a) `VerifierPool(MathVerifier())` with its fast paths and worker processes and
(b) a single-process loop over Math-Verify's `parse`/`verify`. Prints a table and the ratio.
Data come from $RLVR_SHARED_DATA (default: ../shared/data).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from math_verify import parse, verify

from rlvr_factory.verifiers.math import MathVerifier
from rlvr_factory.verifiers.pool import VerifierPool

DATA = Path(os.environ.get("RLVR_SHARED_DATA", Path(__file__).resolve().parents[1] / "../shared/data"))


def load_pairs() -> list[tuple[str, str]]:
    path = DATA / "math500/test.jsonl"
    if not path.exists():
        raise SystemExit(f"MATH-500 not found at {path}; set RLVR_SHARED_DATA")
    rows = [json.loads(line) for line in path.open()]
    return [(r["solution"], r["answer"]) for r in rows]


def plain_math_verify(pairs: list[tuple[str, str]]) -> int:
    return sum(bool(verify(parse(f"${gold}$"), parse(completion))) for completion, gold in pairs)


def our_pool(pairs: list[tuple[str, str]], workers: int) -> int:
    with VerifierPool(MathVerifier(), workers=workers, timeout=5.0) as pool:
        return sum(s.correct for s in pool.score_many(pairs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    pairs = load_pairs()
    rows = []
    for name, run in (("math-verify loop (1 process)", plain_math_verify),
                      (f"rlvr VerifierPool ({args.workers} workers)", lambda p: our_pool(p, args.workers))):
        start = time.perf_counter()
        correct = run(pairs)
        seconds = time.perf_counter() - start
        rows.append((name, len(pairs), correct, seconds, len(pairs) / seconds))
    print(f"{'verifier':<34} {'pairs':>6} {'correct':>8} {'seconds':>8} {'verif/s':>9}")
    for name, n, correct, seconds, rate in rows:
        print(f"{name:<34} {n:>6} {correct:>8} {seconds:>8.2f} {rate:>9.1f}")
    print(f"speed-up (ours / math-verify): {rows[1][4] / rows[0][4]:.2f}x")


if __name__ == "__main__":
    main()
