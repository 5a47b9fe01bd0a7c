"""The `local` backend: worker processes on this machine, each the leader of its own process group.

Workers are forked from multiprocessing's fork server (a clean interpreter, so they do not
inherit the caller's torch/OpenMP threads, and a replacement starts in milliseconds). Each
worker leads a new process group, so killing the group also kills anything a job started
(a sandbox, a subprocess); the kernel kills it when the fork server, which exits with the
caller, dies; its address space may be capped. Jobs reach a worker in chunks over a pipe and
each result comes back as soon as it is ready.

With `isolate_jobs`, each job runs in a fork of its worker, made after the worker loaded the job functions,
and the fork exits with the job: nothing a job leaves in its process (a module's global, a patched function, a
file it kept open, a thread) reaches the next job, at the cost of a fork per job (about a millisecond). A fork
that dies makes its job an infrastructure failure (retried), as a dying worker does.

With `hash_seed` set, workers are spawned instead (fresh interpreters, slower to start) with
`PYTHONHASHSEED` set to it: string hashing, and so the iteration order of sets of strings, is then
the same in every run, which jobs whose output follows such an order need to repeat (a fork server's
children all share the hash seed it drew when it started).
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import resource
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from rlvr_factory.scheduler.backend import Event
from rlvr_factory.scheduler.worker import JobRunner, unsendable

_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_ENVIRON_LOCK = threading.Lock()


@dataclass(eq=False)
class LocalWorker:
    """One worker process and the parent's end of its pipe."""

    process: BaseProcess
    conn: Connection


class LocalBackend:
    """Worker processes on this machine; `memory_limit_mb` caps each one's address space (None: no cap);
    `serialize` pickles job functions for the workers."""

    name = "local"
    max_chunk = 64  # jobs sent in one message when jobs are short
    deadline_grace = 0.0  # the scheduler itself kills a worker at its job's deadline

    def __init__(
        self, memory_limit_mb: int | None = 4096, serialize: Callable[[Any], bytes] = pickle.dumps,
        hash_seed: int | None = None, isolate_jobs: bool = False,
    ) -> None:
        if memory_limit_mb is not None and memory_limit_mb <= 0:
            raise ValueError(f"memory_limit_mb must be positive or None, got {memory_limit_mb}")
        if hash_seed is not None and (isinstance(hash_seed, bool) or not isinstance(hash_seed, int)
                                      or not 0 <= hash_seed <= 4294967295):
            raise ValueError(f"hash_seed must be an integer in [0, 4294967295] (PYTHONHASHSEED) or None, got {hash_seed!r}")
        self.memory_limit_mb = memory_limit_mb
        self.hash_seed = hash_seed
        self.isolate_jobs = isolate_jobs
        self._serialize = serialize
        if hash_seed is not None:
            self._context = multiprocessing.get_context("spawn")
        elif sys.platform.startswith("linux") or sys.platform == "darwin":
            self._context = multiprocessing.get_context("forkserver")
            # the main module too, so a new worker does not import it again (spawn semantics, once)
            self._context.set_forkserver_preload(["__main__", "rlvr_factory.scheduler.worker"])
        else:
            self._context = multiprocessing.get_context("spawn")

    def serialize(self, fn: Any) -> bytes:
        """A job function as bytes (plain pickle by default: by reference, its module imported in the worker)."""
        return self._serialize(fn)

    def start(self, definitions: dict[int, bytes]) -> LocalWorker:
        """A new worker holding these job functions; it reports `ready` once it can take jobs."""
        parent_conn, child_conn = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main, args=(child_conn, definitions, self.memory_limit_mb, self.isolate_jobs),
            name="scheduler-worker", daemon=True,
        )
        if self.hash_seed is None:
            process.start()
        else:
            with _ENVIRON_LOCK:  # a spawned interpreter reads PYTHONHASHSEED from the environment it inherits
                before = os.environ.get("PYTHONHASHSEED")
                os.environ["PYTHONHASHSEED"] = str(self.hash_seed)
                try:
                    process.start()
                finally:
                    if before is None:
                        del os.environ["PYTHONHASHSEED"]
                    else:
                        os.environ["PYTHONHASHSEED"] = before
        child_conn.close()  # so the parent reads EOF when the worker dies
        return LocalWorker(process, parent_conn)

    def send(
        self, worker: LocalWorker, definitions: dict[int, bytes], jobs: list[tuple[int, int, Any, float]]
    ) -> bool:
        """Send new job functions and a chunk of jobs; False when the worker is gone."""
        try:
            worker.conn.send((definitions, jobs))
        except (OSError, EOFError):
            return False
        return True

    def poll(self, workers: list[LocalWorker], timeout: float) -> list[Event]:
        """What the workers said within `timeout` seconds, in order per worker."""
        if not workers:
            time.sleep(timeout)
            return []
        by_conn = {w.conn: w for w in workers}
        events: list[Event] = []
        for conn in wait(list(by_conn), timeout=timeout):
            worker = by_conn[conn]
            try:
                while True:
                    message = conn.recv()
                    events.append((message[0], worker, None) if len(message) == 1 else ("result", worker, message))
                    if not conn.poll():
                        break
            except (EOFError, OSError):
                self.stop(worker)
                events.append(("lost", worker, f"the worker process exited with code {worker.process.exitcode}"))
        return events

    def stop(self, worker: LocalWorker) -> None:
        """Kill a worker's whole process group and reap the worker."""
        try:
            os.killpg(worker.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the worker has not made its group yet, or the group is gone
        worker.process.kill()
        worker.process.join()
        worker.conn.close()

    def close(self) -> None:
        """Nothing beyond the workers, which the scheduler stops."""


def _worker_main(conn: Connection, definitions: dict[int, bytes], memory_limit_mb: int | None,
                 isolate_jobs: bool = False) -> None:
    """A worker's life: lead a new process group, die with the parent, then run jobs until EOF."""
    os.setsid()
    _release_fork_server()
    _die_with_parent()
    if memory_limit_mb is not None:
        limit = memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a blowup raises MemoryError here
    runner = JobRunner()
    runner.define(definitions)
    conn.send(("ready",))
    while True:
        try:
            definitions, jobs = conn.recv()
        except (EOFError, OSError):  # the scheduler closed
            return
        if definitions:
            runner.define(definitions)
            conn.send(("started",))
        for job_id, fn_id, payload, _ in jobs:
            if isolate_jobs:
                conn.send_bytes(_run_in_fork(runner, job_id, fn_id, payload))
                continue
            result = runner.run(job_id, fn_id, payload)
            try:
                conn.send(result)
            except Exception as e:  # noqa: BLE001  # an unpicklable return value
                conn.send(unsendable(result, e))


def _run_in_fork(runner: JobRunner, job_id: int, fn_id: int, payload: Any) -> bytes:
    """One job in a fork of this worker, which exits with it; its pickled result (an `infra` one when the fork
    died before it answered: killed, out of memory, `os._exit`)."""
    started = time.monotonic()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the job's process: run, answer, exit without running anything of the worker's
        code = 1
        try:
            os.close(read)
            result = runner.run(job_id, fn_id, payload)
            try:
                answer = pickle.dumps(result)
            except Exception as e:  # noqa: BLE001  # an unpicklable return value
                answer = pickle.dumps(unsendable(result, e))
            with os.fdopen(write, "wb") as out:
                out.write(answer)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        data = answer.read()
    _, status = os.waitpid(pid, 0)
    if data and os.waitstatus_to_exitcode(status) == 0:
        return data
    how = os.waitstatus_to_exitcode(status)
    reason = f"killed by signal {-how}" if how < 0 else f"exited with code {how}"
    return pickle.dumps((job_id, "infra", f"the job's process {reason} before it answered", started, time.monotonic()))


def _release_fork_server() -> None:
    """Close this worker's copy of the fork server's liveness pipe, which the fork server hands to every
    child: the fork server exits when the caller does only once no worker holds the pipe open."""
    server = multiprocessing.forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def _die_with_parent() -> None:
    """Have the kernel kill this process when its parent exits (Linux), else watch the parent from a thread."""
    parent_pid = os.getppid()
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:  # the parent died while the kernel was being told
        os._exit(1)


def _watch_parent(parent_pid: int) -> None:
    """Exit this process once its parent is gone."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)
