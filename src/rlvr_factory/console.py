"""The `rlvr` command line: verification of completions outside the pipeline, the sandbox, the reward audit,
the environment conformance kit and a checkpoint served on an OpenAI-compatible endpoint.

(Not named `cli.py`: Kedro loads a package's `cli.py` as its own project commands.)

    rlvr verify --domain D --input IN.jsonl|- --output OUT.jsonl|- [--resume] [--allow-errors]
                [--workers N] [--timeout S] [--strict] [--rounding] [--backend B]
    rlvr sandbox run [--backend B] [--timeout S] [--memory-mb M] [--json] -- CMD ARGS...
    rlvr audit [--env ENV | --domain D] [--params K=V,...] [--tasks N] [--workers N] [--output PATH]
    rlvr check-env [--env ENV | --domain D] [--params K=V,...] [--tasks N] [--turns N] [--timeout S] [--no-tokens]
    rlvr serve --model DIR [--host H] [--port P] [--record CALLS.jsonl] [--max-batch N] ...  (see serve.py)

Each `verify` input row is ``{"id": ..., "completion": "...", "reference": {...}}`` (extra fields
are kept) with the reference of a task of domain D, as in the `tasks` table: for math domains
``{"answer": "..."}``; for code a HumanEval task (``format: "humaneval"``, ``prompt``, ``test``,
``entry_point``) or an MBPP task (``format: "mbpp"``, ``test_list``, ``test_imports``); for
extraction ``{"fields", "values", "currency"}``; for a mix the member's reference with its
``domain`` tag. Each output row adds ``reward``, ``correct``, ``status`` and ``breakdown``, and a
``message`` when the status is not ``ok``. Rows come out in input order, each written as soon as
it and the rows before it are done. Any line that is not such a row (a line `json_lines` refuses:
invalid UTF-8, not JSON, nesting or numbers too big to read, ``NaN``; binary) or whose reference
the domain cannot read (a list, a number, null, a missing key) becomes an ``error`` row with a
message, and the others still run. `--output` is never the input file (compared with
`os.path.samefile`, so a symlink, a hard link or a ``..`` path is caught). `--resume` continues a
killed run: the rows already in the output are kept and their input lines skipped, after checking
that each kept row is its input line's row (its own fields, the verdict fields aside, hashed in
order against the input's first lines), so an output written from another input is refused before
anything is written. `--timeout` and `--workers` take finite numbers above 0. The exit status is 1
when any row is an ``error`` or ``infra_error`` (0 with `--allow-errors`), 2 for bad arguments or
unreadable files (one line on stderr).

`sandbox run` runs one command in a fresh sandbox (its stdin is empty) and prints its output and
exits with its exit code (124 when it timed out, 128+N when signal N killed it, 125 when the
sandbox failed); with ``--json`` it prints one JSON object instead of the output, whatever happened.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import math
import os
import sys
from collections import Counter, deque
from dataclasses import dataclass
from typing import IO, Any, Callable, Iterator, NoReturn, Sequence

from tqdm.auto import tqdm

from rlvr_factory import check_env, serve
from rlvr_factory.audit import command as audit_command
from rlvr_factory.json_lines import LineError, parse_line
from rlvr_factory.sandbox import BACKENDS, DEFAULT_BACKEND, Limits, RunResult, Sandbox, SandboxStartError
from rlvr_factory.verifiers.pool import Verifier, VerifierPool

SANDBOX_START_S = 10.0  # pool time allowed on top of a code check's own limit (sandbox start-up)
MAX_LINE_BYTES = 16 * 1024 * 1024  # a longer input line is an error row, not read into memory whole
RAW_CHARS = 200  # how much of an unreadable line its error row keeps
VERDICT_FIELDS = ("reward", "correct", "status", "breakdown", "message")  # what verification adds to a row
MIX = "mix"


class UsageError(Exception):
    """Bad arguments or an unreadable file: one line on stderr, exit status 2."""


# -- what each domain is checked with --------------------------------------------------------------


@dataclass(frozen=True)
class VerifyTarget:
    """How `rlvr verify` checks one domain's rows: its verifier, its gold string, the pool's time per check."""

    verifier: Verifier
    gold: Callable[[Any], str]  # raises on a reference it cannot read
    pool_timeout: float


def domain_summaries() -> dict[str, str]:
    """Every registered domain with the first line of its docstring."""
    from rlvr_factory.domains import domain_factory, known_domains

    return {name: (inspect.getdoc(domain_factory(name)) or "").split("\n")[0] for name in known_domains()}


def _verifier_options(verifier_class: type, args: argparse.Namespace) -> dict[str, Any]:
    """The command-line options that apply to a verifier class."""
    from rlvr_factory.verifiers.code import CodeVerifier
    from rlvr_factory.verifiers.math import MathVerifier

    if issubclass(verifier_class, MathVerifier):
        return {"strict": args.strict, "rounding": args.rounding}
    if issubclass(verifier_class, CodeVerifier):
        timeout = args.timeout or 3.0
        return {"backend": args.backend, "limits": {"timeout_s": timeout, "cpu_s": math.ceil(timeout)}}
    return {}


def _pool_timeout(verifier: Verifier, args: argparse.Namespace) -> float:
    from rlvr_factory.verifiers.code import CodeVerifier

    if isinstance(verifier, CodeVerifier):
        return verifier.limits.timeout_s + SANDBOX_START_S
    return args.timeout or 5.0


def verify_target(name: str, args: argparse.Namespace) -> VerifyTarget:
    """The verifier and gold of the registered domain `name`: its `verifier_class` with the command
    line's options, or (a domain without one) the domain built with its defaults. A mix routes each
    row to the registered domain its reference's tag names."""
    from rlvr_factory.domains import domain_factory, known_domains

    if name == MIX:
        return _mix_target([n for n in known_domains() if n != MIX], args)
    factory = domain_factory(name)
    verifier_class = getattr(factory, "verifier_class", None)
    if verifier_class is not None and isinstance(inspect.getattr_static(factory, "gold", None), staticmethod):
        verifier = verifier_class(**_verifier_options(verifier_class, args))
        gold = factory.gold
    else:
        try:
            domain = factory()
        except Exception as e:  # noqa: BLE001 - any failure means the same to the user
            raise UsageError(f"domain {name!r} cannot be built without its parameters ({type(e).__name__}: {e}); "
                             "give its class a `verifier_class` and a static `gold`") from None
        verifier, gold = domain.verifier, domain.gold
    return VerifyTarget(verifier, gold, _pool_timeout(verifier, args))


def _mix_target(names: list[str], args: argparse.Namespace) -> VerifyTarget:
    from rlvr_factory.domains.mix import TAG, MixVerifier, tag_gold

    members = {}
    for member in names:
        try:
            members[member] = verify_target(member, args)
        except UsageError:
            continue  # a plug-in that needs parameters cannot be a member here

    def gold(reference: Any) -> str:
        if not isinstance(reference, dict) or reference.get(TAG) not in members:
            raise ValueError(f"a mix reference needs a {TAG!r} tag naming one of {sorted(members)}")
        return tag_gold(reference[TAG], members[reference[TAG]].gold(reference))

    verifier = MixVerifier({k: t.verifier for k, t in members.items()})
    return VerifyTarget(verifier, gold, max(t.pool_timeout for t in members.values()))


# -- reading rows that may be anything ------------------------------------------------------------


@dataclass
class Row:
    """One input row: the object to write back, the pair to verify (None when the line is unreadable), why not."""

    data: dict[str, Any]
    pair: tuple[str, str] | None
    error: str = ""


def _lines(stream: IO[bytes]) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes, cut) of every non-blank line; a line over MAX_LINE_BYTES comes back cut to its
    start, and the rest of it is skipped unread."""
    number = 0
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        number += 1
        if len(line) > MAX_LINE_BYTES:
            while (rest := stream.readline(1 << 20)) and not rest.endswith(b"\n"):
                pass
            yield number, line[:RAW_CHARS], True
        elif line.strip():
            yield number, line.rstrip(b"\r\n"), False


def parse_row(number: int, raw: bytes, gold: Callable[[Any], str], cut: bool = False) -> Row:
    """The row a line holds, or an error row saying what is wrong with it (this never raises)."""
    shown = {"line": number, "raw": raw[:RAW_CHARS].decode("utf-8", "replace")}
    if cut:
        return Row(shown, None, f"line {number} is longer than {MAX_LINE_BYTES} bytes")
    try:
        row = parse_line(raw, number)
    except LineError as e:
        return Row(shown, None, str(e))
    if not isinstance(row, dict):
        return Row(shown, None, f"line {number} is a JSON {type(row).__name__}, not an object")
    completion = row.get("completion")
    if not isinstance(completion, str):
        return Row(row, None, "missing or non-string 'completion'")
    try:
        answer = gold(row.get("reference"))
    except Exception as e:  # noqa: BLE001 - whatever is wrong with a reference is this row's error
        detail = f"{type(e).__name__}: {e}" if not isinstance(e, ValueError) else str(e)
        return Row(row, None, f"invalid reference: {detail}"[:500])
    if not isinstance(answer, str):
        return Row(row, None, f"invalid reference: its gold answer is a {type(answer).__name__}, not a string")
    return Row(row, (completion, answer))


def _encode(row: dict[str, Any]) -> bytes:
    """The output line of a row; a row whose own fields cannot be written is replaced by a note saying so."""
    try:
        return (json.dumps(row) + "\n").encode()
    except (ValueError, TypeError, RecursionError) as e:
        kept = {k: row[k] for k in VERDICT_FIELDS if k in row}
        return (json.dumps({**kept, "unwritable_row": f"{type(e).__name__}: {e}"[:300]}) + "\n").encode()


# -- the verify command ---------------------------------------------------------------------------


def _open(path: str, mode: str, flag: str) -> IO[bytes]:
    if path == "-":
        return os.fdopen(os.dup((sys.stdin if "r" in mode else sys.stdout).fileno()), mode)
    try:
        return open(path, mode)
    except OSError as e:
        raise UsageError(f"cannot {'read' if 'r' in mode else 'write'} {flag} {path!r}: {e.strerror}") from None


def _refuse_own_input(args: argparse.Namespace) -> None:
    """Refuse an --output that is the --input file under another name (a symlink, a hard link, ``..``)."""
    if "-" in (args.input, args.output) or not os.path.exists(args.output):
        return
    try:
        same = os.path.samefile(args.input, args.output)
    except OSError:
        return  # an input that cannot be read is reported when it is opened
    if same:
        raise UsageError(f"--output {args.output!r} is the input file {args.input!r}: writing would destroy it; "
                         "give another --output")


def _fingerprint(row: dict[str, Any]) -> bytes:
    """What an output row keeps of its input row: the row without the verdict fields, as JSON."""
    if "unwritable_row" in row:
        return b"unwritable"
    try:
        return json.dumps({k: v for k, v in row.items() if k not in VERDICT_FIELDS}).encode()
    except (ValueError, TypeError, RecursionError):
        return b"unwritable"


@dataclass
class Finished:
    """The rows a killed run left in its output: their statuses, the digest of their input rows, and where
    the last whole row ends (a row cut short by the kill is dropped)."""

    statuses: Counter[str]
    digest: str
    end: int


def finished_rows(path: str) -> Finished:
    """The rows a killed run left in `path` (see `Finished`); the file is not changed."""
    statuses, digest, end = Counter(), hashlib.sha256(), 0
    if not os.path.exists(path):
        return Finished(statuses, digest.hexdigest(), end)
    with open(path, "rb") as out:
        for number, line in enumerate(out, start=1):
            if not line.endswith(b"\n"):
                break
            try:
                row = json.loads(line)
                statuses[row["status"]] += 1
            except (ValueError, KeyError, TypeError, RecursionError):
                raise UsageError(f"cannot resume: line {number} of {path!r} is not a row rlvr verify wrote") from None
            digest.update(_fingerprint(row) + b"\0")
            end += len(line)
    return Finished(statuses, digest.hexdigest(), end)


def _skip_finished(lines: Iterator[tuple[int, bytes, bool]], finished: Finished, args: argparse.Namespace,
                   gold: Callable[[Any], str]) -> int:
    """Read past the input lines whose rows `--output` already holds, checking that it holds exactly those
    rows (each row's own fields, verdicts aside, are its input line's); returns how many were skipped."""
    skip, digest = sum(finished.statuses.values()), hashlib.sha256()
    for _ in range(skip):
        line = next(lines, None)
        if line is None:
            raise UsageError(f"cannot resume: {args.output!r} holds {skip} rows, more than {args.input!r} has")
        digest.update(_fingerprint(parse_row(line[0], line[1], gold, line[2]).data) + b"\0")
    if digest.hexdigest() != finished.digest:
        raise UsageError(f"cannot resume: the {skip} rows in {args.output!r} were not written from {args.input!r} "
                         "(they differ from its first lines); give another --output, or drop --resume to start over")
    return skip


def verify_file(args: argparse.Namespace) -> int:
    """Verify every row of `args.input` into `args.output`; returns the exit status."""
    if args.resume and args.output == "-":
        raise UsageError("--resume needs --output to be a file")
    _refuse_own_input(args)
    target = verify_target(args.domain, args)
    finished = finished_rows(args.output) if args.resume else Finished(Counter(), "", 0)
    counts = Counter(finished.statuses)
    with _open(args.input, "rb", "--input") as src:
        lines = _lines(src)
        skip = _skip_finished(lines, finished, args, target.gold) if args.resume else 0
        if args.resume and os.path.exists(args.output):
            os.truncate(args.output, finished.end)  # drop a row the kill cut short
        _verify_lines(lines, target, args, counts, skip)
    print(json.dumps({"rows": sum(counts.values()), "resumed_after": skip,
                      **{s: counts[s] for s in ("ok", "timeout", "error", "infra_error")}}), file=sys.stderr)
    failed = counts["error"] + counts["infra_error"]
    if failed and not args.allow_errors:
        print(f"rlvr verify: {failed} rows could not be judged (status error or infra_error; see their 'message'); "
              "--allow-errors exits 0 anyway", file=sys.stderr)
        return 1
    return 0


def _verify_lines(lines: Iterator[tuple[int, bytes, bool]], target: VerifyTarget, args: argparse.Namespace,
                  counts: Counter[str], skip: int) -> None:
    """Verify the remaining input lines into `args.output` in input order, each row written when it and the
    rows before it are done; `counts` gains each row's status."""
    with _open(args.output, "ab" if args.resume else "wb", "--output") as dst, \
            VerifierPool(target.verifier, workers=args.workers, timeout=target.pool_timeout) as pool, \
            tqdm(desc="verify", unit="row", file=sys.stderr, mininterval=1.0, initial=skip) as bar:
        rows: deque[Row] = deque()

        def pairs() -> Iterator[tuple[str, str]]:
            for number, raw, cut in lines:
                row = parse_row(number, raw, target.gold, cut)
                rows.append(row)
                if row.pair is not None:
                    yield row.pair

        def write(row: Row) -> None:
            counts[row.data["status"]] += 1
            dst.write(_encode(row.data))
            dst.flush()
            bar.update(1)

        for score in pool.score_stream(pairs()):
            while rows[0].pair is None:
                write(_errored(rows.popleft()))
            row = rows.popleft()
            row.data.update(reward=score.reward, correct=score.correct, status=score.status, breakdown=score.breakdown)
            if score.message:
                row.data["message"] = score.message
            write(row)
        while rows:
            write(_errored(rows.popleft()))


def _errored(row: Row) -> Row:
    row.data.update(reward=0.0, correct=False, status="error", breakdown={}, message=row.error)
    return row


# -- the sandbox command --------------------------------------------------------------------------


def sandbox_run(args: argparse.Namespace) -> int:
    """Run one command in a fresh sandbox; print its output (or a JSON report) and return its exit status."""
    command = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not [a for a in command if a != "--"]:
        raise UsageError("sandbox run needs a command after --")
    limits = Limits(timeout_s=args.timeout, cpu_s=math.ceil(args.timeout), memory_mb=args.memory_mb)
    try:
        with Sandbox(args.backend, limits) as box:
            result = box.run(command)
    except SandboxStartError as e:
        result = RunResult(exit_code=None, stdout=b"", stderr=b"", timed_out=False, wall_s=0.0, backend=args.backend,
                           status="sandbox_error", message=str(e))
    if args.json:
        print(json.dumps(result.as_json()))
    else:
        sys.stdout.buffer.write(result.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(result.stderr)
        if result.status == "sandbox_error":
            sys.stderr.write(f"rlvr sandbox: {result.message}\n")
        sys.stderr.flush()
    if result.status == "timeout":
        return 124
    if result.status == "sandbox_error" or result.exit_code is None:
        return 125
    return 128 - result.exit_code if result.exit_code < 0 else result.exit_code


# -- the parser -----------------------------------------------------------------------------------


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose errors are one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number >= {minimum}, got {text!r}")
        return value

    return parse


def seconds(text: str) -> float:
    """An argparse type: a time limit, a finite number of seconds above 0 (``nan``, ``inf``, 0 and less refused)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text!r}")
    return value


def add_verify(commands: argparse._SubParsersAction) -> None:
    """The `verify` command."""
    domains = domain_summaries()
    width = max(map(len, domains))
    verify = commands.add_parser(
        "verify", help="score completions against reference answers or tests",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="domains:\n" + "\n".join(f"  {name:<{width}}  {text}" for name, text in domains.items()),
    )
    verify.add_argument("--domain", choices=sorted(domains), default="math", metavar="DOMAIN",
                        help="the domain whose verifier judges the rows (listed below; default math)")
    verify.add_argument("--input", required=True, help="JSONL of {id, completion, reference}; - for stdin")
    verify.add_argument("--output", required=True, help="JSONL written in input order; - for stdout; never --input")
    verify.add_argument("--resume", action="store_true",
                        help="keep the rows already in --output (written from this --input) and verify the lines after")
    verify.add_argument("--allow-errors", action="store_true",
                        help="exit 0 even when some rows are error or infra_error")
    verify.add_argument("--workers", type=at_least(1), default=2, help="verifier worker processes")
    verify.add_argument("--timeout", type=seconds, default=None,
                        help="seconds per check (math: symbolic check, default 5; code: the program's run, default 3)")
    verify.add_argument("--strict", action="store_true", help="math: only a boxed answer counts")
    verify.add_argument("--rounding", action="store_true",
                        help="math: a decimal rounded from an exact answer (1/3 as 0.333) counts as right")
    verify.add_argument("--backend", choices=sorted(BACKENDS), default=DEFAULT_BACKEND,
                        help="code: the sandbox backend ('process' isolates nothing)")
    verify.set_defaults(run=verify_file)


def add_sandbox(commands: argparse._SubParsersAction) -> None:
    """The `sandbox run` command."""
    sandbox = commands.add_parser("sandbox", help="run commands in a sandbox")
    sandbox_commands = sandbox.add_subparsers(dest="sandbox_command", required=True)
    run = sandbox_commands.add_parser("run", help="run one command in a fresh sandbox",
                                      usage="rlvr sandbox run [options] -- CMD ARGS...")
    run.add_argument("--backend", choices=sorted(BACKENDS), default=DEFAULT_BACKEND,
                     help="bubblewrap (default), docker, or process (rlimits only: not isolation)")
    run.add_argument("--timeout", type=seconds, default=10.0, help="wall-clock seconds before the command is killed")
    run.add_argument("--memory-mb", type=at_least(16), default=1024, help="address-space limit per process")
    run.add_argument("--json", action="store_true", help="print one JSON object instead of the output")
    run.add_argument("argv", nargs=argparse.REMAINDER, help="the command and its arguments, after --")
    run.set_defaults(run=sandbox_run)


# Each command adds its parser (setting `run`, called with the parsed arguments, returning the exit
# status; a `UsageError` it raises is one line on stderr and exit status 2).
COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {"verify": add_verify, "sandbox": add_sandbox,
                                                                        "audit": audit_command.add_parser,
                                                                        "check-env": check_env.add_parser,
                                                                        "serve": serve.add_parser}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="rlvr", description="RLVR Factory command line.")
    commands = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS.values():
        add(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (UsageError, audit_command.AuditUsageError) as e:
        print(f"rlvr {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
