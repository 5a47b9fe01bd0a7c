"""Code verification: extract the program, and judge it in the sandbox, the tests and the program apart.

Nothing of a check runs in the verifier's process but parsing: the completion, the reference
and the tests are parsed here (`ast.parse`, inputs bounded by `MAX_SOURCE_CHARS`; a reference
too long, too deep or not Python is an `error` score), and everything that evaluates them runs in
the sandbox (`rlvr_factory.sandbox`). There the loaded program is the judge (`code_judge.py`, the
standard library only): it forks the candidate's program into a child process of its own before
any test text reaches the sandbox, then runs the task's set-up and tests itself, with every use of
the candidate's function (`candidate(...)` in HumanEval's `check`, the function's name in MBPP's
asserts) replaced by a call into the child that returns plain values rebuilt with exact types
(anything else stays in the child as an opaque reference). The verdict comes back as one plain
dict, one round trip per check. So a data row's tests, set-up and prompt can touch nothing of the
host (they run in the sandbox, under its limits, and each check is a fresh process); and exiting
early, `__eq__` overrides and disguised `int`/`str`/`list` subclasses, monkeypatching builtins /
`assert` helpers / the harness / unittest / pytest, fake pass markers, `atexit` and signal tricks
change nothing in the judge, whose process the candidate's child cannot read, trace or write to
(the judge is non-dumpable, the child keeps no descriptor but its own pipes, and the judge imports
nothing from a directory the sandbox can write). A child that kills or stops the judge leaves no
verdict: the check fails (or times out), and is marked `hack_suspected`.

Every `assert` statement of the tests is one test: it passes if every execution of it
passed. The outcome is 1 when the test code ran to completion with at least one assert and no
failure; `process` is the fraction of assert statements that passed. Hacks recognised in the
program's text or behaviour set `hack_suspected` in the breakdown.

A reference (the `gold` string is its JSON) is a HumanEval task (``format: "humaneval"``,
``prompt``, ``test`` defining ``check(candidate)``, ``entry_point``) or an MBPP task
(``format: "mbpp"``, ``test_list`` of assert lines, optional ``test_imports``, ``test_setup``).
"""

from __future__ import annotations

import ast
import builtins
import functools
import inspect
import json
import logging
import re
import signal
from dataclasses import dataclass, field
from typing import Any, Iterator

from rlvr_factory.sandbox import (
    CandidateError,
    Limits,
    ProgramEnded,
    Sandbox,
    SandboxError,
    SandboxStartError,
)
from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers import code_judge
from rlvr_factory.verifiers.isolation import OWN
from rlvr_factory.verifiers.score import Score

logger = logging.getLogger(__name__)

FORMATS = ("humaneval", "mbpp")
# Per program: memory x processes bounds what one sandbox can take from the host (here 4 GB).
DEFAULT_LIMITS = {"timeout_s": 3.0, "cpu_s": 3, "memory_mb": 512, "nproc": 8, "file_size_mb": 16, "open_files": 64,
                  "output_bytes": 65536}
MAX_SOURCE_CHARS = 1_000_000  # a longer reference, or text to parse, is refused before it is parsed
MAX_PRELOADED_MODULES = 64  # modules the task's code imports that the judge imports before the candidate starts
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_STOP = ("\nclass ", "\ndef ", "\n#", "\n@", "\nprint(", "\nif ", "\n```", "\nassert ")  # human-eval's, and fences


def parse(source: str, what: str) -> ast.Module:
    """`source` parsed (never evaluated), bounded in size; ValueError says why it is not a program."""
    if len(source) > MAX_SOURCE_CHARS:
        raise ValueError(f"{what} is {len(source)} characters, more than the {MAX_SOURCE_CHARS} a check parses")
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise ValueError(f"{what} is not valid Python: {type(e).__name__}: {e}") from None


@dataclass(frozen=True)
class CodeTask:
    """What a code reference asks for: the format, the tests and the function(s) they call."""

    format: str
    tests: str  # HumanEval: the test module (defines check); MBPP: the assert lines, one per line
    entry_point: str
    names: tuple[str, ...]  # the functions the tests call that the candidate's program must define
    asserts: int  # assert statements in the tests
    modules: tuple[str, ...] = ()  # what the prompt, set-up and tests import
    prompt: str = ""
    setup: str = ""  # MBPP: test imports and set-up code, run before the asserts

    @classmethod
    def from_reference(cls, reference: dict[str, Any]) -> CodeTask:
        """Validate a reference dict (parsing its code, never running it); ValueError says what is wrong."""
        kind = reference.get("format")
        if kind == "humaneval":
            missing = [k for k in ("prompt", "test", "entry_point") if not isinstance(reference.get(k), str)]
            if missing:
                raise ValueError(f"a humaneval reference needs string fields {missing}")
            _bounded(reference["prompt"], reference["test"])
            asserts, modules = _survey([parse(reference["prompt"], "the prompt")], [parse(reference["test"], "the test")])
            return cls("humaneval", reference["test"], reference["entry_point"], (reference["entry_point"],),
                       asserts, modules, reference["prompt"])
        if kind == "mbpp":
            tests = reference.get("test_list")
            if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
                raise ValueError("an mbpp reference needs a non-empty list of assert strings 'test_list'")
            imports, setup_code = reference.get("test_imports") or [], reference.get("test_setup") or ""
            if not isinstance(imports, list) or not all(isinstance(i, str) for i in imports) or not isinstance(
                    setup_code, str):
                raise ValueError("an mbpp reference's 'test_imports' must be a list of strings, 'test_setup' a string")
            setup = "\n".join([*imports, setup_code])
            _bounded(setup, *tests)
            setup_tree = parse(setup, "the test set-up")
            lines = [parse(t, f"test {i}") for i, t in enumerate(tests)]
            names = _called_names(lines, setup_tree)
            entry = reference.get("entry_point") or names[0]
            asserts, modules = _survey([setup_tree], lines)
            return cls("mbpp", "\n".join(tests), entry, tuple(names), asserts, modules, reference.get("prompt", ""),
                       setup)
        raise ValueError(f"reference 'format' must be one of {FORMATS}, got {kind!r}")

    @classmethod
    def from_gold(cls, gold: str) -> CodeTask:
        if len(gold) > 2 * MAX_SOURCE_CHARS:
            raise ValueError(f"a code gold of {len(gold)} characters is too long")
        try:
            reference = json.loads(gold)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"a code gold must be the reference's JSON: {type(e).__name__}: {e}") from e
        if not isinstance(reference, dict):
            raise ValueError("a code gold must be a JSON object")
        return cls.from_reference(reference)

    def candidate_names(self) -> list[str]:
        """The names the tests call that the candidate's program must define."""
        return list(self.names)

    def spec(self, diagnose: bool = False) -> dict[str, Any]:
        """What the judge in the sandbox is sent (`code_judge.judge`)."""
        return {"format": self.format, "setup": self.prompt if self.format == "humaneval" else self.setup,
                "tests": self.tests, "names": list(self.names), "entry_point": self.entry_point,
                "diagnose": diagnose}


def _bounded(*texts: str) -> None:
    size = sum(map(len, texts))
    if size > MAX_SOURCE_CHARS:
        raise ValueError(f"the reference's code is {size} characters, more than the {MAX_SOURCE_CHARS} a check parses")


def _survey(code: list[ast.Module], tests: list[ast.Module]) -> tuple[int, tuple[str, ...]]:
    """The tests' assert statements, and the modules the code and the tests import (absolute imports;
    `from m import x` also names `m.x`): both are statements, so expressions are never walked."""
    asserts, names = 0, []
    for tree, counted in [*((t, 0) for t in code), *((t, 1) for t in tests)]:
        for node in _statements(tree.body):
            if isinstance(node, ast.Assert):
                asserts += counted
            elif isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names += [node.module, *(f"{node.module}.{a.name}" for a in node.names if a.name != "*")]
    return asserts, tuple(dict.fromkeys(names))[:MAX_PRELOADED_MODULES]


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of `body`, and of the bodies, handlers and cases inside it."""
    todo = list(reversed(body))
    while todo:
        statement = todo.pop()
        yield statement
        for name in statement._fields:
            inner = getattr(statement, name)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                todo += reversed(inner)
            elif isinstance(inner, list) and inner and isinstance(inner[0], (ast.excepthandler, ast.match_case)):
                todo += [s for part in reversed(inner) for s in reversed(part.body)]


def _called_names(tests: list[ast.Module], setup: ast.Module) -> list[str]:
    """Names the MBPP asserts call that neither builtins, the set-up nor the tests themselves define."""
    defined = set(dir(builtins))
    for node in ast.walk(setup):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    names: list[str] = []
    for tree in tests:
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name not in defined and name not in stored and name not in names:
                    names.append(name)
    if not names:  # the tests call a function named like a builtin (MBPP's `sum`): the first call is it
        calls = [n for n in ast.walk(tests[0]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        if not calls:
            raise ValueError("the mbpp tests call no function the program could define")
        names = [calls[0].func.id]
    return names


# -- extraction -----------------------------------------------------------------------------------


def _defines(source: str, names: list[str]) -> bool:
    try:
        tree = parse(source, "the program")
    except ValueError:
        return False
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    top |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    top |= {(a.asname or a.name) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    return all(name in top for name in names)


def extract_program(completion: str, task: CodeTask) -> str | None:
    """The program a completion states: its fenced code block, or (HumanEval) the function body
    continuing the prompt, or the completion as code; None when none parses and defines the function."""
    names = task.candidate_names()
    humaneval = task.format == "humaneval"
    prefix = task.prompt + "\n" if humaneval else ""  # a whole function after the prompt keeps its imports
    blocks = _FENCE.findall(completion)
    candidates = [prefix + b for b in blocks if _defines(b, names)]
    if humaneval:
        candidates += [task.prompt + b for b in blocks if b[:1].isspace()]  # a fenced body
        if not blocks and completion.strip():
            cut = min([completion.find(s) for s in _STOP if s in completion] or [len(completion)])
            whole = [prefix + completion] if _defines(completion, names) else []
            candidates += whole + [task.prompt + completion, task.prompt + completion[:cut]]
    elif not blocks:
        candidates.append(completion)
    return next((p for p in candidates if _defines(p, names)), None)


# -- hack recognition -----------------------------------------------------------------------------

_SUSPECT_CALLS = {
    "exit", "quit", "sys.exit", "os._exit", "os.abort", "os.kill", "os.killpg", "os.fork", "os.setsid",
    "atexit.register", "signal.signal", "signal.alarm", "signal.setitimer", "sys._getframe", "sys.settrace",
    "sys.setprofile", "inspect.currentframe", "inspect.stack", "gc.get_objects", "gc.get_referrers",
    "ctypes.CDLL", "ctypes.memmove", "socket.socket", "socket.create_connection", "subprocess.run",
    "subprocess.Popen", "os.system", "setattr",
}
_SUSPECT_MODULES = {"atexit", "signal", "ctypes", "socket", "subprocess", "unittest", "pytest", "_pytest", "gc",
                    "inspect", "builtins", "multiprocessing", "threading", "pty", "resource"}
_SUSPECT_NAMES = {"__builtins__", "conftest", "__import__", "__eq__", "__ne__", "__bool__", "__del__",
                  "__class__", "__subclasses__", "__globals__", "__code__"}
_SUSPECT_TEXT = re.compile(r"/etc/|/proc/|\.ssh|shadow|conftest|\bPASS(?:ED)?\b|all tests pass|test_?\w*\.py", re.I)


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def hack_signs(program: str) -> list[str]:
    """What in a program's text looks like an attempt on the judge rather than a solution.

    Exiting, signals, atexit, process and frame tricks, builtins/unittest/pytest patching,
    equality overrides, host paths and pass markers; empty for ordinary solutions.
    """
    try:
        tree = parse(program, "the program")
    except ValueError:
        return []
    signs: set[str] = set()
    modules = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    modules |= {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    for node in ast.walk(tree):  # monkeypatching: assigning into an imported module or sys.modules
        for target in getattr(node, "targets", [getattr(node, "target", None)]) if isinstance(
                node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) else []:
            root = _dotted(target.value if isinstance(target, ast.Subscript) else target)
            if isinstance(target, (ast.Attribute, ast.Subscript)) and root.split(".")[0] in modules:
                signs.add(f"patch:{root}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in _SUSPECT_CALLS:
            signs.add(f"call:{_dotted(node.func)}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            imported = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            signs |= {f"import:{m}" for m in imported if m.split(".")[0] in _SUSPECT_MODULES}
        elif isinstance(node, ast.Raise) and _dotted(getattr(node.exc, "func", node.exc) or ast.Name("")) in (
                "SystemExit", "KeyboardInterrupt"):
            signs.add("raise:exit")
        elif isinstance(node, ast.FunctionDef) and node.name in _SUSPECT_NAMES:
            signs.add(f"def:{node.name}")
        elif isinstance(node, ast.Name) and node.id in _SUSPECT_NAMES:
            signs.add(f"name:{node.id}")
        elif isinstance(node, ast.Attribute) and node.attr in _SUSPECT_NAMES:
            signs.add(f"attr:{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _SUSPECT_TEXT.search(node.value):
            signs.add("text:host-path-or-pass-marker")
    return sorted(signs)


# -- the judge ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ended:
    """How a check ended before its tests did: the candidate's child, or the judge itself (`judge`)."""

    exit_code: int | None  # negative: killed by that signal
    timed_out: bool  # past the wall-clock deadline or the CPU-time limit
    judge: bool = False  # the judge's own process ended: it gave no verdict

    @classmethod
    def of(cls, exit_code: int | None, timed_out: bool, judge: bool = False) -> Ended:
        return cls(exit_code, timed_out or exit_code == -signal.SIGXCPU, judge)


@dataclass
class Verdict:
    """What the judge found (`code_judge.Verdict.report`, checked here), or why it found nothing."""

    total: int  # assert statements in the tests
    passed: dict[int, bool] = field(default_factory=dict)  # assert statement -> every run of it passed
    completed: bool = False  # the test code ran to its end
    load_error: tuple[str, str] | None = None  # the program did not load: (exception kind, message)
    ended: Ended | None = None
    exits: int = 0  # calls (or the load) that tried to exit the process
    disguised: int = 0  # values returned with a type that pretends to be a value
    failures: dict[int, str] = field(default_factory=dict)  # assert statement -> what its call gave (diagnose)
    setup_error: str = ""  # the task's own set-up (or prompt) raised in the judge: no test ran
    judge_error: str = ""  # the judge failed (it raised, or its report was malformed): no verdict
    stderr: str = ""  # the sandbox's stderr, when the program ended early and a diagnosis was asked for

    @property
    def outcome(self) -> bool:
        return self.completed and bool(self.passed) and all(self.passed.values()) and self.ended is None

    @classmethod
    def from_report(cls, report: Any, task: CodeTask) -> Verdict:
        """The judge's report on `task`, checked value by value; ValueError when it is not what a judge sends."""
        if type(report) is not dict or set(report) != _REPORT_KEYS:
            raise ValueError("the judge's report is not the expected dict")
        passed, failures, ended, total = report["passed"], report["failures"], report["ended"], task.asserts
        indexes = total + task.tests.count("\n") + 1  # MBPP: a line without an assert is a test too
        _expect(type(passed) is dict and all(type(k) is int and 0 <= k < indexes and type(v) is bool
                                            for k, v in passed.items()), "passed")
        _expect(type(failures) is dict and all(type(k) is int and type(v) is str for k, v in failures.items()),
                "failures")
        _expect(ended is None or (type(ended) is dict and set(ended) == {"exit_code", "timed_out"}
                                  and type(ended["exit_code"]) is int and type(ended["timed_out"]) is bool), "ended")
        load_error = report["load_error"]
        _expect(load_error is None or (type(load_error) is list and len(load_error) == 2
                                       and all(type(x) is str for x in load_error)), "load_error")
        _expect(all(type(report[k]) is int and report[k] >= 0 for k in ("exits", "disguised")), "counts")
        _expect(type(report["completed"]) is bool and type(report["setup_error"]) is str, "flags")
        return cls(total, passed, report["completed"], tuple(load_error) if load_error else None,
                   Ended.of(ended["exit_code"], ended["timed_out"]) if ended else None, report["exits"],
                   report["disguised"], failures, report["setup_error"])


_REPORT_KEYS = {"passed", "completed", "load_error", "ended", "exits", "disguised", "failures", "setup_error"}


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"the judge's report has a malformed {what!r}")


@functools.cache
def judge_preload() -> dict[str, str]:
    """What a sandbox for code checks preloads (`Sandbox(preload=...)`): the judge, `code_judge.py`."""
    return {code_judge.MODULE: inspect.getsource(code_judge)}


def judge_budget(limits: Limits) -> float:
    """Seconds the candidate gets in the judge: the run's wall-clock limit less the time the judge needs
    to end it and report (the sandbox ends the judge itself at the limit)."""
    return limits.timeout_s - min(0.1, 0.05 * limits.timeout_s)


def judge_program(sandbox: Sandbox, program: str, task: CodeTask, limits: Limits, diagnose: bool = False) -> Verdict:
    """Judge `program` on `task` in `sandbox`: load the judge, which starts the program in a child of
    its own, and call it once for the verdict. SandboxError when the judge cannot load there (the
    caller retries in a fresh sandbox)."""
    if code_judge.MODULE not in sandbox.preload:
        raise ValueError("this sandbox has no code judge: start it with CodeVerifier.sandbox_options()")
    boot = code_judge.BOOT.format(program=program, budget_s=judge_budget(limits), imports=task.modules)
    with sandbox.load(boot, limits) as judge:
        if judge.load_error is not None:
            raise SandboxError(f"the code judge did not load: {judge.load_error[0]}: {judge.load_error[1]}")
        try:
            report = judge.call("judge", task.spec(diagnose))
        except ProgramEnded as e:  # killed or stopped (by the candidate, or at the deadline): no verdict
            return Verdict(task.asserts, ended=Ended.of(e.result.exit_code, e.result.timed_out, judge=True))
        except CandidateError as e:
            return Verdict(task.asserts, judge_error=f"the judge raised {e.kind}: {e.message}")
        try:
            verdict = Verdict.from_report(report, task)
        except ValueError as e:
            return Verdict(task.asserts, judge_error=str(e))
        if diagnose and verdict.ended is not None:
            verdict.stderr = judge.stop().stderr.decode("utf-8", "replace")
    return verdict


# -- the verifier ---------------------------------------------------------------------------------


class CodeVerifier:
    """Reward for code: outcome (all tests pass) and process (fraction of tests passed), run in a sandbox.

    `quick_score` extracts the program in the caller's process (0 when there is none);
    `score` runs it in this process's sandbox (started on first use, reused afterwards).
    A sandbox that cannot start raises `InfraError` (retried by the scheduler, then reported as
    `infra_error`); a candidate over its time limit scores 0 with status `timeout`.
    """

    isolation = OWN  # the program and its tests run in its own sandbox

    def __init__(
        self,
        backend: str = "bubblewrap",
        limits: dict[str, Any] | Limits | None = None,
        workspace_mb: int = 16,
        outcome_weight: float = 1.0,
        process_weight: float = 0.0,
        format_weight: float = 0.0,
        max_program_chars: int = 50_000,
        backend_options: dict[str, Any] | None = None,
    ) -> None:
        self.backend = backend  # bubblewrap | docker | process (process isolates nothing)
        self.limits = Limits.of({**DEFAULT_LIMITS, **(limits.as_dict() if isinstance(limits, Limits) else limits or {})})
        self.workspace_mb = workspace_mb  # size of the sandbox's tmpfs workspace
        self.outcome_weight = outcome_weight  # reward share for passing every test
        self.process_weight = process_weight  # reward share for the fraction of tests passed
        self.format_weight = format_weight  # reward share for stating a program at all
        self.max_program_chars = max_program_chars  # longer completions: status error
        self.backend_options = dict(backend_options or {})
        self._sandbox: Sandbox | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sandbox": None}  # a sandbox belongs to the process that started it

    def sandbox_options(self) -> dict[str, Any]:
        """The keyword arguments of a `Sandbox` (or `SandboxPool`) that runs this verifier's checks."""
        return {"backend": self.backend, "limits": self.limits, "workspace_mb": self.workspace_mb,
                "preload": judge_preload(), **self.backend_options}

    def sandbox(self) -> Sandbox:
        """This process's sandbox (not started until it is first needed)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(**self.sandbox_options())
        return self._sandbox

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()

    def _score(self, outcome: float, process: float, extracted: bool, status: str = "ok", message: str = "",
               **extra: float) -> Score:
        outcome = outcome if status == "ok" else 0.0
        breakdown = {"outcome": outcome, "process": process, "format": float(extracted), "tests": 0.0, "passed": 0.0,
                     "hack_suspected": 0.0, "load_error": 0.0, **extra}  # the same keys on every Score
        reward = (self.outcome_weight * outcome + self.process_weight * process
                  + self.format_weight * breakdown["format"])
        return Score(reward=reward, correct=outcome == 1.0, status=status, breakdown=breakdown, message=message)

    def _prepare(self, completion: str, gold: str) -> tuple[Score | None, CodeTask | None, str | None]:
        if len(completion) > self.max_program_chars:
            message = f"the completion is longer than max_program_chars={self.max_program_chars}"
            return self._score(0.0, 0.0, False, status="error", message=message), None, None
        try:
            task = CodeTask.from_gold(gold)
        except (ValueError, SyntaxError) as e:
            logger.warning("bad code reference: %s", e)
            return self._score(0.0, 0.0, False, status="error", message=f"invalid code reference: {e}"), None, None
        program = extract_program(completion, task)
        if program is None:
            signs = hack_signs(completion)
            return self._score(0.0, 0.0, False, hack_suspected=float(bool(signs))), task, None
        return None, task, program

    def quick_score(self, completion: str, gold: str) -> Score | None:
        """0 when no program can be extracted (or the input is malformed); None when the tests must run."""
        try:
            return self._prepare(completion, gold)[0]
        except Exception as e:  # noqa: BLE001 - a verifier never raises on model output
            return self._score(0.0, 0.0, False, status="error", message=f"{type(e).__name__}: {e}")

    def score(self, completion: str, gold: str) -> Score:
        """Run the tests against the completion's program in this process's sandbox; raises
        `InfraError` when no sandbox starts (the scheduler retries it, then reports `infra_error`)."""
        try:
            sandbox = self.sandbox()
        except SandboxStartError as e:
            raise InfraError(f"no sandbox: {e}") from e
        return self.score_in(sandbox, completion, gold)

    def score_in(self, sandbox: Sandbox, completion: str, gold: str) -> Score:
        """Like `score`, in the given sandbox (e.g. one lent by a `SandboxPool`)."""
        quick, task, program = self._prepare(completion, gold)
        if quick is not None:
            return quick
        signs = hack_signs(program[len(task.prompt):] if task.format == "humaneval" else program)
        for attempt in range(2):  # a sandbox lost mid-run is retried once in a fresh one
            try:
                verdict = judge_program(sandbox, program, task, self.limits)
                break
            except SandboxStartError as e:
                raise InfraError(f"the sandbox did not start: {e}") from e
            except SandboxError as e:
                logger.warning("the sandbox was lost during a check (attempt %d): %s", attempt + 1, e)
        else:  # lost twice: the program takes its sandbox down
            return self.lost_sandbox_score(task, "the check took its sandbox down twice")
        return self.verdict_score(verdict, signs)

    def lost_sandbox_score(self, task: CodeTask, message: str, passed_before: int | None = None) -> Score:
        """The score of a check whose program took its sandbox down (twice): nothing, and a suspected hack."""
        extra = {} if passed_before is None else {"passed_before": float(passed_before)}
        return self._score(0.0, 0.0, True, message=message, hack_suspected=1.0, tests=float(task.asserts),
                           passed=0.0, **extra)

    def verdict_score(self, verdict: Verdict, signs: list[str], passed_before: int | None = None) -> Score:
        """The reward for what the judge found, with `signs` (from `hack_signs`) marking a suspected hack.
        With `passed_before` (the asserts the starting program passed), `process` is the improvement
        over it (`improvement`) and the breakdown records it."""
        passed = sum(verdict.passed.values())
        process = 1.0 if verdict.outcome else passed / max(verdict.total, 1)
        extra = {} if passed_before is None else {"passed_before": float(passed_before)}
        if passed_before is not None:
            process = improvement(passed, passed_before, verdict.total)
        ended = verdict.ended
        exited = (ended is not None and not ended.judge and ended.exit_code == 0) or verdict.exits > 0
        judge_lost = ended is not None and ended.judge and not ended.timed_out  # only the program would kill it
        hack = bool(signs) or exited or verdict.disguised > 0 or judge_lost
        status, message = ("timeout" if ended is not None and ended.timed_out else "ok"), verdict.judge_error
        if verdict.setup_error:
            status, message = "error", f"the task's test set-up failed in the sandbox: {verdict.setup_error}"
        elif judge_lost:
            message = f"the judge was ended before its verdict (exit code {ended.exit_code})"
        return self._score(
            float(verdict.outcome), process, True, status=status, message=message,
            tests=float(verdict.total), passed=float(passed), hack_suspected=float(hack),
            load_error=float(bool(verdict.load_error)), **extra,
        )


def improvement(passed: int, passed_before: int, total: int) -> float:
    """How much of what the start left failing now passes: (passed - passed_before) / (total - passed_before),
    clipped to [0, 1]; 0 when nothing was left to pass."""
    if total <= passed_before:
        return 0.0
    return min(1.0, max(0.0, (passed - passed_before) / (total - passed_before)))
