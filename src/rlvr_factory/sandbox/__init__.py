"""Run untrusted programs in isolation: one interface, three backends, limits, snapshots, a warm pool.

Backends: `bubblewrap` (the default on Linux: new user/PID/network/IPC/UTS namespaces, a read-only
minimal view of the system, size-limited tmpfs workspace), `docker` (through the Docker SDK, when
an engine is reachable) and `process` (rlimits only; not isolation, so it must be chosen explicitly
and warns). Every run has a wall-clock timeout and CPU, memory, process, file-size, open-file and
captured-output limits. See `core.Sandbox`, `core.Program` and `pool.SandboxPool`.
"""

from rlvr_factory.sandbox.agent import Remote
from rlvr_factory.sandbox.backends import (
    BACKENDS,
    DEFAULT_BACKEND,
    SandboxError,
    SandboxStartError,
    UnsafeSandboxWarning,
    make_backend,
)
from rlvr_factory.sandbox.core import CandidateError, CommandFailed, Program, ProgramEnded, Sandbox, Snapshot
from rlvr_factory.sandbox.limits import Limits, RunResult
from rlvr_factory.sandbox.pool import SandboxPool

__all__ = [
    "BACKENDS", "DEFAULT_BACKEND", "CandidateError", "CommandFailed", "Limits", "Program", "ProgramEnded", "Remote", "RunResult",
    "Sandbox", "SandboxError", "SandboxPool", "SandboxStartError", "Snapshot", "UnsafeSandboxWarning", "make_backend",
]
