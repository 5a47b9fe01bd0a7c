"""The code judge: a task's tests run inside the sandbox, the candidate's program in a child process.

Standard library only. The code verifier (`verifiers/code.py`) starts its sandboxes with this module
preloaded (`Sandbox(preload=...)`: the agent runs it once, before its template starts, so every run
finds it imported) and loads `BOOT` for each check, filled in with the candidate's program. At load,
before any test text has reached the sandbox, `start` serves the program in a child process of its
own (`agent.start_child`: the judge is made non-dumpable, so a same-user `ptrace` or
`/proc/<pid>/mem|fd` is refused; the child keeps no descriptor but its stdio and two pipes; the judge
keeps on its import path only directories nothing in the sandbox can write, so no file the candidate
writes is ever imported here). So the candidate's memory never holds the tests. Then one call of
`judge` brings the task and returns the verdict as a plain dict. Inside the sandbox the agent
(`sandbox/agent.py`) is the running script, `__main__`.

`judge` runs the task's set-up and tests with every `assert` counted; each use of the candidate's
function is a call to the child whose reply is decoded by `safe_loads` (plain values, and `Remote`
references for everything else: nothing of the candidate's choosing is built here). With
`diagnose`, a failed `assert call == expected` says what the call gave (`describe`: a repr built no
longer than it is shown, for any value).

The candidate shares a user with the judge, so it can still kill or stop it: then no verdict comes
back, and the host counts the check as failed (or timed out), never as passed.
"""

from __future__ import annotations

import ast
import builtins
import collections
import decimal
import fractions
import time

try:  # inside the sandbox the agent is the running script
    from __main__ import ChildGone, ChildProgram, Remote, start_child
except ImportError:  # imported on the host, where its pure parts are tested
    from rlvr_factory.sandbox.agent import ChildGone, ChildProgram, Remote, start_child

MODULE = "rlvr_code_judge"  # this module's name in the sandbox
BOOT = f"from {MODULE} import judge, start\nstart({{program!r}}, {{budget_s!r}}, {{imports!r}})\n"  # loaded per check
EXIT_KINDS = ("SystemExit", "KeyboardInterrupt", "GeneratorExit")
DESCRIBE_CHARS = 80  # what a failed call gave, as shown
MESSAGE_CHARS = 120  # an exception's message, as shown
INT_BITS = 3000  # a longer int is shown by its size (its digits take quadratic time)

_child: ChildProgram | None = None  # this check's candidate, started at load


def start(program: str, budget_s: float, imports: tuple[str, ...]) -> None:
    """At load: import `imports` (what the task's code imports), then serve `program` in a child process
    that has `budget_s` seconds (see `agent.start_child`)."""
    global _child
    _child = start_child(program, time.monotonic() + budget_s, tuple(imports))


class CandidateGone(BaseException):
    """The candidate's program ended mid-test; no later test can pass (not an Exception: tests can't swallow it)."""


# -- the tests ----------------------------------------------------------------------------------------


def judge(task: dict) -> dict:
    """Run the task's tests against the candidate `start` served; the verdict as plain values.

    `task`: format (humaneval | mbpp), setup (HumanEval: the prompt), tests, names (the candidate's
    functions the tests call), entry_point, diagnose (say what each failed comparison's call gave).
    """
    verdict = Verdict(_child, bool(task["diagnose"]))
    _run(verdict, task)
    report = verdict.report()
    _child.kill()  # the verdict is in; the sandbox reaps it
    return report


def _run(verdict: Verdict, task: dict) -> None:
    """The task's set-up, then its tests, in a namespace where the candidate's functions are proxies."""
    namespace = {"__name__": "__judge__", "_rlvr_": verdict}
    try:
        exec(compile(task["setup"], "<test setup>", "exec"), namespace)
    except Exception as e:  # noqa: BLE001 - the task's own code is wrong: no test can run
        verdict.setup_error = f"{type(e).__name__}: {_message(e)}"
        return
    for name in task["names"]:
        namespace[name] = Proxy(name, verdict)
    run = _run_humaneval if task["format"] == "humaneval" else _run_mbpp
    try:
        run(verdict, namespace, task)
    except (CandidateGone, Exception):  # noqa: BLE001 - the candidate ended, or the test code failed: not passed
        pass


def _run_humaneval(verdict: Verdict, namespace: dict, task: dict) -> None:
    """The test module defines `check(candidate)`; it is called with the candidate's function."""
    tree, _ = instrument(task["tests"], 0, verdict.diagnose)
    if not verdict.child.loaded():
        return
    exec(compile(tree, "<tests>", "exec"), namespace)
    namespace["check"](namespace[task["entry_point"]])
    verdict.completed = True


def _run_mbpp(verdict: Verdict, namespace: dict, task: dict) -> None:
    """Each line runs on its own (assert `k` is line `k`); a line that raises outside its assert fails."""
    lines = []
    for index, line in enumerate(task["tests"].splitlines()):
        tree, count = instrument(line, index, verdict.diagnose)
        if not count:  # not an assert: it passes if it does not raise
            at = _Place(tree.body[-1] if tree.body else None)
            tree.body.append(_record(index, at(ast.Constant, True), at))
        lines.append(tree)
    if not verdict.child.loaded():
        return
    for index, tree in enumerate(lines):
        try:
            exec(compile(tree, "<test>", "exec"), namespace)
        except Exception:  # noqa: BLE001 - a test line that errors outside its assert fails
            verdict.record(index, False)
    verdict.completed = True


def _message(error: BaseException) -> str:
    try:
        return str(error)[:MESSAGE_CHARS]
    except Exception:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


class Verdict:
    """What running the tests found; `report` is the plain dict the host receives."""

    def __init__(self, child: ChildProgram, diagnose: bool) -> None:
        self.child = child  # the candidate's program
        self.diagnose = diagnose  # say what each failed comparison's left side was
        self.passed: dict[int, bool] = {}  # assert statement -> every run of it passed
        self.failures: dict[int, str] = {}  # assert statement -> what happened the first time it failed
        self.completed = False  # the test code ran to its end
        self.exits = 0  # calls that tried to exit the process
        self.disguised = 0  # values returned with a type that pretends to be a value
        self.setup_error = ""  # the task's own set-up raised: no test ran
        self._seen: dict[int, tuple[str, object]] = {}  # assert -> ("got", left side) | ("raised", exception)
        self._raised: tuple[BaseException, str, str] | None = None  # the last exception a call raised, as sent

    def record(self, index: int, ok: bool) -> None:
        """One execution of assert `index` passed (`ok`) or failed."""
        self.passed[index] = self.passed.get(index, True) and ok
        if not ok and self.diagnose and index not in self.failures:
            self.failures[index] = self._what_happened(index)

    def begin(self, index: int) -> None:
        """An execution of assert `index` (diagnosed) starts."""
        self._seen.pop(index, None)

    def left(self, index: int, value: object) -> object:
        """The left side of assert `index`'s comparison was `value`."""
        self._seen[index] = ("got", value)
        return value

    def failed(self, index: int, error: BaseException) -> bool:
        """Assert `index` raised `error` (while evaluating its left side, unless that was recorded)."""
        self._seen.setdefault(index, ("raised", error))
        return False

    def call(self, name: str, args: tuple, kwargs: dict) -> object:
        """`name(*args, **kwargs)` in the candidate's child: its value (list, dict and set arguments get its
        in-place changes); the exception it raised, as the builtin of that name; CandidateGone if it ended."""
        try:
            reply = self.child.call(name, args, kwargs)
        except ChildGone:
            raise CandidateGone from None
        except Exception as e:  # noqa: BLE001 - an argument the wire cannot carry
            raise TypeError(f"cannot pass {name}'s arguments to the candidate: {e}") from None
        if reply[0] == "raise":
            raise self._raised_by(reply[1], reply[2][:500])
        _copy_back(args, reply[2])
        self.disguised += _has_disguise(reply[1])
        return reply[1]

    def _raised_by(self, kind: str, message: str) -> BaseException:
        """The exception a call's failure raises in the tests (an exit attempt becomes a RuntimeError)."""
        if kind in EXIT_KINDS:
            self.exits += 1
            exception: BaseException = RuntimeError(f"the candidate tried to exit: {message}")
        else:
            builtin = getattr(builtins, kind, None)
            exception = builtin(message) if isinstance(builtin, type) and issubclass(builtin, Exception) else \
                RuntimeError(f"{kind}: {message}")
        self._raised = (exception, kind, message)
        return exception

    def _what_happened(self, index: int) -> str:
        what, value = self._seen.pop(index, ("failed", None))
        if what == "got":
            return f"got {describe(value)}"
        if what == "raised" and self._raised is not None and value is self._raised[0]:
            return f"raised {self._raised[1]}: {self._raised[2][:MESSAGE_CHARS]}"
        if what == "raised":
            return f"raised {type(value).__name__}"
        return "failed"

    def report(self) -> dict:
        """The verdict as plain values (no failure is described once the candidate is gone)."""
        child = self.child
        load_exit = child.load_error is not None and child.load_error[0] in EXIT_KINDS
        gone = child.ended is not None or child.load_error is not None
        return {"passed": self.passed, "completed": self.completed,
                "load_error": list(child.load_error) if child.load_error else None, "ended": child.ended,
                "exits": self.exits + load_exit, "disguised": self.disguised,
                "failures": {} if gone else self.failures, "setup_error": self.setup_error}


def _copy_back(sent: tuple, returned: object) -> None:
    """Apply the candidate's in-place changes to list, dict and set arguments."""
    if type(returned) is not tuple or len(returned) != len(sent):
        return
    for original, after in zip(sent, returned):
        if type(original) is list and type(after) is list:
            original[:] = after
        elif type(original) in (dict, set) and type(after) is type(original):
            original.clear()
            original.update(after)


def _has_disguise(value: object, depth: int = 0) -> bool:
    if type(value) is Remote:
        return value.disguised
    if depth < 3 and type(value) in (list, tuple, set, frozenset):
        return any(_has_disguise(v, depth + 1) for v in value)
    if depth < 3 and type(value) is dict:
        return any(_has_disguise(v, depth + 1) for v in value.values())
    return False


class Proxy:
    """Stands for one of the candidate's functions in the tests: each call runs in the child."""

    def __init__(self, name: str, verdict: Verdict) -> None:
        self.__name__ = name
        self.verdict = verdict

    def __call__(self, *args: object, **kwargs: object) -> object:
        return self.verdict.call(self.__name__, args, kwargs)


# -- counting asserts ---------------------------------------------------------------------------------

_LOAD, _STORE = ast.Load(), ast.Store()


def instrument(source: str, first: int = 0, diagnose: bool = False) -> tuple[ast.Module, int]:
    """Test code with each `assert test` rewritten into: evaluate test (any Exception fails it), record
    the result as assert number `first`, `first + 1`, ...; (module, number of asserts). With `diagnose`,
    the left side of a single comparison is kept, to say what it was if the test fails."""
    tree = ast.parse(source)
    count = [first]
    tree.body = _rewrite(tree.body, count, diagnose)
    return tree, count[0] - first


def _rewrite(body: list[ast.stmt], count: list[int], diagnose: bool) -> list[ast.stmt]:
    """The statements with each assert rewritten, inside compound statements too (in field order)."""
    out: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, ast.Assert):
            out += _check(statement.test, count[0], diagnose, _Place(statement))
            count[0] += 1
            continue
        for name in statement._fields:
            inner = getattr(statement, name)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(statement, name, _rewrite(inner, count, diagnose))
            elif isinstance(inner, list) and inner and isinstance(inner[0], (ast.excepthandler, ast.match_case)):
                for part in inner:
                    part.body = _rewrite(part.body, count, diagnose)
        out.append(statement)
    return out


class _Place:
    """Builds AST nodes at the place of `where` (line 1 without it): what compile needs of a new node."""

    def __init__(self, where: ast.stmt | None) -> None:
        self.at = ({"lineno": where.lineno, "col_offset": where.col_offset, "end_lineno": where.end_lineno,
                    "end_col_offset": where.end_col_offset} if where is not None else
                   {"lineno": 1, "col_offset": 0, "end_lineno": 1, "end_col_offset": 0})

    def __call__(self, kind: type, *fields: object) -> ast.AST:
        return kind(*fields, **self.at)

    def name(self, name: str, store: bool = False) -> ast.Name:
        return self(ast.Name, name, _STORE if store else _LOAD)

    def verdict(self, method: str, *args: ast.expr) -> ast.Call:
        """`_rlvr_.method(*args)`: a call of the `Verdict` the test code records into."""
        return self(ast.Call, self(ast.Attribute, self.name("_rlvr_"), method, _LOAD), list(args), [])


def _check(test: ast.expr, index: int, diagnose: bool, at: _Place) -> list[ast.stmt]:
    """try: _rlvr_ok_ = bool(test) / except Exception: _rlvr_ok_ = False / _rlvr_.record(index, _rlvr_ok_),
    or its diagnosed form, which keeps a single comparison's left side (`Verdict.left`, `.failed`)."""
    number = at(ast.Constant, index)
    failed: ast.expr = at(ast.Constant, False)
    before: list[ast.stmt] = []
    if diagnose and isinstance(test, ast.Compare) and len(test.ops) == 1:
        test = at(ast.Compare, at.verdict("left", number, test.left), test.ops, test.comparators)
        failed = at.verdict("failed", number, at.name("_rlvr_error_"))
        before = [at(ast.Expr, at.verdict("begin", number))]
    ok = at(ast.Assign, [at.name("_rlvr_ok_", store=True)], at(ast.Call, at.name("bool"), [test], []))
    handler = at(ast.ExceptHandler, at.name("Exception"), "_rlvr_error_",
                 [at(ast.Assign, [at.name("_rlvr_ok_", store=True)], failed)])
    return [*before, at(ast.Try, [ok], [handler], [], []), _record(index, at.name("_rlvr_ok_"), at)]


def _record(index: int, ok: ast.expr, at: _Place) -> ast.stmt:
    return at(ast.Expr, at.verdict("record", at(ast.Constant, index), ok))


# -- describing a value -------------------------------------------------------------------------------

_BRACKETS = {list: ("[", "]"), tuple: ("(", ")"), set: ("{", "}"), frozenset: ("frozenset({", "})"),
             dict: ("{", "}"), collections.deque: ("deque([", "])"), collections.OrderedDict: ("OrderedDict({", "})"),
             collections.Counter: ("Counter({", "})"), collections.defaultdict: ("defaultdict({", "})")}
_MAPPINGS = (dict, collections.OrderedDict, collections.Counter, collections.defaultdict)


def describe(value: object, limit: int = DESCRIBE_CHARS) -> str:
    """`repr(value)` cut to `limit` characters, built no further than that, for any value: a huge int is
    named by its size, an object of any other than the plain types by its type. Never raises."""
    out: list[str] = []
    try:
        _describe_into(value, out, [limit])
    except Exception:  # noqa: BLE001 - a value that cannot be shown is said to be one
        return "<a value that cannot be shown>"
    return "".join(out)[:limit]


def _describe_into(value: object, out: list[str], room: list[int]) -> None:
    """Append `value`'s repr to `out` while `room[0]` characters are left (nesting stops with the room)."""
    if room[0] <= 0:
        return
    kind = type(value)
    if kind in _BRACKETS:
        _describe_container(value, kind, out, room)
    else:
        _put(out, room, _scalar(value, kind, room[0]))


def _put(out: list[str], room: list[int], text: str) -> None:
    out.append(text)
    room[0] -= len(text)


def _scalar(value: object, kind: type, room: int) -> str:
    if kind in (str, bytes, bytearray):
        return repr(value[: room + 1])
    if kind is int:
        return repr(value) if value.bit_length() <= INT_BITS else f"<int of {value.bit_length()} bits>"
    if kind in (bool, float, complex, type(None)):
        return repr(value)
    if kind is Remote:
        return f"<sandboxed {value.type_name[:room]} object>"
    if kind is fractions.Fraction:
        return f"Fraction({_scalar(value.numerator, int, room)}, {_scalar(value.denominator, int, room)})"
    if kind is decimal.Decimal:
        return f"Decimal('{value:.{room}}')" if value.is_finite() else repr(value)
    return f"<{kind.__name__[:room]} object>"


def _describe_container(value, kind: type, out: list[str], room: list[int]) -> None:
    if not value and kind in (set, frozenset):
        _put(out, room, f"{kind.__name__}()")
        return
    opener, closer = _BRACKETS[kind]
    _put(out, room, opener)
    mapping = kind in _MAPPINGS
    for i, item in enumerate(value.items() if mapping else value):
        if room[0] <= 0:
            return
        if i:
            _put(out, room, ", ")
        if mapping:
            _describe_into(item[0], out, room)
            _put(out, room, ": ")
            item = item[1]
        _describe_into(item, out, room)
    _put(out, room, ("," if kind is tuple and len(value) == 1 else "") + closer)
