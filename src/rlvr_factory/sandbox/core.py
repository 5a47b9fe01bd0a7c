"""One sandbox: a long-lived agent in its own isolated environment that runs commands and programs.

    with Sandbox() as box:                                  # bubblewrap, default limits
        result = box.run(["python3", "-c", "print(1 + 1)"])  # a fresh process, killed at the deadline
        with box.load("def f(x):\n    return x * 2") as program:
            program.call("f", 21)                           # 42: the call runs in the sandbox
        saved = box.snapshot(); ...; box.restore(saved)

Each run or program is a fresh process forked from a template that never held another run's
code, inputs or outputs; when it ends, every process in the sandbox is killed and the workspace,
/tmp, /dev/shm and the IPC namespace are reset (the workspace to the last `restore(..., as_base=True)`,
else empty), so one sandbox serves many runs without their leaking into each other. A reset that
cannot prove it removed everything marks the sandbox spent, and it is replaced before the next run.
`run` never raises because of what the command did: a broken sandbox is a result with status
`sandbox_error`. With `persist_workspace`, files stay between runs instead, and `snapshot` /
`restore` / `reset` step a multi-step environment back cheaply.

Modules the host names in `preload` (its own source, trusted) are run by the agent before its
template starts, so every run finds them imported without compiling them (the code judge,
`verifiers/code_judge.py`).

Two things keep the isolated path fast without loosening any of this: a loaded program's calls go
straight to its own pipes (the agent hands them over; it only drains the program's output and ends
it at its deadline), and a program leaving its `with` block is released without waiting: the agent
kills it and proves the sandbox clean while the host works on, and the report is read before the
next command's answer (a spent agent refuses that command's run, which then goes to the replacement).
"""

from __future__ import annotations

import io
import logging
import os
import tarfile
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from rlvr_factory.sandbox.agent import ProtocolError, Remote, dumps, read_frame, safe_loads, write_frame
from rlvr_factory.sandbox.backends import (
    DEFAULT_BACKEND,
    Backend,
    SandboxError,
    SandboxStartError,
    Transport,
    agent_environment,
    make_backend,
)
from rlvr_factory.sandbox.limits import Limits, RunResult

logger = logging.getLogger(__name__)

GRACE_S = 5.0  # how long past a run's deadline the host waits for the agent before calling it lost
START_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Snapshot:
    """The files of a workspace at one moment (a tar archive)."""

    data: bytes

    def files(self) -> list[str]:
        """The archive's member names, sorted."""
        with tarfile.open(fileobj=io.BytesIO(self.data)) as tar:
            return sorted(tar.getnames())


class CommandFailed(SandboxError):
    """The agent could not carry out a command (e.g. a corrupt snapshot); the sandbox itself is fine."""


class CandidateError(Exception):
    """A call into the sandboxed program raised; `kind` is the nearest builtin exception's name."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message


class ProgramEnded(Exception):
    """The sandboxed program is gone: it exited, was killed, or ran past its deadline (`timed_out`)."""

    def __init__(self, result: RunResult) -> None:
        what = "ran past its deadline" if result.timed_out else f"exited with code {result.exit_code}"
        super().__init__(f"the program {what}")
        self.result = result


class Sandbox:
    """An isolated environment with a workspace, driven through its agent; see the module docstring."""

    def __init__(
        self,
        backend: str | Backend = DEFAULT_BACKEND,
        limits: Limits | dict | None = None,
        workspace_mb: int = 64,
        persist_workspace: bool = False,
        preload: Mapping[str, str] | None = None,
        **backend_options: Any,
    ) -> None:
        self.backend = make_backend(backend, **backend_options) if isinstance(backend, str) else backend
        self.limits = Limits.of(limits)
        self.workspace_mb = workspace_mb  # size of the tmpfs workspace (bubblewrap, docker)
        self.persist_workspace = persist_workspace  # keep files between runs (a multi-step environment)
        # Python modules (name -> source, trusted: the host's own) the agent runs before its template
        # starts, so every run finds them imported without compiling them (the code judge)
        self.preload = dict(preload or {})
        self._transport: Transport | None = None
        self._program: Program | None = None
        self._owed: list[Program] = []  # programs released without waiting for the agent's report, oldest first
        self.starts = 0

    @property
    def backend_name(self) -> str:
        return self.backend.name

    @property
    def alive(self) -> bool:
        return self._transport is not None

    @property
    def host_pid(self) -> int | None:
        """The host pid of the process that holds the sandbox (bwrap, or the agent itself), if local."""
        process = getattr(self._transport, "process", None)
        return process.pid if process is not None else None

    def __enter__(self) -> Sandbox:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the agent (no-op when running); SandboxStartError says why it could not."""
        if self._transport is not None:
            return
        transport, config = self.backend.launch(self.workspace_mb)
        try:
            transport.send(dumps({**config, "reset_after_run": not self.persist_workspace, "preload": self.preload}))
            frame = transport.recv(time.monotonic() + START_TIMEOUT_S)
            ready = safe_loads(frame) if frame is not None else None
        except (OSError, TimeoutError, ProtocolError) as e:
            ready, problem = None, f"{type(e).__name__}: {e}"
        else:
            problem = ""
        if not (isinstance(ready, tuple) and ready and ready[0] == "ready"):
            problem = problem or transport.diagnostics()
            transport.close()
            self.backend.release()
            raise SandboxStartError(f"the {self.backend.name} sandbox did not start ({problem})")
        self._transport = transport
        self.starts += 1

    def close(self) -> None:
        """Stop the agent and everything in the sandbox."""
        transport, self._transport = self._transport, None
        if self._program is not None:
            self._program.close_pipes()
        self._program = None
        for program in self._owed:
            program.ended = self._error_result("the sandbox closed before it reported how the program ended")
        self._owed.clear()
        if transport is not None:
            transport.close()
            self.backend.release()

    def request(self, message: tuple, timeout_s: float) -> tuple:
        """Send one command and wait for its answer (reading first the answers owed for programs
        released without waiting); SandboxError (and the sandbox closed) if it fails."""
        if self._transport is None:
            self.start()
        self._send(message)
        if self._owed and not self._settle():  # an owed answer said the sandbox was spent: it was replaced
            return self.request(message, timeout_s)
        reply = self._receive(message[0], timeout_s)
        if reply[0] == "error":
            raise CommandFailed(str(reply[1]))
        return reply

    def _send(self, message: tuple) -> None:
        try:
            self._transport.send(dumps(message))
        except OSError as e:
            self.close()
            raise SandboxError(f"the sandbox broke during {message[0]!r}: {type(e).__name__}: {e}") from e

    def _receive(self, what: str, timeout_s: float) -> tuple:
        """The agent's next answer (to the command `what`)."""
        try:
            frame = self._transport.recv(time.monotonic() + timeout_s)
            if frame is None:
                raise SandboxError(f"the sandbox agent exited ({self._transport.diagnostics()})")
            reply = safe_loads(frame)
            if not isinstance(reply, tuple) or not reply or not isinstance(reply[0], str):
                raise ProtocolError(f"malformed reply {reply!r:.100}")
        except (OSError, TimeoutError, ProtocolError, SandboxError) as e:
            self.close()
            if isinstance(e, SandboxError):
                raise
            raise SandboxError(f"the sandbox broke during {what!r}: {type(e).__name__}: {e}") from e
        return reply

    def settle(self) -> None:
        """Wait for the reports owed by programs released without waiting, so that a sandbox one of
        them left spent is replaced now rather than at the next command (SandboxError, and the
        sandbox closed, if the agent is gone)."""
        if self._transport is not None and self._owed:
            self._settle()

    def _settle(self) -> bool:
        """Read the answers owed for released programs, oldest first; False when one left the sandbox replaced."""
        starts = self.starts
        while self._owed:
            reply = self._receive("stop", START_TIMEOUT_S)
            program = self._owed.pop(0)
            program.ended = self._result(reply[1])  # a spent sandbox is replaced here
        return self.starts == starts and self._transport is not None

    def _replace(self, why: str) -> None:
        """Discard this sandbox and start a fresh one now (left closed if none starts: the next use says why)."""
        logger.warning("replacing the %s sandbox: %s", self.backend.name, why)
        self.close()
        try:
            self.start()
        except SandboxStartError as e:
            logger.warning("no replacement sandbox started yet: %s", e)

    def _result(self, info: dict) -> RunResult:
        """A run's result from the agent's report; a spent sandbox is replaced."""
        if not isinstance(info, dict):
            self.close()
            raise SandboxError("the agent sent a malformed run result")
        spent = str(info.get("spent") or "")
        if spent:
            self._replace(f"after a run, {spent}")
        started = info.get("started", True)
        return RunResult(
            exit_code=info.get("exit_code"), stdout=bytes(info.get("stdout", b"")),
            stderr=bytes(info.get("stderr", b"")), timed_out=bool(info.get("timed_out")),
            wall_s=float(info.get("wall_s", 0.0)), backend=self.backend.name,
            output_truncated=bool(info.get("output_truncated")),
            status="sandbox_error" if not started else "timeout" if info.get("timed_out") else "exited",
            message="" if started else f"the run could not start: {spent}",
        )

    def _begin(self, message: tuple, timeout_s: float) -> tuple:
        """Send a command that starts a run; once more in a fresh sandbox if the run could not start."""
        reply = self.request(message, timeout_s)
        if _never_started(reply):
            self.close()
            reply = self.request(message, timeout_s)
        return reply

    def run(
        self, argv: Sequence[str], stdin: bytes = b"", env: dict[str, str] | None = None,
        limits: Limits | dict | None = None,
    ) -> RunResult:
        """Run a command in the workspace to completion (or its deadline) and reset the sandbox.

        Never raises because of what the command did; SandboxStartError when no sandbox starts.
        """
        if not argv:
            raise ValueError("argv must name a command")
        self._end_program()
        run_limits = Limits.of(limits or self.limits)
        environment = {**agent_environment(), **(env or {})}
        try:
            reply = self._begin(("exec", list(argv), bytes(stdin), environment, run_limits.as_dict()),
                                run_limits.timeout_s + GRACE_S)
            if reply[0] != "result":
                raise SandboxError(f"unexpected reply {reply[0]!r} to exec")
            return self._result(reply[1])
        except SandboxStartError:
            raise
        except SandboxError as e:
            self.close()
            return self._error_result(str(e))

    def _error_result(self, message: str) -> RunResult:
        return RunResult(exit_code=None, stdout=b"", stderr=b"", timed_out=False, wall_s=0.0,
                         backend=self.backend.name, status="sandbox_error", message=message)

    def load(self, source: str, limits: Limits | dict | None = None) -> Program:
        """Start a Python program in a fresh child; its functions are then called through `Program.call`."""
        self._end_program()
        run_limits = Limits.of(limits or self.limits)
        started = time.monotonic()
        reply = self._begin(("load", source, run_limits.as_dict()), run_limits.timeout_s + GRACE_S)
        program = Program(self, started + run_limits.timeout_s + GRACE_S)
        if reply[0] == "loaded":
            program.pipes = self._transport.receive_call_fds()
        elif reply[0] == "load_error":
            program.load_error = (str(reply[1]), str(reply[2]))
        elif reply[0] in ("dead", "timeout"):
            program.ended = self._result(reply[1])
        else:
            self.close()
            raise SandboxError(f"unexpected reply {reply[0]!r} to load")
        self._program = program
        return program

    def _end_program(self) -> None:
        if self._program is not None:
            self._program.release()

    def snapshot(self) -> Snapshot:
        """The workspace's files now."""
        self._end_program()
        return Snapshot(bytes(self.request(("snapshot",), START_TIMEOUT_S)[1]))

    def restore(self, snapshot: Snapshot, as_base: bool = False) -> None:
        """Replace the workspace with a snapshot; `as_base` also makes it what every later run starts from."""
        self._end_program()
        self.request(("restore", snapshot.data, as_base), START_TIMEOUT_S)

    def reset(self) -> None:
        """Return the workspace to its base (empty unless a snapshot was restored `as_base`)."""
        self._end_program()
        reply = self.request(("reset",), START_TIMEOUT_S)
        if len(reply) > 1 and reply[1]:
            self._replace(f"after a reset, {reply[1]}")


def _never_started(reply: tuple) -> bool:
    """Whether the agent answered that it could not start the run at all (its template was gone)."""
    return reply[0] in ("result", "dead") and len(reply) > 1 and isinstance(reply[1], dict) and \
        reply[1].get("started") is False


class Program:
    """A Python program loaded in a sandbox: call its functions, then stop it (a context manager).

    Arguments and return values cross the boundary as plain values (None, bool, int, float,
    complex, str, bytes, containers of them, Decimal, Fraction, a few `collections` types);
    other objects stay in the sandbox and come back as `Remote` references. Lists, dicts and
    sets passed as arguments get the program's in-place changes copied back.

    Where the backend hands over the program's own call pipes (`pipes`: bubblewrap, process), calls
    go straight to the program; otherwise the agent relays each one.
    """

    def __init__(self, sandbox: Sandbox, host_deadline: float) -> None:
        self.sandbox = sandbox
        self.host_deadline = host_deadline
        self.load_error: tuple[str, str] | None = None
        self.ended: RunResult | None = None
        self.pipes: tuple[int, int] | None = None  # (the program's job pipe, its reply pipe), when handed over
        self.calls = 0

    def __enter__(self) -> Program:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call `name(*args, **kwargs)` in the sandbox; CandidateError if it raised, ProgramEnded if gone."""
        if self in self.sandbox._owed:
            self.stop()
        if self.ended is not None:
            raise ProgramEnded(self.ended)
        if self.load_error is not None:
            raise CandidateError(*self.load_error)
        self.calls += 1
        try:
            payload = dumps((name, args, kwargs))
        except Exception as e:  # noqa: BLE001 - an argument the wire cannot carry
            raise TypeError(f"cannot pass {name}'s arguments into the sandbox: {e}") from e
        try:
            answer = safe_loads(self._exchange(payload))
        except ProtocolError as e:
            raise CandidateError("TypeError", f"the program answered with something that is not a plain value ({e})") from None
        if type(answer) is tuple and len(answer) == 3 and answer[0] == "return":
            _copy_back(args, answer[2])
            return answer[1]
        if type(answer) is tuple and len(answer) == 3 and answer[0] == "raise" and all(type(a) is str for a in answer):
            raise CandidateError(answer[1], answer[2])
        raise CandidateError("TypeError", "the program answered with a malformed reply")

    def _exchange(self, payload: bytes) -> bytes:
        """One call's payload to the program, and its reply's; ProgramEnded when the program is gone."""
        if self.pipes is None:
            reply = self.sandbox.request(("call", payload), max(0.1, self.host_deadline - time.monotonic()))
            if reply[0] in ("dead", "timeout"):
                raise self._end(reply[1])
            if reply[0] != "reply" or len(reply) != 2 or not isinstance(reply[1], bytes):
                self.sandbox.close()
                raise SandboxError(f"unexpected reply {reply[0]!r} to a call")
            return reply[1]
        job, replies = self.pipes
        try:
            write_frame(job, payload, self.host_deadline)
            answer = read_frame(replies, self.host_deadline)
        except TimeoutError:  # the agent ends a program at its deadline, closing these pipes: it is lost
            self.sandbox.close()
            raise SandboxError("the sandbox did not end its program at the deadline") from None
        except (OSError, ProtocolError):
            answer = None
        if answer is None:  # the program is gone (or broke the framing): the agent says how it ended
            raise self._end(self.sandbox.request(("stop",), START_TIMEOUT_S)[1])
        return answer

    def _end(self, info: dict) -> ProgramEnded:
        """Record how the program ended (from the agent's report); the exception that says so."""
        self.close_pipes()
        self.ended = self.sandbox._result(info)
        if self.sandbox._program is self:
            self.sandbox._program = None
        return ProgramEnded(self.ended)

    def close_pipes(self) -> None:
        """Close this host's ends of the program's call pipes, if it holds them."""
        pipes, self.pipes = self.pipes, None
        for fd in pipes or ():
            os.close(fd)

    def stop(self) -> RunResult:
        """Kill the program and everything it started; its exit status and output."""
        if self in self.sandbox._owed:
            self.sandbox._settle()
        if self.ended is None:
            self.close_pipes()
            self._end(self.sandbox.request(("stop",), START_TIMEOUT_S)[1])
        return self.ended

    def release(self) -> None:
        """Stop the program without waiting: the agent kills it and resets the sandbox while this
        host goes on; its report is read before the sandbox's next command's answer, or by `stop`."""
        box = self.sandbox
        if self.ended is not None or self in box._owed:
            return
        if box._program is not self or box._transport is None:  # its sandbox moved on: stop it as usual
            self.stop()
            return
        self.close_pipes()
        box._program = None
        box._send(("stop",))
        box._owed.append(self)


def _copy_back(sent: tuple, returned: Any) -> None:
    """Apply the program's in-place changes to list, dict and set arguments."""
    if type(returned) is not tuple or len(returned) != len(sent):
        return
    for original, after in zip(sent, returned):
        if type(original) is list and type(after) is list:
            original[:] = after
        elif type(original) is dict and type(after) is dict:
            original.clear()
            original.update(after)
        elif type(original) is set and type(after) is set:
            original.clear()
            original.update(after)


__all__ = ["CandidateError", "CommandFailed", "Program", "ProgramEnded", "Remote", "Sandbox", "SandboxError",
           "SandboxStartError", "Snapshot"]
