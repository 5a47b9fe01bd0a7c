"""How each backend starts the agent: bubblewrap namespaces, a Docker container, or a plain process.

A backend only launches `agent.py` and returns a `Transport` to it; everything after that
(the command protocol, limits, snapshots, the judge) is shared by all of them.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import platform
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Protocol

from rlvr_factory.sandbox.agent import _HEADER, MAX_MESSAGE_BYTES, ProtocolError, read_frame, write_frame

logger = logging.getLogger(__name__)

AGENT = Path(__file__).with_name("agent.py")
# The directory that holds the `rlvr_factory` package (src/ of a checkout): read-only in every sandbox, so
# that a scoring server there imports the same verifier code as the host (verifiers/isolation.py).
PACKAGE_ROOT = Path(__file__).resolve().parents[2]
WORKSPACE = "/workspace"  # the writable directory inside bubblewrap and Docker sandboxes
UID_BASE = 200_000  # as root, each bubblewrap sandbox runs under its own uid from here on
UID_LOCKS = Path(tempfile.gettempdir()) / "rlvr-sandbox-uids"
SCRATCH = (WORKSPACE, "/tmp", "/dev/shm")  # the writable roots a reset empties
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "nsswitch.conf",
        "os-release", "mime.types", "hosts", "ssl")


class SandboxError(RuntimeError):
    """The sandbox itself failed (it died, hung or broke the protocol); not the program it ran."""


class SandboxStartError(SandboxError):
    """A sandbox could not be started: the backend is missing or refused."""


class UnsafeSandboxWarning(UserWarning):
    """The `process` backend isolates nothing: only rlimits stand between the program and the host."""


class Transport(Protocol):
    """A framed, bidirectional byte channel to a running agent."""

    def send(self, payload: bytes) -> None: ...

    def recv(self, deadline: float | None) -> bytes | None: ...

    def close(self) -> None: ...

    def diagnostics(self) -> str: ...

    def receive_call_fds(self) -> tuple[int, int] | None: ...


def agent_environment() -> dict[str, str]:
    """The environment of everything inside a sandbox: this interpreter first on PATH, fixed hash seed."""
    python_bin = str(Path(sys.executable).parent)
    return {
        "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": WORKSPACE,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
    }


CALL_FDS = 2  # a loaded program's call channel, as the agent hands it to the host: (its job pipe, its reply pipe)


class PipeTransport:
    """The agent as a local child process, framed messages over its stdin and stdout.

    A second socket, the fd channel (its number in the sandbox is `channel_fd`), carries a loaded
    program's own call pipes from the agent to the host, so that calls go straight to the program.
    """

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, cleanup: list[Path] = (),
                 pass_fds: tuple[int, ...] = ()) -> None:
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.channel_fd = theirs.fileno()
        self.channel.setblocking(False)  # read only for what is already there
        try:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, start_new_session=True, pass_fds=(*pass_fds, self.channel_fd),
            )
        except OSError as e:
            self.channel.close()
            raise SandboxStartError(f"cannot start {argv[0]!r}: {e}") from e
        finally:
            theirs.close()
            for fd in pass_fds:
                os.close(fd)
        self.cleanup = list(cleanup)

    def receive_call_fds(self) -> tuple[int, int] | None:
        """The call pipes the agent handed over with its last `loaded` reply (older ones are closed);
        None when there are none, or they are not two pipes."""
        latest: list[int] = []
        while True:
            try:
                _, fds, _, _ = socket.recv_fds(self.channel, 16, CALL_FDS)
            except (BlockingIOError, OSError):
                break
            for fd in latest:
                os.close(fd)
            latest = fds
        if len(latest) == CALL_FDS and all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in latest):
            return latest[0], latest[1]
        for fd in latest:
            os.close(fd)
        return None

    def send(self, payload: bytes) -> None:
        write_frame(self.process.stdin.fileno(), payload)

    def recv(self, deadline: float | None) -> bytes | None:
        return read_frame(self.process.stdout.fileno(), deadline)

    def diagnostics(self) -> str:
        if self.process.poll() is None:
            try:
                self.process.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                return "the agent is still running"
        err = self.process.stderr.read(4000).decode("utf-8", "replace").strip()
        return f"exit code {self.process.returncode}: {err or '(no stderr)'}"

    def close(self) -> None:
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process.stderr.close()
        self.channel.close()
        for path in self.cleanup:
            shutil.rmtree(path, ignore_errors=True)


class Backend(Protocol):
    """Starts one agent; `config` (sent to it first) says where its workspace is and whom to run as."""

    name: str

    def launch(self, workspace_mb: int) -> tuple[Transport, dict]: ...

    def release(self) -> None: ...


def _allocate_uid() -> tuple[int, int]:
    """A uid no other live sandbox on this host holds, and the fd of the lock that holds it."""
    UID_LOCKS.mkdir(mode=0o700, exist_ok=True)
    for uid in range(UID_BASE, UID_BASE + 10_000):
        fd = os.open(UID_LOCKS / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return uid, fd
        except BlockingIOError:
            os.close(fd)
    raise SandboxStartError(f"all sandbox uids from {UID_BASE} are in use; close some sandboxes")


def _follow(path: str, links: dict[str, str], depth: int = 0) -> str:
    """The real path of an absolute `path`, recording every symlink met on the way in `links` (path -> target)."""
    if depth > 40:
        raise SandboxStartError(f"too many levels of symbolic links resolving {path}")
    current = "/"
    parts = Path(path).parts[1:]
    for i, part in enumerate(parts):
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            links[candidate] = target
            rest = os.path.join(os.path.dirname(candidate), target, *parts[i + 1:])
            return _follow(os.path.normpath(rest), links, depth + 1)
        current = candidate
    return current


def python_installation() -> tuple[list[str], dict[str, str]]:
    """Where this interpreter lives: the real directories to bind read-only (the venv and its base
    prefix, symlinks resolved, outside the system directories every sandbox has) and the symlinks on the
    way to them, which the sandbox recreates so that the interpreter's own paths work. This package's
    source root (`PACKAGE_ROOT`) is not among them: a sandbox that imports the package (the scoring
    server) binds it with `read_only`, and no other sandbox sees a clone of the project (under `/tmp`, say)."""
    links: dict[str, str] = {}
    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))}
    real = {_follow(os.path.abspath(p), links) for p in places}
    outside = sorted(r for r in real if r != "/" and not any(r == t or r.startswith(t + "/") for t in _SYSTEM))
    dirs = [r for r in outside if not any(r.startswith(o + "/") for o in outside)]
    keep = {k: v for k, v in links.items() if not any(k == t or k.startswith(t + "/") for t in _SYSTEM)}
    return dirs, keep


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path.startswith(r + "/") for r in roots)


# Kernel keyrings outlive the processes that fill them (a user's keyring, a persistent keyring),
# so the bubblewrap sandbox refuses the three keyring calls with a seccomp filter.
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
_KEYRING_CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}  # add_key, request_key, keyctl
_X32_BIT = 0x40000000


def seccomp_filter(machine: str | None = None) -> bytes | None:
    """A classic-BPF seccomp program refusing the keyring calls (and any other ABI's calls) with EPERM;
    None on an architecture without a table here."""
    machine = machine or platform.machine()
    if machine not in _AUDIT_ARCH:
        return None
    load, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, ...|BPF_JGE, BPF_RET
    allow, refuse = 0x7FFF0000, 0x00050000 | errno.EPERM  # SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM
    calls = _KEYRING_CALLS[machine]
    program = [(load, 0, 0, 4), (jeq, 1, 0, _AUDIT_ARCH[machine]), (ret, 0, 0, refuse), (load, 0, 0, 0)]
    if machine == "x86_64":
        program.append((jge, len(calls) + 1, 0, _X32_BIT))
    program += [(jeq, len(calls) - i, 0, nr) for i, nr in enumerate(calls)]
    program += [(ret, 0, 0, allow), (ret, 0, 0, refuse)]
    return b"".join(struct.pack("HBBI", *instruction) for instruction in program)


class BubblewrapBackend:
    """New PID, network, IPC, UTS (and, unprivileged, user) namespaces; a read-only minimal system view;
    size-limited tmpfs for /workspace, /tmp and /dev/shm. Run as root, each sandbox gets its own uid
    (so the process limit counts its processes alone) and drops every capability."""

    name = "bubblewrap"

    def __init__(self, bwrap: str = "bwrap", read_only: tuple[str, ...] = ()) -> None:
        self.read_only = tuple(str(Path(p).resolve()) for p in read_only)  # more host directories, bound read-only
        self.bwrap = shutil.which(bwrap)
        if self.bwrap is None:
            raise SandboxStartError(
                f"bubblewrap ({bwrap!r}) is not installed; install it (apt-get install -y bubblewrap) "
                "or choose another backend"
            )
        self._lock: int | None = None

    def argv(self, workspace_mb: int, uid: int | None, seccomp_fd: int | None = None) -> list[str]:
        """The bwrap command line that runs the agent."""
        size = str(workspace_mb * 1024 * 1024)
        argv = [self.bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
                "--unshare-cgroup-try", "--as-pid-1", "--new-session", "--hostname", "sandbox", "--clearenv"]
        for key, value in agent_environment().items():
            argv += ["--setenv", key, value]
        if uid is None:
            argv += ["--unshare-user", "--uid", "65534", "--gid", "65534", "--cap-drop", "ALL"]
        else:  # privileged bwrap: the agent chowns its workspace, then drops to `uid` and loses these too
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                     "--cap-add", "CAP_CHOWN"]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        for top in _SYSTEM:
            if os.path.islink(top):
                argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                argv += ["--ro-bind", top, top]
        argv += ["--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/opt"]
        for name in _ETC:
            argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        argv += ["--ro-bind", str(AGENT), "/opt/rlvr/agent.py", "--proc", "/proc", "--dev", "/dev"]
        argv += ["--perms", "0700", "--size", size, "--tmpfs", WORKSPACE]
        for path in ("/tmp", "/dev/shm"):  # like the host's: anyone may write, only owners remove
            argv += ["--perms", "1777", "--size", size, "--tmpfs", path]
        dirs, links = python_installation()
        dirs = [*dirs, *(p for p in self.read_only if not any(p == d or p.startswith(d + "/") for d in dirs))]
        made: set[str] = set()
        for path in [*dirs, *links]:  # after the tmpfs mounts, so that an installation under /tmp stays visible
            for parent in map(str, reversed(Path(path).parents[:-1])):  # traversable even where the host's is not
                if parent not in made and parent not in SCRATCH:
                    made.add(parent)
                    argv += ["--perms", "0755", "--dir", parent]
            if path in links:
                argv += ["--symlink", links[path], path]
            else:
                argv += ["--ro-bind", path, path]
        argv += ["--remount-ro", "/", "--remount-ro", "/dev"]  # nothing outside the tmpfs roots is writable
        argv += ["--chdir", WORKSPACE, "--", sys.executable, "-I", "/opt/rlvr/agent.py"]
        return argv

    def launch(self, workspace_mb: int) -> tuple[Transport, dict]:
        uid = None
        if os.geteuid() == 0:
            uid, self._lock = _allocate_uid()
        program = seccomp_filter()
        fds: tuple[int, ...] = ()
        if program is None:
            logger.warning("no seccomp table for %s: sandboxed programs can use kernel keyrings", platform.machine())
        else:
            read_end, write_end = os.pipe()
            os.write(write_end, program)
            os.close(write_end)
            fds = (read_end,)
        transport = PipeTransport(self.argv(workspace_mb, uid, fds[0] if fds else None), pass_fds=fds)
        dirs, links = python_installation()
        keep = [p for p in [*dirs, *self.read_only, *links] if _under(p, SCRATCH)]
        return transport, {"workspace": WORKSPACE, "scratch": ["/tmp", "/dev/shm"], "uid": uid, "keep": keep,
                           "private_ipc": True, "channel_fd": transport.channel_fd}

    def release(self) -> None:
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


class ProcessBackend:
    """The agent as a plain child process with rlimits on what it runs, and a temporary directory.

    Not isolation: the program sees the host's files, network and processes. Choose it explicitly,
    only for trusted code on machines with neither bubblewrap nor Docker.
    """

    name = "process"

    def __init__(self) -> None:
        message = ("the 'process' sandbox backend isolates NOTHING: programs run as this user with "
                   "host file, network and process access, under rlimits only. Use bubblewrap or docker "
                   "for untrusted code.")
        warnings.warn(message, UnsafeSandboxWarning, stacklevel=3)
        logger.warning(message)

    def launch(self, workspace_mb: int) -> tuple[Transport, dict]:
        workspace = Path(tempfile.mkdtemp(prefix="rlvr-sandbox-"))
        env = {**agent_environment(), "HOME": str(workspace), "TMPDIR": str(workspace)}
        transport = PipeTransport([sys.executable, "-I", str(AGENT)], env=env, cleanup=[workspace])
        return transport, {"workspace": str(workspace), "scratch": [], "uid": None, "channel_fd": transport.channel_fd}

    def release(self) -> None:
        pass


class DockerTransport:
    """Framed messages over a container's attached stdin and (multiplexed) stdout."""

    def __init__(self, container, sock) -> None:
        self.container, self.sock = container, sock
        self.raw = getattr(sock, "_sock", sock)
        self.buffer = bytearray()

    def send(self, payload: bytes) -> None:
        self.raw.sendall(_HEADER.pack(len(payload)) + payload)

    def _fill(self, deadline: float | None) -> bool:
        """Append the next stdout chunk of the multiplexed stream to the buffer; False at end of stream."""
        import time

        while True:
            self.raw.settimeout(None if deadline is None else max(0.001, deadline - time.monotonic()))
            try:
                header = self._exact(8)
                if header is None:
                    return False
                stream, size = header[0], int.from_bytes(header[4:8], "big")
                body = self._exact(size)
            except socket.timeout:
                raise TimeoutError from None
            if body is None:
                return False
            if stream == 1:
                self.buffer += body
                return True

    def _exact(self, n: int) -> bytes | None:
        data = bytearray()
        while len(data) < n:
            chunk = self.raw.recv(n - len(data))
            if not chunk:
                return None
            data += chunk
        return bytes(data)

    def recv(self, deadline: float | None) -> bytes | None:
        while len(self.buffer) < _HEADER.size:
            if not self._fill(deadline):
                return None
        (size,) = _HEADER.unpack(self.buffer[: _HEADER.size])
        if size > MAX_MESSAGE_BYTES:
            raise ProtocolError(f"a {size}-byte frame exceeds the limit")
        while len(self.buffer) < _HEADER.size + size:
            if not self._fill(deadline):
                raise ProtocolError("the stream ended inside a frame")
        payload = bytes(self.buffer[_HEADER.size : _HEADER.size + size])
        del self.buffer[: _HEADER.size + size]
        return payload

    def receive_call_fds(self) -> None:
        """None: descriptors cannot cross into a container's attach socket, so calls go through the agent."""
        return None

    def diagnostics(self) -> str:
        try:
            return self.container.logs(stdout=False, stderr=True, tail=50).decode("utf-8", "replace")
        except Exception as e:  # noqa: BLE001 - diagnostics only
            return f"(no logs: {e})"

    def close(self) -> None:
        try:
            self.raw.close()
        finally:
            try:
                self.container.remove(force=True)
            except Exception:  # noqa: BLE001 - the container may be gone already
                pass


class DockerBackend:
    """A container per sandbox through the Docker SDK: no network, read-only root, all capabilities
    dropped, memory/CPU/PID limits, tmpfs workspace; the agent is PID 1 and is passed in on the command line."""

    name = "docker"

    def __init__(self, image: str = "python:3.11-slim", memory_mb: int = 2048, cpus: float = 1.0, pids: int = 64) -> None:
        try:
            import docker
        except ImportError as e:
            raise SandboxStartError("the docker backend needs the Docker SDK: pip install 'rlvr_factory[docker]'") from e
        try:
            self.client = docker.from_env()
            self.client.ping()
        except Exception as e:  # noqa: BLE001 - every way of not reaching the engine means the same
            raise SandboxStartError(f"no Docker engine is reachable ({type(e).__name__}: {e})") from e
        self.image, self.memory_mb, self.cpus, self.pids = image, memory_mb, cpus, pids

    def launch(self, workspace_mb: int) -> tuple[Transport, dict]:
        tmpfs = f"size={workspace_mb}m,mode=1777"
        try:
            container = self.client.containers.create(
                self.image, command=["python3", "-I", "-c", AGENT.read_text()], stdin_open=True,
                network_disabled=True, read_only=True, user="65534:65534", cap_drop=["ALL"],
                security_opt=["no-new-privileges"], mem_limit=f"{self.memory_mb}m",
                nano_cpus=int(self.cpus * 1e9), pids_limit=self.pids, working_dir=WORKSPACE,
                tmpfs={WORKSPACE: tmpfs, "/tmp": tmpfs, "/dev/shm": tmpfs},
                environment={k: v for k, v in agent_environment().items() if k != "PATH"},
            )
            sock = container.attach_socket(params={"stdin": 1, "stdout": 1, "stream": 1})
            container.start()
        except Exception as e:  # noqa: BLE001
            raise SandboxStartError(f"docker could not start a sandbox container: {e}") from e
        return DockerTransport(container, sock), {"workspace": WORKSPACE, "scratch": ["/tmp", "/dev/shm"], "uid": None,
                                                  "private_ipc": True}

    def release(self) -> None:
        pass


BACKENDS = {"bubblewrap": BubblewrapBackend, "docker": DockerBackend, "process": ProcessBackend}
DEFAULT_BACKEND = "bubblewrap"


def make_backend(name: str, **options) -> Backend:
    """The backend called `name` (bubblewrap, docker or process), built with its options."""
    if name not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {name!r}; choose one of {sorted(BACKENDS)}")
    return BACKENDS[name](**options)
