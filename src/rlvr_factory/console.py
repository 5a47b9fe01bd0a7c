"""The `rlvr` command line: verification of completions outside the pipeline, and the sandbox.

(Not named `cli.py`: Kedro loads a package's `cli.py` as its own project commands.)

    rlvr verify --domain math --input IN.jsonl --output OUT.jsonl [--workers N] [--timeout S]
    rlvr verify --domain code --input IN.jsonl --output OUT.jsonl [--workers N] [--timeout S]
    rlvr sandbox run [--backend B] [--timeout S] [--memory-mb M] [--json] -- CMD ARGS...

Each `verify` input row is ``{"id": ..., "completion": "...", "reference": {...}}`` (extra
fields are kept): for math the reference is ``{"answer": "..."}``; for code a HumanEval task
(``format: "humaneval"``, ``prompt``, ``test``, ``entry_point``) or an MBPP task (``format:
"mbpp"``, ``test_list``, ``test_imports``). Each output row adds ``reward``, ``correct``,
``status`` and ``breakdown``. Rows come out in input order; a malformed row gets ``status:
"error"`` and a ``message``, and the others still run.

`sandbox run` runs one command in a fresh sandbox (its stdin is empty) and prints its output and
exits with its exit code (124 when it timed out, 128+N when signal N killed it, 125 when no
sandbox could start); with ``--json`` it prints one JSON object instead of the output.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from tqdm.auto import tqdm

from rlvr_factory.sandbox import BACKENDS, DEFAULT_BACKEND, Limits, Sandbox, SandboxError
from rlvr_factory.verifiers.pool import Verifier, VerifierPool

CHUNK = 2048  # rows verified per pool call; bounds memory on large inputs
SANDBOX_START_S = 10.0  # pool time allowed on top of a code check's own limit (sandbox start-up)


def _math_gold(reference: Any) -> str:
    if not isinstance(reference, dict) or not isinstance(reference.get("answer"), (str, int, float)):
        raise ValueError("missing 'reference.answer'")
    return str(reference["answer"])


def _math_verifier(args: argparse.Namespace) -> Verifier:
    from rlvr_factory.verifiers.math import MathVerifier  # imported on use: Math-Verify loads slowly

    return MathVerifier(strict=args.strict)


def _code_verifier(args: argparse.Namespace) -> Verifier:
    from rlvr_factory.verifiers.code import CodeVerifier

    timeout = args.timeout or 3.0
    return CodeVerifier(backend=args.backend, limits={"timeout_s": timeout, "cpu_s": math.ceil(timeout)})


def _code_gold(reference: Any) -> str:
    from rlvr_factory.domains.code import CodeDomain
    from rlvr_factory.verifiers.code import CodeTask

    if not isinstance(reference, dict):
        raise ValueError("'reference' must be an object holding a humaneval or mbpp task")
    try:
        CodeTask.from_reference(reference)
    except (ValueError, SyntaxError) as e:
        raise ValueError(f"invalid code reference: {e}") from e
    return CodeDomain.gold(reference)


@dataclass(frozen=True)
class _Domain:
    """How `rlvr verify` checks one domain: its verifier, its gold string, and the pool's time per check."""

    verifier: Callable[[argparse.Namespace], Verifier]
    gold: Callable[[Any], str]  # raises ValueError saying what is wrong with a reference
    pool_timeout: Callable[[argparse.Namespace], float]


_MATH = _Domain(_math_verifier, _math_gold, lambda a: a.timeout or 5.0)
VERIFY_DOMAINS = {
    "math": _MATH,
    "arithmetic": _MATH,
    "code": _Domain(_code_verifier, _code_gold, lambda a: (a.timeout or 3.0) + SANDBOX_START_S),
}


def _parse_row(line: str, gold: Callable[[Any], str]) -> tuple[dict[str, Any], tuple[str, str] | None, str | None]:
    """(row, (completion, gold) or None, error message or None) for one input line."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        return {"raw": line.rstrip("\n")}, None, f"invalid JSON: {exc}"
    if not isinstance(row, dict):
        return {"raw": row}, None, "a row must be a JSON object"
    completion = row.get("completion")
    if not isinstance(completion, str):
        return row, None, "missing or non-string 'completion'"
    try:
        return row, (completion, gold(row.get("reference"))), None
    except ValueError as e:
        return row, None, str(e)


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
    domain = VERIFY_DOMAINS[args.domain]
    counts = {"ok": 0, "timeout": 0, "error": 0, "infra_error": 0}
    with open(args.input) as src, open(args.output, "w") as dst, \
            VerifierPool(domain.verifier(args), workers=args.workers, timeout=domain.pool_timeout(args)) as pool, \
            tqdm(desc="verify", unit="row", file=sys.stderr, mininterval=1.0) as bar:
        for chunk in _chunks(iter(src), CHUNK):
            parsed = [_parse_row(line, domain.gold) for line in chunk]
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


def sandbox_run(args: argparse.Namespace) -> int:
    """Run one command in a fresh sandbox; print its output (or a JSON summary) and return its exit status."""
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    limits = Limits(timeout_s=args.timeout, cpu_s=math.ceil(args.timeout), memory_mb=args.memory_mb)
    try:
        with Sandbox(args.backend, limits) as box:
            result = box.run(command)
    except SandboxError as e:
        print(f"rlvr sandbox: {e}", file=sys.stderr)
        return 125
    if args.json:
        print(json.dumps(result.as_json()))
    else:
        sys.stdout.buffer.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr)
        sys.stderr.flush()
    if result.timed_out:
        return 124
    code = result.exit_code if result.exit_code is not None else 125
    return 128 - code if code < 0 else code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlvr", description="RLVR Factory command line.")
    commands = parser.add_subparsers(dest="command", required=True)
    verify = commands.add_parser("verify", help="score completions against reference answers or tests")
    verify.add_argument("--domain", choices=sorted(VERIFY_DOMAINS), default="math")
    verify.add_argument("--input", required=True, help="JSONL of {id, completion, reference}")
    verify.add_argument("--output", required=True, help="JSONL written in input order")
    verify.add_argument("--workers", type=int, default=2, help="verifier worker processes")
    verify.add_argument("--timeout", type=float, default=None,
                        help="seconds per check (math: symbolic check, default 5; code: the program's run, default 3)")
    verify.add_argument("--strict", action="store_true", help="math: only a boxed answer counts")
    verify.add_argument("--backend", choices=sorted(BACKENDS), default=DEFAULT_BACKEND,
                        help="code: the sandbox backend ('process' isolates nothing)")
    verify.set_defaults(run=verify_file)
    sandbox = commands.add_parser("sandbox", help="run commands in a sandbox")
    sandbox_commands = sandbox.add_subparsers(dest="sandbox_command", required=True)
    run = sandbox_commands.add_parser("run", help="run one command in a fresh sandbox",
                                      usage="rlvr sandbox run [options] -- CMD ARGS...")
    run.add_argument("--backend", choices=sorted(BACKENDS), default=DEFAULT_BACKEND,
                     help="bubblewrap (default), docker, or process (rlimits only: not isolation)")
    run.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds before the command is killed")
    run.add_argument("--memory-mb", type=int, default=1024, help="address-space limit per process")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of the output")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    run.set_defaults(run=sandbox_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "verify" and (args.workers < 1 or (args.timeout is not None and args.timeout <= 0)):
        parser.error("--workers must be >= 1 and --timeout > 0")
    if args.command == "sandbox":
        if args.timeout <= 0 or args.memory_mb < 16:
            parser.error("--timeout must be > 0 and --memory-mb >= 16")
        if not [a for a in args.argv if a != "--"]:
            parser.error("sandbox run needs a command after --")
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
