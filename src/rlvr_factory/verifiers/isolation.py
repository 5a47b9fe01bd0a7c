"""The trust boundary of verification: where each verifier's full check runs, and the sandboxed scoring server.

Every verifier class declares its `isolation`:

* `PARSE`: its full check only parses the completion with the project's own code, bounded in time and memory
  (the fields verifier, a reward model's tokenizer); it runs in a killable pool worker.
* `SANDBOX`: its full check hands model output to third-party code that evaluates it (Math-Verify builds sympy
  expressions with `parse_expr`, which calls `eval`; reasoning-gym's scorers call `eval` and `parse_expr` on the
  answer). Such a verifier subclasses `Sandboxed`: its `score` runs its `full_check` in a bubblewrap sandbox,
  in a process forked for that one check from a warm scoring server that has never scored anything. The check
  process cannot fork, write files or open more descriptors, holds no descriptor but its reply pipe, and cannot
  trace or read the server (both are non-dumpable); when it ends, nothing it did is left: no row can change
  what the next row is scored with.
* `OWN`: it runs what it evaluates in a sandbox of its own (a candidate program and its tests, a CAD script).
* `ROUTE`: it hands each check to the verifiers it holds (`verifier`, `verifiers`), each behind its own boundary
  (a domain mix, a learned reward on top of a verifier).

    verifier = MathVerifier()           # a Sandboxed verifier
    verifier.score(completion, gold)    # runs in this process's scoring server for that verifier
    verifier.full_check(completion, gold)  # the same check in this process: only ever inside the sandbox

A check's verdict comes back as plain values decoded with the sandbox's `safe_loads` (no class of the
sandbox's choosing is ever built here) and is validated (a finite reward, a known status). A check that runs
past its time limit is a `timeout`; one that raises, returns something malformed or takes its server down is an
`error` (the server is replaced for the next row); a server that cannot start is an `InfraError`, which the
pool retries and then scores `infra_error`, never a wrong answer.
"""

from __future__ import annotations

import atexit
import logging
import math
import pickle
import sys
import threading
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from rlvr_factory.sandbox import (
    DEFAULT_BACKEND,
    CandidateError,
    Limits,
    Program,
    ProgramEnded,
    Sandbox,
    SandboxError,
    SandboxStartError,
    make_backend,
)
from rlvr_factory.sandbox.agent import ProtocolError, safe_loads
from rlvr_factory.sandbox.backends import PACKAGE_ROOT
from rlvr_factory.scheduler import InfraError
from rlvr_factory.verifiers.score import SCORE_STATUSES, Score

logger = logging.getLogger(__name__)

PARSE, SANDBOX, OWN, ROUTE = "parse", "sandbox", "own", "route"
ISOLATIONS = (PARSE, SANDBOX, OWN, ROUTE)
SERVER_START_S = 120.0  # the server's start-up (importing sympy, building scorers) is given this long
CALL_MARGIN_S = 1.0  # a sandboxed check inside a pool check ends this much before the pool would kill it
CALL_GRACE_S = 5.0  # how long past a check's own limit the host waits for the server before replacing it
_FOREVER_S = 30 * 24 * 3600.0  # the server program's own lifetime limit: it lives as long as its host process


@dataclass(frozen=True)
class CheckLimits:
    """Limits on one sandboxed check (the process forked for it): wall clock, CPU seconds and address space."""

    timeout_s: float = 4.0  # wall-clock seconds; the check process is killed after them (status timeout)
    memory_mb: int = 2048  # address space of the check process (the server's imports included)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"check limit {name} must be a positive finite number, got {value!r}")

    @property
    def cpu_s(self) -> int:
        """The check process's CPU-time limit: its wall-clock limit, rounded up."""
        return max(1, math.ceil(self.timeout_s))


# The server, as it runs in the sandbox (standard library and the verifier's own modules only). `setup`
# unpickles the verifier the host sent and warms it; `check` forks one process per row, which drops every
# descriptor but its reply pipe, lowers its limits (no forks, no file writes) and runs the full check; the
# server relays the row's reply as opaque bytes and never decodes what the row process wrote.
SERVER_SOURCE = r'''
import ctypes
import gc
import os
import pickle
import resource
import select
import signal
import sys
import time

_STATE = {}
_MAX_REPLY = 1 << 20


def setup(blob, paths):
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0 (inherited by every row process)
    sys.path[:0] = paths
    verifier = pickle.loads(blob)
    warm = getattr(verifier, "warm_up", None)
    if callable(warm):
        warm()
    _STATE["verifier"] = verifier
    gc.collect()
    gc.freeze()  # what the server holds now is never collected: a row process copies none of it to collect it
    return os.getpid()


def _row(completion, gold, cpu_s, memory_mb, write_fd):
    gc.disable()  # a row process lives for one check: collecting would copy the server's pages for nothing
    os.closerange(3, write_fd)
    os.closerange(write_fd + 1, 1 << 16)
    mb = 1024 * 1024
    for which, value in ((resource.RLIMIT_CPU, cpu_s), (resource.RLIMIT_AS, memory_mb * mb),
                         (resource.RLIMIT_NPROC, 0), (resource.RLIMIT_FSIZE, 0)):
        resource.setrlimit(which, (value, value))
    try:
        score = _STATE["verifier"].full_check(completion, gold)
        reply = ("score", float(score.reward), bool(score.correct), str(score.status),
                 {str(k): v if isinstance(v, str) else float(v) for k, v in dict(score.breakdown).items()},
                 str(score.message))
    except BaseException as e:
        reply = ("raise", type(e).__name__, str(e)[:500])
    data = pickle.dumps(reply, protocol=5)
    view = memoryview(data)
    while view:
        view = view[os.write(write_fd, view):]


def check(completion, gold, timeout_s, cpu_s, memory_mb):
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_fd)
            _row(completion, gold, cpu_s, memory_mb, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    deadline = time.monotonic() + timeout_s
    chunks, size, timed_out = [], 0, False
    try:
        while size <= _MAX_REPLY:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read_fd], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(read_fd)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out:
        return ("timeout",)
    if size > _MAX_REPLY:
        return ("oversize",)
    return ("reply", b"".join(chunks), os.waitstatus_to_exitcode(status))
'''


class ScoringServer:
    """One verifier's warm scoring server in a sandbox of its own, started on first use and replaced when lost."""

    def __init__(self, verifier: Sandboxed) -> None:
        self.verifier = verifier
        self.lock = threading.Lock()  # one check at a time: the server answers calls in order
        self.sandbox: Sandbox | None = None
        self.program: Program | None = None
        self.starts = 0

    def start(self) -> None:
        """Start the sandbox and load the server (no-op when running); `InfraError` says why it could not."""
        if self.program is not None:
            return
        limits = Limits(timeout_s=_FOREVER_S, cpu_s=int(_FOREVER_S), memory_mb=self.verifier.check_limits.memory_mb,
                        nproc=8, file_size_mb=16, open_files=256, output_bytes=65536)
        packages = plugin_packages(self.verifier)
        options = ({"read_only": (str(PACKAGE_ROOT), *packages)} if self.verifier.sandbox_backend == "bubblewrap"
                   else {})  # the server imports this package (an editable install's source root is its own place)
        try:
            self.sandbox = Sandbox(self.verifier.sandbox_backend, limits, workspace_mb=8, **options)
            program = self.sandbox.load(SERVER_SOURCE, limits)
            program.host_deadline = time.monotonic() + SERVER_START_S
            paths = [str(PACKAGE_ROOT), *(str(Path(p).parent) for p in packages)]
            program.call("setup", pickle.dumps(self.verifier, protocol=5), paths)
        except (SandboxError, ProgramEnded, CandidateError) as e:
            self.close()
            raise InfraError(f"the scoring sandbox of {type(self.verifier).__name__} did not start: {e}") from e
        self.program = program
        self.starts += 1

    def close(self) -> None:
        """Stop the server and its sandbox."""
        sandbox, self.sandbox, self.program = self.sandbox, None, None
        if sandbox is not None:
            sandbox.close()

    def check(self, completion: str, gold: str, limits: CheckLimits) -> Score:
        """The verifier's full check of one row in a process forked for it; see the module docstring."""
        with self.lock:
            return self._check(completion, gold, limits)

    def _check(self, completion: str, gold: str, limits: CheckLimits) -> Score:
        self.start()
        self.program.host_deadline = time.monotonic() + limits.timeout_s + CALL_GRACE_S
        try:
            reply = self.program.call("check", completion, gold, limits.timeout_s, limits.cpu_s, limits.memory_mb)
        except (SandboxError, ProgramEnded, CandidateError) as e:
            self.close()
            logger.warning("a check took its scoring server down (%s); it is replaced for the next row", e)
            return failure("error", f"the check ended its scoring sandbox ({type(e).__name__}: {str(e)[:200]})")
        return verdict(reply, limits)


def plugin_packages(verifier: Any) -> list[str]:
    """The directories of the top-level packages that define the verifier's classes, where they are neither this
    project's nor installed (a plug-in domain's own package): the scoring sandbox binds them read-only."""
    installed = {str(PACKAGE_ROOT), sys.prefix, sys.base_prefix}
    found = []
    for cls in type(verifier).__mro__:
        module = sys.modules.get(cls.__module__.split(".")[0])
        where = getattr(module, "__file__", None)
        if where is None:
            continue
        package = str(Path(where).resolve().parent) if Path(where).name == "__init__.py" else str(Path(where).resolve())
        if not any(package == p or package.startswith(p + "/") for p in installed) and package not in found:
            found.append(package)
    return found


def failure(status: str, message: str) -> Score:
    """The zero-reward verdict of a check that could not judge, saying why."""
    return Score(reward=0.0, correct=False, status=status, message=message)


def verdict(reply: Any, limits: CheckLimits) -> Score:
    """The Score a server's reply to `check` carries, validated; anything malformed is an `error`."""
    if reply == ("timeout",):
        return failure("timeout", f"the check ran past its {limits.timeout_s:g} s limit and was killed")
    if reply == ("oversize",):
        return failure("error", "the check's reply was larger than 1 MiB")
    if not (type(reply) is tuple and len(reply) == 3 and reply[0] == "reply" and type(reply[1]) is bytes):
        return failure("error", "the scoring server sent a malformed reply")
    if not reply[1]:
        return failure("error", f"the check process ended without a verdict (exit status {reply[2]!r})")
    try:
        return _score_of(safe_loads(reply[1]))
    except (ProtocolError, ValueError, TypeError) as e:
        return failure("error", f"the check's verdict is malformed: {str(e)[:200]}")


def _score_of(message: Any) -> Score:
    """A check process's message as a Score: ("score", reward, correct, status, breakdown, message) or
    ("raise", exception name, message); ValueError when it is neither, or not finite."""
    if type(message) is tuple and len(message) == 3 and message[0] == "raise":
        return failure("error", f"the verifier raised {message[1]}: {message[2]}")
    if not (type(message) is tuple and len(message) == 6 and message[0] == "score"):
        raise ValueError("not a verdict")
    _, reward, correct, status, breakdown, text = message
    if type(reward) is not float or not math.isfinite(reward) or type(correct) is not bool:
        raise ValueError(f"reward {reward!r} / correct {correct!r} are not a finite float and a bool")
    if status not in SCORE_STATUSES or type(text) is not str or type(breakdown) is not dict:
        raise ValueError("status, message or breakdown of the wrong type")
    for key, value in breakdown.items():
        if type(key) is not str or not (type(value) is str or (type(value) is float and math.isfinite(value))):
            raise ValueError(f"breakdown entry {key!r} is not a finite number or a string")
    return Score(reward=reward, correct=correct, status=status, breakdown=breakdown, message=text)


_TIME_LIMIT: ContextVar[float | None] = ContextVar("sandboxed_check_time_limit", default=None)


@contextmanager
def time_limit(pool_timeout_s: float) -> Iterator[None]:
    """Within this block, sandboxed checks end (as `timeout`) before a pool check of `pool_timeout_s` seconds
    would be killed: they get that time less a margin (a fifth of it, at most `CALL_MARGIN_S`)."""
    token = _TIME_LIMIT.set(max(0.05, pool_timeout_s - min(CALL_MARGIN_S, pool_timeout_s / 5)))
    try:
        yield
    finally:
        _TIME_LIMIT.reset(token)


_SERVERS: dict[bytes, ScoringServer] = {}  # this process's servers, by the verifier's pickled configuration
_SERVERS_LOCK = threading.Lock()
atexit.register(lambda: close_servers())


def server_for(verifier: Sandboxed) -> ScoringServer:
    """This process's scoring server for a verifier with this configuration (created, not started, on first use)."""
    key = pickle.dumps(verifier, protocol=5)
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = ScoringServer(verifier)
        return _SERVERS[key]


def close_servers() -> None:
    """Stop every scoring server of this process."""
    with _SERVERS_LOCK:
        while _SERVERS:
            _SERVERS.popitem()[1].close()


class Sandboxed:
    """Base of the verifiers whose full check evaluates model output with third-party code (`SANDBOX`).

    A subclass implements `full_check` (and `quick_score`, which stays in the caller's process and may only
    parse); `score` runs `full_check` in the scoring server. `sandbox_backend` and `check_limits` are the
    subclass's to set from its options (`bubblewrap` by default; `process` isolates nothing and warns).
    """

    isolation = SANDBOX
    sandbox_backend: str = DEFAULT_BACKEND
    check_limits: CheckLimits = CheckLimits()

    def full_check(self, completion: str, gold: str) -> Score:
        """The full check, in this process: only ever called inside the scoring sandbox."""
        raise NotImplementedError

    def warm_up(self) -> None:
        """Import and build, once per server before any row, what every check needs (nothing by default)."""

    def score(self, completion: str, gold: str) -> Score:
        """The full check, run in the sandbox within `check_limits` (and within the time left to the pool's
        check, when a `VerifierPool` runs it: see `time_limit`)."""
        limit = _TIME_LIMIT.get()
        limits = self.check_limits
        if limit is not None and limit < limits.timeout_s:
            limits = replace(limits, timeout_s=limit)
        return server_for(self).check(completion, gold, limits)


def isolation_of(verifier: Any) -> str:
    """The isolation a verifier declares (`PARSE`, `SANDBOX`, `OWN`); ValueError when it declares none."""
    value = getattr(verifier, "isolation", None)
    if value not in ISOLATIONS:
        raise ValueError(f"{type(verifier).__name__} declares no isolation (one of {ISOLATIONS}), got {value!r}")
    return value


def sandboxed_within(verifier: Any) -> Iterator[Sandboxed]:
    """The `Sandboxed` verifiers a verifier is or routes to (a mix's `verifiers`, a learned reward's `verifier`)."""
    if isinstance(verifier, Sandboxed):
        yield verifier
    if getattr(verifier, "isolation", None) == ROUTE:
        inner = getattr(verifier, "verifiers", None)
        for held in [*(inner.values() if isinstance(inner, dict) else ()), getattr(verifier, "verifier", None)]:
            if held is not None:
                yield from sandboxed_within(held)


def require_sandbox(verifier: Any) -> None:
    """Fail now, saying what to install, when a `Sandboxed` verifier within `verifier` names a sandbox backend
    this machine cannot start (bubblewrap not installed): otherwise every check would be an `infra_error`."""
    for inner in sandboxed_within(verifier):
        try:
            make_backend(inner.sandbox_backend)
        except SandboxStartError as e:
            raise SandboxStartError(f"{type(inner).__name__} scores answers in a sandbox (docs/security.md): {e}") from None


def start_servers(verifier: Any) -> None:
    """Start the scoring servers of every `Sandboxed` verifier within `verifier` now (a pool worker does this
    before it reports ready, so that no check's time limit pays for a server's start-up); a server that
    cannot start is left to fail its checks with `InfraError`."""
    for inner in sandboxed_within(verifier):
        try:
            server_for(inner).start()
        except InfraError as e:
            logger.warning("%s", e)
