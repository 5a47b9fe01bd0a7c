"""The agent that runs inside every sandbox, and the wire format it shares with the host.

This file uses the standard library only: the host imports it as a module (for the wire
format), and every backend runs it as a script inside the sandbox, where it is the first
process (PID 1 under bubblewrap, so the kernel refuses signals from the processes it starts).
It reads commands from the host on stdin and answers on stdout, one framed message each way:

    ("exec", argv, stdin, env, limits)   run a command to completion            -> ("result", {...})
    ("load", source, limits)             start a Python program in a child      -> ("loaded",) | ("load_error", name, msg)
                                                                                   | ("dead", info) | ("timeout",)
    ("call", payload)                    relay one call to the program's child  -> ("reply", payload) | ("dead", info)
                                                                                   | ("timeout",)
    ("stop",)                            kill every process, reset the workspace -> ("stopped", info)
    ("snapshot",) / ("restore", tar, as_base) / ("reset",) / ("ping",)

A command that fails (a corrupt snapshot, say) is answered ("error", message) and the agent serves on.

Where the host gave the agent an fd channel (a socket; bubblewrap and process backends), each
`loaded` reply comes with the program's own call pipes, sent over that channel, and the host calls
the program directly instead of through "call": half the hops per call. Until the next command the
agent then drains the program's output and ends it at its deadline; the next "call" or "stop" is
answered with how it ended.

Every message that crosses the sandbox boundary is decoded with `safe_loads`, which builds
plain values only (no class of the sender's choosing is ever constructed), so a compromised
sandbox can send wrong answers but never code. The agent relays the program's call replies
as opaque bytes; it never decodes what the candidate sends.

The host's configuration may name modules to preload (`Sandbox(preload=...)`, the host's own
trusted source): the agent runs them before its template starts, so every run finds them
imported. A loaded program may serve another program in a child of its own (`start_child`) and
call it as the host calls a loaded program: the code judge runs a task's tests that way, with
the candidate in the child, unable to trace it, read its memory or descriptors, or plant a module
it would import (it keeps only `SEALED_PATH`, the import paths nothing in the sandbox can write).
"""

from __future__ import annotations

import collections
import ctypes
import decimal
import fractions
import io
import os
import pickle
import resource
import select
import signal
import socket
import stat
import struct
import sys
import tarfile
import time
import types

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a longer frame means a broken or hostile peer
_HEADER = struct.Struct("!I")
_PR_SET_DUMPABLE = 4  # linux/prctl.h


class ProtocolError(Exception):
    """A frame that is too long, truncated, or not a plain value."""


class Remote:
    """A reference to an object that stays in the sandbox (it is not a plain value).

    The host sees only its id, its type's name and whether the type looks like a disguise
    (a subclass of a builtin value type, or one that overrides `__eq__`); passing it back as
    an argument hands the candidate's process its own object again.
    """

    __slots__ = ("ref", "type_name", "disguised")

    def __init__(self, ref: int, type_name: str, disguised: bool) -> None:
        self.ref, self.type_name, self.disguised = int(ref), str(type_name), bool(disguised)

    def __reduce__(self):
        return Remote, (self.ref, self.type_name, self.disguised)

    def __repr__(self) -> str:
        return f"<sandboxed {self.type_name} object>"

    def __bool__(self) -> bool:
        raise TypeError(f"a sandboxed {self.type_name} object has no truth value outside the sandbox")


Remote.__module__ = "rlvr_sandbox"  # the same name on both sides of the wire, so pickle can find it there
sys.modules.setdefault("rlvr_sandbox", types.ModuleType("rlvr_sandbox", "Where `Remote` pickles from."))
sys.modules["rlvr_sandbox"].Remote = Remote

_ALLOWED_GLOBALS = {
    ("rlvr_sandbox", "Remote"): Remote,
    ("builtins", "complex"): complex,
    ("builtins", "range"): range,
    ("builtins", "slice"): slice,
    ("builtins", "set"): set,
    ("builtins", "frozenset"): frozenset,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "int"): int,
    ("builtins", "float"): float,
    ("builtins", "str"): str,
    ("builtins", "list"): list,
    ("builtins", "dict"): dict,
    ("builtins", "tuple"): tuple,
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("collections", "defaultdict"): collections.defaultdict,
    ("collections", "deque"): collections.deque,
    ("decimal", "Decimal"): decimal.Decimal,
    ("fractions", "Fraction"): fractions.Fraction,
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        try:
            return _ALLOWED_GLOBALS[(module, name)]
        except KeyError:
            raise ProtocolError(f"refusing to build {module}.{name}: not a plain value") from None


def safe_loads(data: bytes):
    """Decode a message built from plain values (and `Remote` references) only."""
    try:
        return _SafeUnpickler(io.BytesIO(data)).load()
    except ProtocolError:
        raise
    except Exception as e:  # noqa: BLE001 - any malformed frame is a protocol error
        raise ProtocolError(f"undecodable message: {type(e).__name__}: {e}") from None


def dumps(obj) -> bytes:
    return pickle.dumps(obj, protocol=5)


def write_frame(fd: int, payload: bytes, deadline: float | None = None) -> None:
    """Write one length-prefixed frame to a file descriptor; with a `deadline` (monotonic), a pipe
    whose reader stops reading raises TimeoutError then, rather than blocking for ever."""
    data = _HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        if deadline is None:
            view = view[os.write(fd, view) :]
            continue
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([], [fd], [], left)[1]:
            raise TimeoutError
        view = view[os.write(fd, view[: select.PIPE_BUF]) :]  # a writable pipe takes PIPE_BUF bytes without blocking


def _read_exact(fd: int, n: int, deadline: float | None = None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, deadline: float | None = None, limit: int = MAX_MESSAGE_BYTES) -> bytes | None:
    """One frame's payload, or None at end of file; TimeoutError past `deadline` (monotonic)."""
    header = _read_exact(fd, _HEADER.size, deadline)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > limit:
        raise ProtocolError(f"a {size}-byte frame exceeds the {limit}-byte limit")
    payload = _read_exact(fd, size, deadline)
    if payload is None:
        raise ProtocolError("the stream ended inside a frame")
    return payload


# ---------------------------------------------------------------------------------------------
# Values that cross the boundary: plain values travel as themselves, everything else by reference.

_PLAIN = (type(None), bool, int, float, complex, str, bytes, bytearray, range, slice,
          decimal.Decimal, fractions.Fraction)
_VALUE_BASES = (bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset)


def _disguised(cls: type) -> bool:
    """Whether a type pretends to be a value: a subclass of a builtin value type, or a custom `__eq__`."""
    return issubclass(cls, _VALUE_BASES) or any("__eq__" in vars(k) or "__ne__" in vars(k) for k in cls.__mro__[:-1])


class _Encoder:
    """Turns a candidate's value into plain values, replacing every other object by a `Remote`."""

    def __init__(self) -> None:
        self.objects: dict[int, object] = {}

    def encode(self, value):
        kind = type(value)
        if kind in _PLAIN:
            return value
        if kind is list:
            return [self.encode(v) for v in value]
        if kind is tuple:
            return tuple(self.encode(v) for v in value)
        if kind is set or kind is frozenset:
            return kind(self.encode(v) for v in value)
        if kind is dict or kind is collections.OrderedDict or kind is collections.Counter:
            return kind(dict((self.encode(k), self.encode(v)) for k, v in value.items()))
        if kind is collections.defaultdict:
            factory = value.default_factory if value.default_factory in (int, float, str, list, dict, set, tuple) else None
            return collections.defaultdict(factory, ((self.encode(k), self.encode(v)) for k, v in value.items()))
        if kind is collections.deque:
            return collections.deque((self.encode(v) for v in value), value.maxlen)
        self.objects[id(value)] = value
        return Remote(id(value), getattr(kind, "__qualname__", "object"), _disguised(kind))

    def decode(self, value):
        kind = type(value)
        if kind is Remote:
            return self.objects[value.ref]
        if kind is list:
            return [self.decode(v) for v in value]
        if kind is tuple:
            return tuple(self.decode(v) for v in value)
        if kind is dict:
            return {self.decode(k): self.decode(v) for k, v in value.items()}
        return value




def _exception_name(exc: BaseException) -> str:
    """The name of the nearest builtin exception class of `exc`."""
    import builtins

    for cls in type(exc).__mro__:
        if getattr(builtins, cls.__name__, None) is cls:
            return cls.__name__
    return "Exception"


def _describe(exc: BaseException) -> str:
    try:
        return str(exc)[:500]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"


def serve_program(source: str, rfd: int, wfd: int) -> None:
    """The child's side of a loaded program: run the source, then answer calls until EOF.

    Each call is (name, args, kwargs) of plain values and references; each reply is
    ("return", value, args_after) or ("raise", builtin exception name, message).
    """
    namespace = {"__name__": "__candidate__", "__builtins__": __builtins__}
    try:
        exec(compile(source, "<candidate>", "exec"), namespace)
        reply = ("loaded",)
    except BaseException as e:  # noqa: BLE001 - the program's failure is reported, not raised
        reply = ("load_error", _exception_name(e), _describe(e))
    write_frame(wfd, dumps(reply))
    encoder = _Encoder()
    while True:
        frame = read_frame(rfd)
        if frame is None:
            os._exit(0)
        name, args, kwargs = pickle.loads(frame)
        try:
            args, kwargs = encoder.decode(args), {k: encoder.decode(v) for k, v in kwargs.items()}
            function = namespace[name]
            value = function(*args, **kwargs)
            reply = ("return", encoder.encode(value), encoder.encode(args))
            payload = dumps(reply)
        except BaseException as e:  # noqa: BLE001
            payload = dumps(("raise", _exception_name(e), _describe(e)))
        write_frame(wfd, payload)


# ---------------------------------------------------------------------------------------------
# A run's own child program: a loaded program (the code judge) serves another program in a child
# process and calls it the way the host calls a loaded program, without sharing a process with it.

SEALED_PATH: list[str] = []  # the import path entries nothing in the sandbox can change (set at start)
EXIT_GRACE_S = 0.1  # a child that closed its pipes is given this long to exit before it is killed


class ChildGone(Exception):
    """The child program ended, or ran past its deadline; `ChildProgram.ended` says how."""


def sealed_path(path: list[str]) -> list[str]:
    """The entries of `path` that nothing in the sandbox can change: existing absolute paths that are
    not writable, nor is any directory above them, as written and as resolved."""
    memo: dict[str, bool] = {}
    return [p for p in path if os.path.isabs(p) and os.path.exists(p)
            and _sealed(p, memo) and _sealed(os.path.realpath(p), memo)]


def _sealed(place: str, memo: dict[str, bool]) -> bool:
    if place not in memo:
        parent = os.path.dirname(place)
        memo[place] = not os.access(place, os.W_OK) and (parent == place or _sealed(parent, memo))
    return memo[place]


def start_child(source: str, deadline: float, imports: tuple[str, ...] = ()) -> ChildProgram:
    """Serve `source` in a child of this process until `deadline` (monotonic).

    First this process imports `imports` (failures ignored) and is made non-dumpable, so that the
    child can neither trace it nor read its memory or descriptors through /proc; the child closes
    every descriptor but its stdio and its two pipes and gets the interpreter's whole import path;
    then this process keeps only `SEALED_PATH`, so no module the child writes is ever imported here.
    """
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a child gone mid-call is an error to handle, not a kill
    for name in imports:
        parent, _, attribute = name.rpartition(".")
        try:
            if not (parent and hasattr(sys.modules.get(parent), attribute)):  # `from m import x`: x may be a module
                __import__(name)
        except (Exception, SystemExit):  # noqa: BLE001 - whoever needs the module says what is wrong
            pass
    path = list(sys.path)
    call_r, call_w = os.pipe()
    reply_r, reply_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        _serve_child(source, path, call_r, reply_w)
    os.close(call_r)
    os.close(reply_w)
    sys.path[:] = SEALED_PATH
    return ChildProgram(pid, call_w, reply_r, deadline)


def _serve_child(source: str, path: list[str], call_r: int, reply_w: int) -> None:
    """In the forked child: keep only stdio and the two pipes, restore the import path and SIGPIPE,
    serve the program until the parent hangs up. Never returns."""
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        low, high = sorted((call_r, reply_w))
        os.closerange(3, low)
        os.closerange(low + 1, high)
        os.closerange(high + 1, 1 << 16)
        sys.path[:] = path
        serve_program(source, call_r, reply_w)
    finally:
        os._exit(1)


class ChildProgram:
    """A program served in a child of this process (see `start_child`), called over its pipes."""

    def __init__(self, pid: int, call_w: int, reply_r: int, deadline: float) -> None:
        self.pid, self.call_w, self.reply_r = pid, call_w, reply_r
        self.deadline = deadline  # monotonic; past it the child is killed
        self.ended: dict | None = None  # how the child ended: {"exit_code", "timed_out"}
        self.load_error: tuple[str, str] | None = None  # (exception kind, message) when it did not load
        self._loaded = False

    def loaded(self) -> bool:
        """Wait for the program's load reply: True when it loaded; else `load_error` or `ended` says why."""
        if self._loaded or self.load_error is not None or self.ended is not None:
            return self._loaded
        try:
            reply = self._receive()
            if reply == ("loaded",):
                self._loaded = True
            elif type(reply) is tuple and len(reply) == 3 and reply[0] == "load_error" and all(
                    type(r) is str for r in reply):
                self.load_error = (reply[1], reply[2][:500])
            else:
                self._end(timed_out=False)
        except ChildGone:
            pass
        return self._loaded

    def call(self, name: str, args: tuple, kwargs: dict) -> tuple:
        """Call `name(*args, **kwargs)` in the child: ("return", value, args after the call) or ("raise",
        builtin exception name, message), checked; None-valued when the reply is not plain values.
        ChildGone when the child is gone or past the deadline."""
        if self.ended is not None:
            raise ChildGone
        payload = dumps((name, args, kwargs))
        try:
            write_frame(self.call_w, payload, self.deadline)
        except TimeoutError:
            self._end(timed_out=True)
        except OSError:
            self._end(timed_out=False)
        answer = self._receive()
        if type(answer) is tuple and len(answer) == 3 and (
                answer[0] == "return" or (answer[0] == "raise" and all(type(a) is str for a in answer))):
            return answer
        return ("raise", "TypeError", "the program answered with something that is not a plain value")

    def kill(self) -> None:
        """Kill the child without waiting (whoever reaps this process's children collects it)."""
        if self.ended is None:
            os.kill(self.pid, signal.SIGKILL)
            self._close({"exit_code": -signal.SIGKILL, "timed_out": False})

    def _receive(self):
        """The child's next message (None when it is not plain values); ChildGone when there is none."""
        try:
            frame = read_frame(self.reply_r, self.deadline)
        except TimeoutError:
            self._end(timed_out=True)
        except (OSError, ProtocolError):
            frame = None
        if frame is None:
            self._end(timed_out=False)
        try:
            return safe_loads(frame)
        except ProtocolError:
            return None

    def _end(self, timed_out: bool) -> None:
        """Record how the child ended, killing it first if it has not ended; raise ChildGone."""
        status = None if timed_out else self._exit_status(EXIT_GRACE_S)
        if status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            status = os.waitpid(self.pid, 0)[1]
        self._close({"exit_code": os.waitstatus_to_exitcode(status), "timed_out": timed_out})
        raise ChildGone

    def _exit_status(self, within: float) -> int | None:
        """The child's wait status if it exits within `within` seconds; None while it runs."""
        until = time.monotonic() + within
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return status
            if time.monotonic() >= until:
                return None
            time.sleep(0.002)

    def _close(self, ended: dict) -> None:
        self.ended = ended
        os.close(self.call_w)
        os.close(self.reply_r)


# ---------------------------------------------------------------------------------------------
# Where every run starts: a pristine template process.


def apply_limits(limits: dict) -> None:
    """Set this process's rlimits from a `Limits` dict (CPU s, memory MB, processes, file size MB, open files).

    POSIX message queues are refused outright (they would outlive the run in the sandbox's IPC namespace).
    """
    mb = 1024 * 1024
    settings = [
        (resource.RLIMIT_CPU, int(limits["cpu_s"]), int(limits["cpu_s"]) + 1),
        (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb, int(limits["memory_mb"]) * mb),
        (resource.RLIMIT_NPROC, int(limits["nproc"]), int(limits["nproc"])),
        (resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mb, int(limits["file_size_mb"]) * mb),
        (resource.RLIMIT_NOFILE, int(limits["open_files"]), int(limits["open_files"])),
        (resource.RLIMIT_CORE, 0, 0),
        (resource.RLIMIT_MSGQUEUE, 0, 0),
    ]
    for which, soft, hard in settings:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


# The descriptors a run receives, in this order: its job channel (the job, then a program's calls),
# its stdin, stdout, stderr, and the channel it answers on (first its pid when it is ready).
_JOB_FDS = 5
SPAWN_TIMEOUT_S = 2.0  # a run process not ready in this time means the template is gone or stopped


def _run_job(fds: list[int], workspace: str) -> None:
    """In a fresh run process (forked from the template): set up, say it is ready, wait for the job
    and its limits, become it. Never returns."""
    job, stdin, stdout, stderr, reply = fds
    try:
        signal.set_wakeup_fd(-1)
        os.setsid()
        for signum in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(signum, signal.SIG_DFL)
        for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
            os.dup2(fd, target)
        os.closerange(3, min(job, reply))
        os.closerange(min(job, reply) + 1, max(job, reply))
        os.closerange(max(job, reply) + 1, 1 << 16)
        os.chdir(workspace)
        write_frame(reply, struct.pack("!i", os.getpid()))
        message = safe_loads(read_frame(job) or b"")
        apply_limits(message[-1])
        if message[0] == "exec":
            _, argv, env, _ = message
            os.close(job)
            os.close(reply)
            try:
                os.execvpe(argv[0], argv, env)
            except BaseException as e:  # noqa: BLE001
                os.write(2, f"sandbox: cannot run {argv[0]!r}: {e}\n".encode())
            os._exit(127)
        serve_program(message[1], job, reply)
    finally:
        os._exit(1)


_EXIT_REPORT = struct.Struct("=ii")  # (pid, wait status) of a run process that ended


def _serve_template(sock: socket.socket, workspace: str) -> None:
    """The template's loop: fork a run process for each descriptor set it is sent; report how each ends.

    The template is forked from the agent before the agent has received anything but its
    configuration, and it is sent descriptors only, never a program, an input or an output:
    each run process starts as a copy of it, so nothing of an earlier run is in its memory. Its
    children's wait statuses (a run's only output it ever sees) go from the kernel into one C
    buffer, straight to the agent, and the buffer is zeroed: no Python object ever holds them.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    status, report = ctypes.c_int(0), (ctypes.c_int32 * 2)()
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes the loop
    while True:
        readable = select.select([sock, wake_r], [], [])[0]
        if wake_r in readable:
            _drain_pipe(wake_r)
            while (pid := libc.waitpid(-1, ctypes.byref(status), os.WNOHANG)) > 0:
                report[0] = pid
                ctypes.memmove(ctypes.byref(report, 4), ctypes.byref(status), 4)
                libc.send(sock.fileno(), report, _EXIT_REPORT.size, 0)
                ctypes.memset(report, 0, _EXIT_REPORT.size)
                ctypes.memset(ctypes.byref(status), 0, 4)
        if sock in readable:
            try:
                _, fds, _, _ = socket.recv_fds(sock, 16, _JOB_FDS)
            except OSError:
                os._exit(0)
            if not fds:  # the agent is gone
                os._exit(0)
            if len(fds) == _JOB_FDS and os.fork() == 0:
                _run_job(fds, workspace)
            for fd in fds:
                os.close(fd)


def _drain_pipe(fd: int) -> None:
    """Read a non-blocking pipe empty."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


class RunProcess:
    """A run process forked from the template and waiting for its job: the agent's ends of its job,
    stdin, stdout, stderr and reply channels, and its pid once it has reported ready."""

    def __init__(self, fds: tuple[int, int, int, int, int]) -> None:
        self.job, self.stdin, self.stdout, self.stderr, self.reply = fds
        self.pid: int | None = None

    def ready(self, timeout: float) -> int | None:
        """Its pid, waiting up to `timeout` seconds for it to report; None if it has not (or never will)."""
        if self.pid is None and select.select([self.reply], [], [], timeout)[0]:
            try:
                header = read_frame(self.reply, time.monotonic() + timeout, limit=4)
            except (OSError, TimeoutError, ProtocolError):
                header = None
            self.pid = struct.unpack("!i", header)[0] if header is not None and len(header) == 4 else -1
        return self.pid if self.pid is not None and self.pid > 0 else None

    def close(self) -> None:
        """Drop it: without its job channel it exits by itself."""
        for fd in (self.job, self.stdin, self.stdout, self.stderr, self.reply):
            os.close(fd)


class Template:
    """The agent's handle on its template process (see `_serve_template`)."""

    def __init__(self, workspace: str) -> None:
        agent_end, template_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            agent_end.close()
            os.dup2(0, 2)  # /dev/null: nothing of the host's channels stays open in the template
            os.closerange(3, template_end.fileno())
            os.closerange(template_end.fileno() + 1, 1 << 16)
            try:
                _serve_template(template_end, workspace)
            finally:
                os._exit(0)
        template_end.close()
        self.sock = agent_end
        self.alive = True
        self.ended: dict[int, int] = {}  # pid -> wait status of the run processes reported ended

    def spawn(self, fds: list[int]) -> bool:
        """Ask for a run process holding `fds` (it reports its pid on its reply channel); False when gone."""
        try:
            socket.send_fds(self.sock, [b"spawn"], fds)
        except OSError:
            self.alive = False
        return self.alive

    def collect(self, timeout: float = 0.0) -> None:
        """Read the exit reports that arrive within `timeout` seconds (then those already there)."""
        while self.alive and select.select([self.sock], [], [], timeout)[0]:
            timeout = 0.0
            data = self.sock.recv(_EXIT_REPORT.size)
            if len(data) != _EXIT_REPORT.size:
                self.alive = False
                return
            pid, status = _EXIT_REPORT.unpack(data)
            self.ended[pid] = status

    def wait(self, pid: int, deadline: float) -> int | None:
        """The wait status of run process `pid`, once reported (None past `deadline` or without a template)."""
        while pid not in self.ended and self.alive and time.monotonic() < deadline:
            self.collect(deadline - time.monotonic())
        return self.ended.pop(pid, None)


# ---------------------------------------------------------------------------------------------
# What a run leaves behind, removed and checked.

RESET_BUDGET_S = 2.0  # a reset that takes longer is abandoned and the sandbox replaced


class Unclean(Exception):
    """A reset could not prove that nothing of the last run is left: the sandbox must be replaced."""


def _fresh_name(dirfd: int, counter: list[int]) -> str:
    """A name not taken in the directory `dirfd`."""
    while True:
        counter[0] += 1
        name = f".rlvr-reset-{counter[0]}"
        try:
            os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            return name


def clear_directory(path: str, keep: frozenset[str] = frozenset(), deadline: float = float("inf")) -> None:
    """Remove everything in `path` but the entries named in `keep`, however deep, locked or odd the tree.

    Without recursion: each directory's entries are moved up into `path`, unlocked (the run's
    files all belong to the sandbox user), and the emptied directory removed, so any depth and
    any permissions are undone in time linear in the number of entries. Unclean if it overruns
    `deadline` or anything is left.
    """
    dirfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    counter = [0]
    try:
        while True:
            names = [n for n in os.listdir(dirfd) if n not in keep]
            if not names:
                return
            for name in names:
                if time.monotonic() > deadline:
                    raise Unclean(f"clearing {path} ran past its {RESET_BUDGET_S} s budget")
                _remove_entry(dirfd, name, counter)
    except OSError as e:
        raise Unclean(f"cannot clear {path}: {e}") from None
    finally:
        os.close(dirfd)


def _remove_entry(dirfd: int, name: str, counter: list[int]) -> None:
    """Unlink a file, or move a directory's entries up into `dirfd` and remove the directory."""
    if not stat.S_ISDIR(os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=dirfd)
        return
    os.chmod(name, 0o700, dir_fd=dirfd)  # a directory, not a link: nothing else runs to swap it
    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dirfd)
    try:
        for child in os.listdir(sub):
            if stat.S_ISDIR(os.stat(child, dir_fd=sub, follow_symlinks=False).st_mode):
                os.chmod(child, 0o700, dir_fd=sub)  # moving a directory writes its '..'
            os.rename(child, _fresh_name(dirfd, counter), src_dir_fd=sub, dst_dir_fd=dirfd)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=dirfd)


_IPC = (("shm", "shmctl"), ("msg", "msgctl"), ("sem", "semctl"))
_IPC_RMID = 0


def remove_ipc_objects() -> None:
    """Remove every System V shared-memory segment, message queue and semaphore set of this IPC namespace."""
    for kind, control in _IPC:
        idents = _ipc_ids(kind)
        if not idents:
            continue
        libc = ctypes.CDLL(None, use_errno=True)
        for ident in idents:
            if kind == "sem":
                getattr(libc, control)(ident, 0, _IPC_RMID)
            else:
                getattr(libc, control)(ident, _IPC_RMID, None)
        if _ipc_ids(kind):
            raise Unclean(f"System V {kind} objects outlived the run")


def _ipc_ids(kind: str) -> list[int]:
    try:
        with open(f"/proc/sysvipc/{kind}") as table:
            return [int(line.split()[1]) for line in table.readlines()[1:] if line.strip()]
    except OSError:
        return []


class Skeleton:
    """The sandbox's own paths inside its writable roots (the mount points of a Python installation
    under /tmp, and the directories leading to them): kept by a reset, checked to be as they started."""

    def __init__(self, roots: list[str], mounts: list[str]) -> None:
        self.entries: dict[str, tuple[int, int, int]] = {}
        self.dirs: list[str] = []  # the directories between a root and a mount point, outermost first
        for mount in mounts:
            root = next((r for r in roots if mount.startswith(r.rstrip("/") + "/")), None)
            if root is None:
                continue
            parts = []
            parent = os.path.dirname(mount)
            while parent != root:
                parts.insert(0, parent)
                parent = os.path.dirname(parent)
            for path in [*parts, mount]:
                info = os.stat(path, follow_symlinks=False)
                self.entries[path] = (info.st_dev, info.st_ino, info.st_mode)
            self.dirs += [d for d in parts if d not in self.dirs]

    def names_in(self, directory: str) -> frozenset[str]:
        """The names in `directory` that belong to the skeleton."""
        return frozenset(os.path.basename(p) for p in self.entries if os.path.dirname(p) == directory)

    def check(self) -> None:
        """Undo mode changes on the skeleton, then check that every part of it is where it was."""
        for path, (dev, ino, mode) in self.entries.items():
            try:
                info = os.stat(path, follow_symlinks=False)
                if (info.st_dev, info.st_ino) == (dev, ino) and info.st_mode != mode:
                    os.chmod(path, stat.S_IMODE(mode))
                    info = os.stat(path, follow_symlinks=False)
            except OSError as e:
                raise Unclean(f"the sandbox's own {path} is gone: {e}") from None
            if (info.st_dev, info.st_ino, info.st_mode) != (dev, ino, mode):
                raise Unclean(f"the sandbox's own {path} was changed")


# ---------------------------------------------------------------------------------------------
# The agent process.


class _Capture:
    """A child's stdout or stderr: drained as it comes, kept up to a byte limit, closed at end of file."""

    def __init__(self, fd: int, limit: int) -> None:
        self.fd, self.limit, self.data, self.truncated = fd, limit, bytearray(), False
        os.set_blocking(fd, False)

    def drain(self) -> None:
        """Read what is available; close the pipe at end of file."""
        while self.fd >= 0:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                os.close(self.fd)
                self.fd = -1
                return
            room = self.limit - len(self.data)
            if len(chunk) > room:
                self.truncated = True
            self.data += chunk[: max(room, 0)]


class Agent:
    """Serves the host's commands; at most one run (command or program) at a time.

    Every run is a fresh process forked from the template, never from the agent, whose memory
    holds what earlier runs sent and returned. After a run every other process is killed and
    the workspace, /tmp, /dev/shm and the IPC namespace are reset; when a reset cannot prove
    it removed everything, the run's result says the sandbox is `spent` and the host replaces it.
    """

    def __init__(self, config: dict) -> None:
        self.cin, self.cout = config["fds"]
        self.workspace = config["workspace"]
        self.scratch = [p for p in config["scratch"] if os.path.isdir(p)]
        self.private_ipc = bool(config.get("private_ipc"))
        self.pid1 = os.getpid() == 1
        self.reset_after_run = bool(config.get("reset_after_run", True))
        roots = [self.workspace, *self.scratch]
        self.skeleton = Skeleton(roots, [p for p in config.get("keep", ()) if os.path.exists(p)])
        self.modes = {d: os.stat(d).st_mode for d in [*roots, *self.skeleton.dirs]}  # what a reset restores
        self.template = Template(self.workspace)
        self.channel = socket.socket(fileno=config["channel_fd"]) if config.get("channel_fd") is not None else None
        self.outcome: dict | None = None  # how the live program ended at its deadline, between two commands
        self.ready: RunProcess | None = None  # the next run's process, forked while the current run runs
        self.base: bytes | None = None
        self.child: int | None = None
        self.captures: list[_Capture] = []
        self.call_fds: tuple[int, int] | None = None
        self.deadline = float("inf")
        self.started = 0.0
        self._exit_status: int | None = None
        self.spent = ""  # why this sandbox must be replaced; empty while it is clean

    # -- commands ------------------------------------------------------------------------------

    def serve(self) -> None:
        self.ready = self._prepare()
        while True:
            frame = self._next_command()
            if frame is None:
                self._kill_all()
                return
            message = safe_loads(frame)
            try:
                reply = getattr(self, "_cmd_" + message[0])(*message[1:])
            except Exception as e:  # noqa: BLE001 - a failed command is reported; the agent serves on
                reply = ("error", f"{message[0]}: {type(e).__name__}: {e}")
            write_frame(self.cout, dumps(reply))
            if self.ready is None and self.child is None and not self.spent:
                self.ready = self._prepare()  # while the host works on the reply

    def _next_command(self) -> bytes | None:
        """The host's next frame; meanwhile a live program's output is drained and its deadline kept
        (the host may be calling it directly: then only the agent can end it on time)."""
        while self.child is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                self.outcome = self._finish(True)
                break
            readable = select.select([self.cin, *self._open_captures()], [], [], left)[0]
            self._drain(readable)
            if self.cin in readable:
                break
        return read_frame(self.cin)

    def _take_outcome(self) -> dict | None:
        outcome, self.outcome = self.outcome, None
        return outcome

    def _cmd_ping(self):
        return ("pong", os.getpid())

    def _cmd_exec(self, argv, stdin, env, limits):
        in_w = self._spawn(limits, ("exec", list(argv), dict(env)))
        if in_w is None:
            return ("result", self._finish(False, note="no run process"))
        self._feed(in_w, stdin)
        timed_out = not self._wait_exit()
        return ("result", self._finish(timed_out))

    def _cmd_load(self, source, limits):
        in_w = self._spawn(limits, ("load", source))
        if in_w is None:
            return ("dead", self._finish(False, note="no run process"))
        os.close(in_w)
        reply = self._await_reply(relay=False)
        if reply[0] == "loaded" and self.channel is not None:
            try:
                socket.send_fds(self.channel, [b"calls"], list(self.call_fds))
            except OSError:
                pass  # without its pipes the host relays its calls through "call"
        return reply

    def _cmd_call(self, payload):
        if self.call_fds is None:
            outcome = self._take_outcome()
            return ("timeout", outcome) if outcome is not None else ("dead", self._finish(False))
        try:
            write_frame(self.call_fds[0], payload)
        except OSError:
            return ("dead", self._finish(False))
        return self._await_reply(relay=True)

    def _cmd_stop(self):
        outcome = self._take_outcome()
        return ("stopped", outcome if outcome is not None else self._finish(False))

    def _cmd_snapshot(self):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name in sorted(os.listdir(self.workspace)):
                tar.add(os.path.join(self.workspace, name), arcname=name)
        return ("snapshot", buffer.getvalue())

    def _cmd_restore(self, data, as_base):
        self._finish(False)
        self._reset_workspace()
        self._unpack(data)
        if as_base:
            self.base = data
        return ("restored",)

    def _cmd_reset(self):
        self._finish(False)
        self._reset()
        return ("restored", self.spent)

    # -- runs ----------------------------------------------------------------------------------

    def _prepare(self) -> RunProcess | None:
        """Ask the template for the next run's process (it starts in the background); None when it is gone."""
        job_r, job_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        reply_r, reply_w = os.pipe()
        theirs = [job_r, in_r, out_w, err_w, reply_w]
        asked = self.template.spawn(theirs)
        for fd in theirs:
            os.close(fd)
        run = RunProcess((job_w, in_w, out_r, err_r, reply_r))
        if not asked:
            run.close()
            return None
        return run

    def _spawn(self, limits: dict, job: tuple) -> int | None:
        """Hand `job` to a fresh run process; the write end of its stdin, or None (and the sandbox spent).
        The next run's process is asked for at once, so that it is ready when this run ends."""
        self.outcome = None
        if self.spent:  # a sandbox that could not prove itself clean runs nothing more: the host replaces it
            run = None
        else:
            run, self.ready = self.ready or self._prepare(), None
        pid = run.ready(SPAWN_TIMEOUT_S) if run is not None else None
        if pid is not None:
            try:
                write_frame(run.job, dumps((*job, limits)))
            except OSError:
                pid = None
        self.started = time.monotonic()
        self.deadline = self.started + float(limits["timeout_s"])
        if pid is None:
            if run is not None:
                run.close()
            self.spent = self.spent or "the sandbox's process template is gone"
            self.child, self.captures, self.call_fds = -1, [], None
            return None
        self.child = pid
        self.captures = [_Capture(run.stdout, int(limits["output_bytes"])), _Capture(run.stderr, int(limits["output_bytes"]))]
        self.call_fds = (run.job, run.reply)
        self.ready = self._prepare()
        return run.stdin

    def _open_captures(self) -> list[int]:
        return [c.fd for c in self.captures if c.fd >= 0]

    def _select(self, fds: list[int], write: list[int], timeout: float) -> tuple[list[int], list[int]]:
        """select() over `fds` and the host channel; the host hanging up mid-run ends the sandbox."""
        readable, writable, _ = select.select([self.cin, *fds], write, [], timeout)
        if self.cin in readable:  # the host sends nothing while a run is on: this is its end of file
            self._kill_all(self.child)
            os._exit(0)
        return readable, writable

    def _drain(self, readable) -> None:
        for capture in self.captures:
            if capture.fd in readable:
                capture.drain()

    def _feed(self, fd: int, data: bytes) -> None:
        """Write the child's stdin while draining its output, then close it."""
        view = memoryview(data)
        os.set_blocking(fd, False)
        while view and time.monotonic() < self.deadline:
            readable, writable = self._select(
                self._open_captures(), [fd], max(0.0, self.deadline - time.monotonic()))
            self._drain(readable)
            if writable:
                try:
                    view = view[os.write(fd, view[: 1 << 16]) :]
                except (BrokenPipeError, BlockingIOError):
                    break
        os.close(fd)

    def _wait_exit(self) -> bool:
        """Drain output until the child exits (True) or the deadline passes (False)."""
        while True:
            self.template.collect()
            self._reap(self.child)  # an orphaned run (its template died) is ours to reap
            if self.child in self.template.ended:
                self._exit_status = self.template.ended.pop(self.child)
            if self._exit_status is not None:
                return True
            left = self.deadline - time.monotonic()
            if left <= 0:
                return False
            fds = [*self._open_captures(), *([self.template.sock] if self.template.alive else [])]
            self._drain(self._select(fds, [], min(left, 0.05))[0])

    def _await_reply(self, relay: bool):
        """The child's next frame, relayed (or checked, for `load`), while its output is drained."""
        reply_fd = self.call_fds[1]
        buffered = bytearray()
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                return ("timeout", self._finish(True))
            readable = self._select([reply_fd, *self._open_captures()], [], left)[0]
            self._drain(readable)
            if reply_fd not in readable:
                continue
            chunk = os.read(reply_fd, 1 << 20)
            if not chunk:
                return ("dead", self._finish(False))
            buffered += chunk
            if len(buffered) < _HEADER.size:
                continue
            (size,) = _HEADER.unpack(buffered[: _HEADER.size])
            if size > MAX_MESSAGE_BYTES:
                return ("dead", self._finish(False, note="oversize reply"))
            if len(buffered) < _HEADER.size + size:
                continue
            payload = bytes(buffered[_HEADER.size : _HEADER.size + size])
            if relay:
                return ("reply", payload)
            try:
                message = safe_loads(payload)
            except ProtocolError:
                message = None
            if type(message) is tuple and message and message[0] in ("loaded", "load_error") and all(
                    type(m) is str for m in message):
                return message
            return ("dead", self._finish(False, note="malformed load reply"))

    def _finish(self, timed_out: bool, note: str = "") -> dict:
        """Kill the run and everything else running, collect its outcome, reset the sandbox."""
        if self.child is None:
            return {}
        pid, self.child = self.child, None
        self._kill_all(pid)
        status, self._exit_status = self._exit_status, None
        for capture in self.captures:
            capture.drain()
            if capture.fd >= 0:
                os.close(capture.fd)
        for fd in self.call_fds or ():
            os.close(fd)
        self.call_fds = None
        out, err = (bytes(c.data) for c in self.captures) if self.captures else (b"", b"")
        truncated = any(c.truncated for c in self.captures)
        if self.reset_after_run:
            self._reset()
        return {
            "exit_code": os.waitstatus_to_exitcode(status) if status is not None else None,
            "stdout": out,
            "stderr": err,
            "output_truncated": truncated,
            "timed_out": timed_out,
            "wall_s": time.monotonic() - self.started,
            "note": note,
            "spent": self.spent,
            "started": pid != -1,
        }

    def _kill_all(self, pid: int | None = None) -> None:
        """Kill every process of the sandbox but the agent, its template and the next run's process, and
        reap them; outside a PID namespace, the run's process group. Records the exit status of `pid`."""
        deadline = time.monotonic() + RESET_BUDGET_S
        if pid is not None and pid > 0:
            try:
                os.killpg(pid, signal.SIGKILL) if not self.pid1 else os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if pid is not None and pid > 0 and self._exit_status is None:
            self._exit_status = self.template.wait(pid, deadline)  # the template reports it once it is gone
        if self.pid1:
            # the next run's process has been starting since this run began: let it say who it is
            spare = self.ready.ready(SPAWN_TIMEOUT_S) if self.ready is not None else None
            while True:
                self._reap(pid)
                self.template.collect()
                left = [p for p in _pids() if p not in (1, self.template.pid, spare)]
                if not left:
                    break
                if time.monotonic() > deadline:
                    self.spent = self.spent or f"processes {left[:5]} outlived the run"
                    break
                for other in left:  # each killed process can fork no more; what it forked is killed next turn
                    try:
                        os.kill(other, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.0001)
            self._check_helpers(spare)
        self._reap(pid)
        self.template.ended.clear()

    def _check_helpers(self, spare: int | None) -> None:
        """After a run: the template must still be able to fork, and the next run's process must be
        untouched (a run could have stopped or killed either); otherwise replace them."""
        if _state(self.template.pid) not in ("S", "R"):
            self.template.alive = False
            self.spent = self.spent or "the sandbox's process template was killed or stopped"
        if self.ready is not None and (spare is None or _state(spare) not in ("S", "R")):
            if spare is not None:
                try:
                    os.kill(spare, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.ready.close()
            self.ready = None

    def _reap(self, pid: int | None) -> None:
        """Collect exited children of the agent (orphans; the run `pid` itself if its template died,
        its status kept); notice a template that died."""
        while True:
            try:
                reaped, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if reaped == 0:
                return
            if reaped == pid:
                self._exit_status = status
            if reaped == self.template.pid:
                self.template.alive = False
                self.spent = self.spent or "the sandbox's process template died"

    def _reset(self) -> None:
        """Return the sandbox to the state every run starts from, or mark it spent."""
        try:
            self._reset_workspace()
            if self.base is not None:
                self._unpack(self.base)
            if self.private_ipc:
                remove_ipc_objects()
        except Unclean as e:
            self.spent = self.spent or str(e)
        except Exception as e:  # noqa: BLE001 - any failure to reset means the sandbox cannot be trusted
            self.spent = self.spent or f"reset failed: {type(e).__name__}: {e}"

    def _reset_workspace(self) -> None:
        """Empty the workspace, /tmp and /dev/shm (all but the sandbox's own mount points) and check it."""
        deadline = time.monotonic() + RESET_BUDGET_S
        self.skeleton.check()
        for directory, mode in self.modes.items():  # roots first, then the skeleton's directories
            try:
                if os.stat(directory).st_mode != mode:
                    os.chmod(directory, stat.S_IMODE(mode))
            except OSError as e:
                raise Unclean(f"cannot restore {directory}: {e}") from None
            keep = self.skeleton.names_in(directory)
            clear_directory(directory, keep, deadline)
            if set(os.listdir(directory)) != keep or os.stat(directory).st_mode != mode:
                raise Unclean(f"{directory} is not clean after the reset")

    def _unpack(self, data: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(self.workspace, filter="data")


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _state(pid: int) -> str:
    """A process's state letter (R running, S sleeping, T stopped, Z zombie, ...); empty when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as info:
            return info.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


_PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def _become(config: dict) -> None:
    """Drop to the sandbox user (when started as root), then refuse ptrace and /proc access from others.

    The agent adopts the processes its runs leave behind (a subreaper, or PID 1), and dies with
    its host through its stdin: the host's end closing (the host exiting or being killed) is end
    of file, which the agent watches even while a run is on.
    """
    uid = config.get("uid")
    if uid is not None and os.getuid() == 0:
        os.chmod(config["workspace"], 0o700)
        os.chown(config["workspace"], uid, uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_DFL)


_PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
            "operator", "statistics", "hashlib", "random", "copy", "json", "datetime", "cmath", "array",
            "ast")  # ast: the code judge (verifiers/code_judge.py) instruments tests with it


def _load_module(name: str, source: str) -> None:
    """Run the host's `source` as the module `name`, before the template starts: every run finds it imported."""
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)


def main() -> None:
    """Entry point inside the sandbox: config as the first frame on stdin, then the command loop."""
    cin, cout = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(null, fd)
    config = safe_loads(read_frame(cin))
    config["fds"] = (cin, cout)
    _become(config)
    for name in _PRELOAD:
        __import__(name)
    for name, source in config.get("preload", {}).items():
        _load_module(name, source)
    SEALED_PATH[:] = sealed_path(sys.path)
    agent = Agent(config)
    write_frame(cout, dumps(("ready", os.getpid(), os.getuid())))
    agent.serve()


if __name__ == "__main__":
    main()
