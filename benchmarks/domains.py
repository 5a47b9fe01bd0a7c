"""Every reference solution of GSM8K (train + test) and MATH-500 under its domain's reward.

    python benchmarks/domains.py [--workers 2] [--extraction 2000]

For each data set: rows loaded, rows valid under the task contract, reference solutions
scoring 1.0, and the time to score them all, (a) in this process (`domain.score`) and
(b) through the verifier pool the pipeline uses (`verification.verify_batch`), with the
ratio of (a) to (b). Generated extraction tasks (levels 1-4) are scored the same way.
Data come from $RLVR_SHARED_DATA (default: ../shared/data).
"""

from __future__ import annotations

import argparse
import time

from rlvr_factory.domains import get_domain, source_rows
from rlvr_factory.domains.curation import validate
from rlvr_factory.verification import VerifyConfig, verify_batch

SETS = {
    "gsm8k (train+test)": {"name": "gsm8k", "sources": {"train": "shared:gsm8k/train.jsonl",
                                                         "test": "shared:gsm8k/test.jsonl"}},
    "math-500": {"name": "math", "sources": {"test": "shared:math500/test.jsonl"}},
}


def measure(label: str, params: dict, workers: int) -> dict:
    domain = get_domain(params)
    rows = source_rows(domain)
    tasks, _ = validate(rows, {domain.name: domain})
    completions = [domain.demonstration(t) for t in tasks]
    start = time.perf_counter()
    local = [domain.score(c, t.reference) for c, t in zip(completions, tasks)]
    local_s = time.perf_counter() - start
    start = time.perf_counter()
    pooled, _ = verify_batch(domain, completions, [t.reference for t in tasks],
                             VerifyConfig(workers=workers, timeout_seconds=10.0, max_input_chars=100_000))
    pool_s = time.perf_counter() - start
    agree = sum(a.reward == b.reward for a, b in zip(local, pooled))
    return {"set": label, "rows": len(rows), "valid": len(tasks), "score_1": sum(s.reward == 1.0 for s in pooled),
            "agree": agree, "local_s": local_s, "pool_s": pool_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--extraction", type=int, default=2000, help="generated extraction tasks to score")
    args = parser.parse_args()
    sets = dict(SETS)
    sets["extraction (generated, L1-4)"] = {"name": "extraction", "splits": {"test": args.extraction},
                                            "levels": [1, 2, 3, 4]}
    results = [measure(label, params, args.workers) for label, params in sets.items()]
    print(f"{'data set':30} {'rows':>6} {'valid':>6} {'reward 1.0':>11} {'in-process s':>13} {'pool s':>8} "
          f"{'in-process/pool':>16}")
    for r in results:
        print(f"{r['set']:30} {r['rows']:6d} {r['valid']:6d} {r['score_1']:6d} ({r['score_1'] / r['valid']:.1%})"
              f" {r['local_s']:13.2f} {r['pool_s']:8.2f} {r['local_s'] / r['pool_s']:16.2f}")
        if r["agree"] != r["valid"]:
            print(f"  warning: in-process and pool rewards differ on {r['valid'] - r['agree']} items")


if __name__ == "__main__":
    main()
