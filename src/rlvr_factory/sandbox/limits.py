"""What a sandboxed run may use, and what a finished run reports."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping


@dataclass(frozen=True)
class Limits:
    """Limits on every run: wall clock, CPU, memory, processes, file size, open files, captured output."""

    timeout_s: float = 10.0  # wall-clock seconds; the run's whole process tree is killed after it
    cpu_s: int = 10  # CPU seconds per process (RLIMIT_CPU)
    memory_mb: int = 1024  # address space per process (RLIMIT_AS)
    nproc: int = 32  # processes of the sandbox user (RLIMIT_NPROC)
    file_size_mb: int = 16  # largest file a process may write (RLIMIT_FSIZE)
    open_files: int = 64  # file descriptors per process (RLIMIT_NOFILE)
    output_bytes: int = 1 << 20  # stdout and stderr each kept up to this many bytes, the rest dropped

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"limit {f.name} must be a positive finite number, got {value!r}")
        if self.open_files < 16:
            raise ValueError(f"open_files must be at least 16 (a Python process needs them), got {self.open_files}")

    @classmethod
    def of(cls, value: Limits | Mapping[str, Any] | None, **overrides: Any) -> Limits:
        """Limits from a Limits, a mapping of some of its fields (the rest default) or None, with overrides."""
        base = value if isinstance(value, Limits) else cls(**dict(value or {}))
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


RUN_STATUSES = ("exited", "timeout", "sandbox_error")


@dataclass(frozen=True)
class RunResult:
    """How a sandboxed command ended: exit code (negative: killed by that signal), output, time, backend.

    `status` is `exited` (the command ended by itself or by a limit; see `exit_code`), `timeout`
    (killed at the wall-clock deadline) or `sandbox_error` (the sandbox failed, not the command;
    `message` says why, and the sandbox is replaced before its next run).
    """

    exit_code: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    wall_s: float
    backend: str
    output_truncated: bool = False
    status: str = "exited"
    message: str = ""

    def __post_init__(self) -> None:
        if self.status not in RUN_STATUSES:
            raise ValueError(f"status must be one of {RUN_STATUSES}, got {self.status!r}")

    def as_json(self) -> dict[str, Any]:
        """The result as JSON-ready values (output decoded as UTF-8 with replacement)."""
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout.decode("utf-8", "replace"),
            "stderr": self.stderr.decode("utf-8", "replace"),
            "timed_out": self.timed_out,
            "wall_s": round(self.wall_s, 6),
            "backend": self.backend,
            "output_truncated": self.output_truncated,
            "status": self.status,
            "message": self.message,
        }
