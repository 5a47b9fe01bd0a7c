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

Every message that crosses the sandbox boundary is decoded with `safe_loads`, which builds
plain values only (no class of the sender's choosing is ever constructed), so a compromised
sandbox can send wrong answers but never code. The agent relays the program's call replies
as opaque bytes; it never decodes what the candidate sends.
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
import shutil
import signal
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


def write_frame(fd: int, payload: bytes) -> None:
    """Write one length-prefixed frame to a file descriptor."""
    data = _HEADER.pack(len(payload)) + payload
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


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
# The agent process.


def apply_limits(limits: dict) -> None:
    """Set this process's rlimits from a `Limits` dict (CPU s, memory MB, processes, file size MB, open files)."""
    mb = 1024 * 1024
    settings = [
        (resource.RLIMIT_CPU, int(limits["cpu_s"]), int(limits["cpu_s"]) + 1),
        (resource.RLIMIT_AS, int(limits["memory_mb"]) * mb, int(limits["memory_mb"]) * mb),
        (resource.RLIMIT_NPROC, int(limits["nproc"]), int(limits["nproc"])),
        (resource.RLIMIT_FSIZE, int(limits["file_size_mb"]) * mb, int(limits["file_size_mb"]) * mb),
        (resource.RLIMIT_NOFILE, int(limits["open_files"]), int(limits["open_files"])),
        (resource.RLIMIT_CORE, 0, 0),
    ]
    for which, soft, hard in settings:
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


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
    """Serves the host's commands; at most one child (command or program) runs at a time."""

    def __init__(self, config: dict) -> None:
        self.cin, self.cout = config["fds"]
        self.workspace = config["workspace"]
        self.scratch = [p for p in config["scratch"] if os.path.isdir(p)]
        self.pid1 = os.getpid() == 1
        self.reset_after_run = bool(config.get("reset_after_run", True))
        self.base: bytes | None = None
        self.child: int | None = None
        self.captures: list[_Capture] = []
        self.call_fds: tuple[int, int] | None = None
        self.deadline = float("inf")
        self.started = 0.0
        self._exit_status: int | None = None

    # -- commands ------------------------------------------------------------------------------

    def serve(self) -> None:
        while True:
            frame = read_frame(self.cin)
            if frame is None:
                self._kill_all()
                return
            message = safe_loads(frame)
            try:
                reply = getattr(self, "_cmd_" + message[0])(*message[1:])
            except Exception as e:  # noqa: BLE001 - a failed command is reported; the agent serves on
                reply = ("error", f"{message[0]}: {type(e).__name__}: {e}")
            write_frame(self.cout, dumps(reply))

    def _cmd_ping(self):
        return ("pong", os.getpid())

    def _cmd_exec(self, argv, stdin, env, limits):
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self._enter_child(limits, in_r, out_w, err_w)
                os.execvpe(argv[0], argv, env)
            except BaseException as e:  # noqa: BLE001
                os.write(2, f"sandbox: cannot run {argv[0]!r}: {e}\n".encode())
            os._exit(127)
        for fd in (out_w, err_w, in_r):
            os.close(fd)
        self._started(pid, limits, out_r, err_r)
        self._feed(in_w, stdin)
        timed_out = not self._wait_exit()
        return ("result", self._finish(timed_out))

    def _cmd_load(self, source, limits):
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                self._enter_child(limits, os.open(os.devnull, os.O_RDONLY), out_w, err_w,
                                  keep=(to_child_r, from_child_w))
                serve_program(source, to_child_r, from_child_w)
            finally:
                os._exit(1)
        for fd in (to_child_r, from_child_w, out_w, err_w):
            os.close(fd)
        self.call_fds = (to_child_w, from_child_r)
        self._started(pid, limits, out_r, err_r)
        return self._await_reply(relay=False)

    def _cmd_call(self, payload):
        if self.call_fds is None:
            return ("dead", self._finish(False))
        try:
            write_frame(self.call_fds[0], payload)
        except OSError:
            return ("dead", self._finish(False))
        return self._await_reply(relay=True)

    def _cmd_stop(self):
        return ("stopped", self._finish(False))

    def _cmd_snapshot(self):
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name in sorted(os.listdir(self.workspace)):
                tar.add(os.path.join(self.workspace, name), arcname=name)
        return ("snapshot", buffer.getvalue())

    def _cmd_restore(self, data, as_base):
        self._finish(False)
        if as_base:
            self.base = data
        self._wipe()
        self._unpack(data)
        return ("restored",)

    def _cmd_reset(self):
        self._finish(False)
        self._restore_base()
        return ("restored",)

    # -- children ------------------------------------------------------------------------------

    def _enter_child(self, limits, stdin_fd, out_fd, err_fd, keep=()) -> None:
        """In a fresh child: own session, rlimits, the workspace as cwd, stdio redirected, nothing else open."""
        os.setsid()
        for signum in (signal.SIGPIPE, signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        os.dup2(stdin_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(err_fd, 2)
        keep = sorted(keep)
        low = 3
        for fd in keep:
            os.closerange(low, fd)
            low = fd + 1
        os.closerange(low, 1 << 16)
        os.chdir(self.workspace)
        apply_limits(limits)

    def _started(self, pid, limits, out_r, err_r) -> None:
        self.child = pid
        self.started = time.monotonic()
        self.deadline = self.started + float(limits["timeout_s"])
        self.captures = [_Capture(out_r, int(limits["output_bytes"])), _Capture(err_r, int(limits["output_bytes"]))]

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
            pid, status = os.waitpid(self.child, os.WNOHANG)
            if pid:
                self._exit_status = status
                return True
            left = self.deadline - time.monotonic()
            if left <= 0:
                return False
            fds = self._open_captures()
            self._drain(self._select(fds, [], min(left, 0.05 if fds else 0.002))[0])

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
        """Kill the child and everything else running, collect its outcome, reset the workspace."""
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
        out, err = self.captures
        info = {
            "exit_code": os.waitstatus_to_exitcode(status) if status is not None else None,
            "stdout": bytes(out.data),
            "stderr": bytes(err.data),
            "output_truncated": out.truncated or err.truncated,
            "timed_out": timed_out,
            "wall_s": time.monotonic() - self.started,
            "note": note,
        }
        if self.reset_after_run:
            self._restore_base()
        return info

    def _restore_base(self) -> None:
        self._wipe()
        if self.base is not None:
            self._unpack(self.base)

    def _kill_all(self, pid: int | None = None) -> None:
        """Kill every process of the sandbox but this one (PID 1); outside a PID namespace, the child's session.

        Records the exit status of `pid` unless it was reaped already.
        """
        if self.pid1:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:  # reap our children, and (as PID 1) the orphans the kernel gave us
            try:
                reaped, status = os.waitpid(-1 if self.pid1 else (pid or -1), 0)
            except ChildProcessError:
                return
            if reaped == pid:
                self._exit_status = status
                if not self.pid1:
                    return

    def _wipe(self) -> None:
        for root in [self.workspace, *self.scratch]:
            for name in os.listdir(root):
                path = os.path.join(root, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, onerror=_force_remove)
                else:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def _unpack(self, data: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            tar.extractall(self.workspace, filter="data")


def _force_remove(function, path, _exc_info) -> None:
    """rmtree's error handler: make the parent writable and try again."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def _become(config: dict) -> None:
    """Drop to the sandbox user (when started as root), then refuse ptrace and /proc access from others.

    The agent dies with its host through its stdin: the host's end closing (the host exiting
    or being killed) is end of file, which the agent watches even while a run is on.
    """
    uid = config.get("uid")
    if uid is not None and os.getuid() == 0:
        for path in [config["workspace"], *config["scratch"]]:
            if os.path.isdir(path):
                os.chmod(path, 0o700)
                os.chown(path, uid, uid)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(signum, signal.SIG_DFL)


_PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
            "operator", "statistics", "hashlib", "random", "copy", "json", "datetime", "cmath", "array")


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
    agent = Agent(config)
    write_frame(cout, dumps(("ready", os.getpid(), os.getuid())))
    agent.serve()


if __name__ == "__main__":
    main()
