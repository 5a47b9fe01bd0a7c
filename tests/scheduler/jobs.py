"""Job functions for the scheduler tests: a light module (stdlib only), so workers load it fast."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlvr_factory.scheduler import InfraError


def echo(value):
    return value


def pid(_):
    return os.getpid()


def string_hash(text):
    """This worker's hash of `text` (salted per interpreter unless PYTHONHASHSEED is fixed)."""
    return hash(text)


def pid_after(seconds):
    """Sleep, then return this worker's pid."""
    time.sleep(seconds)
    return os.getpid()


def timed(seconds):
    """Busy for `seconds`; return the (start, end) of that span in monotonic time."""
    start = time.monotonic()
    time.sleep(seconds)
    return start, time.monotonic()


def sleep_then(payload):
    """Sleep `seconds`, then return `value`."""
    seconds, value = payload
    time.sleep(seconds)
    return value


def hang(_):
    time.sleep(3600)


def fail(message):
    raise ValueError(message)


def unpicklable_result(_):
    return lambda: None


def kill_self(_):
    os.kill(os.getpid(), signal.SIGKILL)


def counted(payload):
    """Record one execution in `path` (one line per run), then return `value`."""
    path, value = payload
    with open(path, "a") as f:
        f.write("run\n")
    return value


def infra_until(payload):
    """Raise InfraError until this job has run `failures` times (counted in `path`), then return 'ok'."""
    path, failures = payload
    counted((path, None))
    runs = len(Path(path).read_text().splitlines())
    if runs <= failures:
        raise InfraError(f"sandbox failed to start (run {runs})")
    return "ok"


def grade(payload):
    """A genuine verdict: whether `answer` equals `gold` (a wrong answer is a result, not a failure)."""
    answer, gold, path = payload
    counted((path, None))
    return answer == gold


def failing_test(path):
    """A genuinely failing unit test: the job raises AssertionError, like a test that does not pass."""
    counted((path, None))
    assert 1 + 1 == 3, "expected 3"


def grandchild_then_hang(pid_file):
    """Start a subprocess that sleeps forever, record its pid, then hang."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1e6)"])
    Path(pid_file).write_text(str(child.pid))
    time.sleep(3600)


def chaos(payload):
    """The fault-injection job: `kill` SIGKILLs its own worker mid-job on its first run (a marker file
    in `marker_dir` remembers), `hang` never returns, `raise` raises, `ok` returns its index."""
    kind, index, marker_dir = payload
    if kind == "kill":
        try:
            os.close(os.open(os.path.join(marker_dir, str(index)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return index
        time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(3600)
    if kind == "raise":
        raise ValueError(f"job {index} failed on purpose")
    return index


LEFT_BEHIND = []  # what jobs append here stays in their worker, unless each job runs in a fork of it


def remember(value):
    """Leave `value` in this process's memory; everything left so far."""
    LEFT_BEHIND.append(value)
    return list(LEFT_BEHIND)


def exit_now(code):
    os._exit(code)
