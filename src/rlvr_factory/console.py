"""The `rlvr` command line: verification of completions outside the pipeline.

(Not named `cli.py`: Kedro loads a package's `cli.py` as its own project commands.)

    rlvr verify --domain math --input IN.jsonl --output OUT.jsonl [--workers N] [--timeout S]

Each input row is ``{"id": ..., "completion": "...", "reference": {"answer": "..."}}``
(extra fields are kept); each output row adds ``reward``, ``correct``, ``status`` and
``breakdown``. Rows come out in input order; a malformed row gets ``status: "error"``
and a ``message``, and the others still run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Iterator, Sequence

from tqdm.auto import tqdm

from rlvr_factory.verifiers.math import MathVerifier
from rlvr_factory.verifiers.pool import VerifierPool

VERIFIERS = {"math": MathVerifier, "arithmetic": MathVerifier}
CHUNK = 2048  # rows verified per pool call; bounds memory on large inputs


def _parse_row(line: str) -> tuple[dict[str, Any], tuple[str, str] | None, str | None]:
    """(row, (completion, gold) or None, error message or None) for one input line."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return {"raw": line.rstrip("\n")}, None, f"invalid JSON: {exc}"
    if not isinstance(row, dict):
        return {"raw": row}, None, "a row must be a JSON object"
    completion, reference = row.get("completion"), row.get("reference")
    if not isinstance(completion, str):
        return row, None, "missing or non-string 'completion'"
    if not isinstance(reference, dict) or not isinstance(reference.get("answer"), (str, int, float)):
        return row, None, "missing 'reference.answer'"
    return row, (completion, str(reference["answer"])), None


def _chunks(lines: Iterator[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        if line.strip():
            chunk.append(line)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def verify_file(args: argparse.Namespace) -> int:
    """Verify every row of `args.input` into `args.output`; returns the exit status."""
    verifier = VERIFIERS[args.domain](strict=args.strict)
    counts = {"ok": 0, "timeout": 0, "error": 0, "infra_error": 0}
    with open(args.input) as src, open(args.output, "w") as dst, \
            VerifierPool(verifier, workers=args.workers, timeout=args.timeout) as pool, \
            tqdm(desc="verify", unit="row", file=sys.stderr, mininterval=1.0) as bar:
        for chunk in _chunks(iter(src), CHUNK):
            parsed = [_parse_row(line) for line in chunk]
            scores = iter(pool.score_many([pair for _, pair, _ in parsed if pair is not None]))
            for row, pair, error in parsed:
                if pair is None:
                    row.update(reward=0.0, correct=False, status="error", breakdown={}, message=error)
                else:
                    score = next(scores)
                    row.update(reward=score.reward, correct=score.correct, status=score.status,
                               breakdown=score.breakdown)
                counts[row["status"]] += 1
                dst.write(json.dumps(row) + "\n")
            bar.update(len(chunk))
    print(json.dumps({"rows": sum(counts.values()), **counts}), file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="RLVR Factory command line.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="score completions against reference answers")
    verify.add_argument("--domain", choices=sorted(VERIFIERS), default="math")
    verify.add_argument("--input", required=True, help="JSONL of {id, completion, reference: {answer}}")
    verify.add_argument("--output", required=True, help="JSONL written in input order")
    verify.add_argument("--workers", type=int, default=2, help="verifier worker processes")
    verify.add_argument("--timeout", type=float, default=5.0, help="seconds per symbolic check")
    verify.add_argument("--strict", action="store_true", help="only a boxed answer counts")
    verify.set_defaults(run=verify_file)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.workers < 1 or args.timeout <= 0:
        build_parser().error("--workers must be >= 1 and --timeout > 0")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
