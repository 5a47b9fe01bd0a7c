"""Red team on a warm sandbox: nothing one run does reaches the next one.

Three classes of attack, each run in a warm sandbox and followed by a probe that looks for what
the attack tried to leave behind, and by an honest run that must be unaffected:
- state left behind: files the reset cannot walk or remove, System V IPC objects, POSIX message
  queues, kernel keys;
- memory: a program reading its own memory for an earlier run's source, inputs or outputs;
- a run that breaks the sandbox: `Sandbox.run` returns a result with a status, never raises, and
  `rlvr sandbox run --json` prints its JSON whatever happened.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr_factory.sandbox import Limits, Sandbox
from rlvr_factory.sandbox.backends import python_installation
from tests.sandbox.procs import needs_bwrap, sandbox_agents

pytestmark = needs_bwrap

PY = "python3"
RLVR = Path(sys.executable).with_name("rlvr")
SECRET = "hunter2-" + "x7q"  # what every attack tries to pass on; probes look for it
KEY_NAME = f"leak-{os.getpid()}-{time.time_ns()}"
# What of /tmp is the sandbox's own: the way to this interpreter, when it is installed under /tmp.
OWN = sorted({Path(p).relative_to("/tmp").parts[0] for p in [*python_installation()[0], *python_installation()[1]]
              if p.startswith("/tmp/")})


@pytest.fixture(scope="module")
def box():
    with Sandbox(limits=Limits(timeout_s=10, cpu_s=10, memory_mb=512, nproc=16), workspace_mb=16) as sandbox:
        yield sandbox


def run_py(box: Sandbox, code: str, **limits) -> object:
    return box.run([PY, "-c", code], limits=Limits(**{"timeout_s": 10, "cpu_s": 10, "memory_mb": 512, **limits}))


def honest_run_is_unaffected(box: Sandbox) -> None:
    """A correct program still runs and sees an empty workspace, /tmp and /dev/shm."""
    result = run_py(box, f"import os; print([sorted(set(os.listdir(d)) - set({OWN!r})) for d in ('.', '/tmp', '/dev/shm')], 6 * 7)")
    assert (result.status, result.exit_code, result.stdout) == ("exited", 0, b"[[], [], []] 42\n"), result
    with box.load("def add(a, b):\n    return a + b\n") as program:
        assert program.call("add", 2, 3) == 5


# -- state left behind ----------------------------------------------------------------------------

FIND_SECRET = f"""
import os
found = []
for top in ('/workspace', '/tmp', '/dev/shm'):
    for root, dirs, files in os.walk(top):
        if root == '/tmp':
            dirs[:] = [d for d in dirs if d not in {OWN!r}]
        for name in files:
            try:
                if {SECRET!r} in open(os.path.join(root, name)).read():
                    found.append(os.path.join(root, name))
            except OSError:
                found.append('unreadable:' + os.path.join(root, name))
print(found)
"""

FILE_ATTACKS = {
    "lock_the_workspace_itself": f"import os\nopen('s', 'w').write({SECRET!r})\nos.chmod('/workspace', 0)",
    "lock_tmp_itself": f"import os\nopen('/tmp/s', 'w').write({SECRET!r})\nos.chmod('/tmp', 0)",
    "a_tree_too_deep_to_recurse": "import os\nos.chdir('/dev/shm')\nfor _ in range(3000):\n"
                                  f"    os.mkdir('d')\n    os.chdir('d')\nopen('s', 'w').write({SECRET!r})",
    "a_path_longer_than_path_max": "import os\nname = 'n' * 250\nfor _ in range(40):\n"
                                   f"    os.mkdir(name)\n    os.chdir(name)\nopen('s', 'w').write({SECRET!r})",
    "locked_directories_in_locked_directories": "import os\nos.makedirs('/tmp/a/b/c')\n"
                                                f"open('/tmp/a/b/c/s', 'w').write({SECRET!r})\n"
                                                "for d in ('/tmp/a/b/c', '/tmp/a/b', '/tmp/a'):\n    os.chmod(d, 0)",
    "a_fifo_a_socket_and_links": "import os, socket\nos.mkfifo('fifo')\nsocket.socket(socket.AF_UNIX).bind('/tmp/sock')\n"
                                 f"open('/dev/shm/s', 'w').write({SECRET!r})\nos.symlink('/dev/shm/s', 'link')\n"
                                 "os.link('/dev/shm/s', '/dev/shm/hard')\nos.chmod('/dev/shm/s', 0)",
}


@pytest.mark.parametrize("attack", sorted(FILE_ATTACKS))
def test_files_a_run_leaves_are_gone_for_the_next_run(box, attack):
    result = run_py(box, FILE_ATTACKS[attack])
    assert result.status == "exited"
    assert run_py(box, FIND_SECRET).stdout == b"[]\n"
    honest_run_is_unaffected(box)


@pytest.mark.parametrize("attack", sorted(FILE_ATTACKS))
def test_files_a_released_program_leaves_are_gone_for_the_program_loaded_right_after(box, attack):
    # The first program is released without waiting (its stop and the reset are answered with the next
    # load), and the second one's process was forked while the first ran: it must still find nothing.
    plant = f"def plant():\n    try:\n        exec({FILE_ATTACKS[attack]!r}, {{}})\n    except OSError:\n        pass\n"
    with box.load(plant) as planter:  # what the attack manages before a refusal stays for the reset
        planter.call("plant")
    with box.load(f"def find():\n    found = {{}}\n    exec({FIND_SECRET!r}, found)\n    return found['found']\n") as finder:
        assert finder.call("find") == []
    honest_run_is_unaffected(box)


def test_a_released_program_that_leaves_the_sandbox_unclean_costs_only_that_sandbox(box):
    starts = box.starts
    with box.load("import os, signal\ndef freeze():\n    os.kill(-1, signal.SIGSTOP)\n") as attacker:
        attacker.call("freeze")  # stops the template and the next run's process, which the reset then finds
    with box.load("def add(a, b):\n    return a + b\n") as honest:  # loaded in a replacement sandbox
        assert honest.call("add", 2, 3) == 5
    assert box.starts == starts + 1
    honest_run_is_unaffected(box)


IPC_ATTACKS = {
    "system_v_shared_memory": (
        "import ctypes\nlibc = ctypes.CDLL(None)\nshm = libc.shmget(4242, 4096, 0o1666)\n"
        "libc.shmat.restype = ctypes.c_void_p\nctypes.memmove(libc.shmat(shm, None, 0), "
        f"{SECRET!r}.encode(), {len(SECRET)})",
        "import ctypes\nlibc = ctypes.CDLL(None)\nshm = libc.shmget(4242, 4096, 0o666)\nprint(shm)"),
    "system_v_message_queue": (
        "import ctypes\nlibc = ctypes.CDLL(None)\nq = libc.msgget(4243, 0o1666)\n"
        f"buf = ctypes.create_string_buffer(b'\\x01\\0\\0\\0\\0\\0\\0\\0' + {SECRET!r}.encode())\n"
        f"libc.msgsnd(q, buf, {len(SECRET)}, 0)",
        "import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.msgget(4243, 0o666))"),
    "system_v_semaphores": (
        "import ctypes\nlibc = ctypes.CDLL(None)\nlibc.semget(4244, 3, 0o1666)",
        "import ctypes\nlibc = ctypes.CDLL(None)\nprint(libc.semget(4244, 3, 0o666))"),
    "posix_message_queue": (
        "import ctypes\nrt = ctypes.CDLL('librt.so.1')\nq = rt.mq_open(b'/leak', 0o102, 0o600, None)\n"
        f"rt.mq_send(q, {SECRET!r}.encode(), {len(SECRET)}, 0)",
        "import ctypes\nrt = ctypes.CDLL('librt.so.1')\nprint(rt.mq_open(b'/leak', 2))"),
    "kernel_key_in_the_user_keyring": (  # a key name of this test run: keyrings outlive sandboxes
        "import ctypes, platform\nnr = {'x86_64': 248, 'aarch64': 217}[platform.machine()]\n"
        f"ctypes.CDLL(None).syscall(nr, b'user', b'{KEY_NAME}', {SECRET!r}.encode(), {len(SECRET)}, -4)",
        f"print(-1 if '{KEY_NAME}' not in open('/proc/keys').read() else 0)"),
}


@pytest.mark.parametrize("attack", sorted(IPC_ATTACKS))
def test_ipc_objects_and_keys_do_not_outlive_the_run(box, attack):
    plant, probe = IPC_ATTACKS[attack]
    assert run_py(box, plant).status == "exited"
    assert run_py(box, probe).stdout == b"-1\n"  # not found
    honest_run_is_unaffected(box)


def test_a_flood_of_files_is_reset_in_bounded_time_or_the_sandbox_replaced():
    with Sandbox(workspace_mb=64) as fresh:
        flood = ("import os, time\nos.chdir('/dev/shm')\nend = time.monotonic() + 4\ni = 0\n"
                 "while time.monotonic() < end:\n    open(str(i), 'w').close()\n    i += 1")
        started = time.monotonic()
        result = run_py(fresh, flood)
        assert result.status == "exited" and time.monotonic() - started < 4 + 2 + 3  # run + reset budget + slack
        honest_run_is_unaffected(fresh)


# -- memory -----------------------------------------------------------------------------------------

# Reads the program's own anonymous memory (heap, arenas) for a pattern; the pattern's text never
# equals what it finds (a character class splits it), so it cannot find itself.
SCAN_MEMORY = r'''
import ctypes, re
def scan(pattern):
    found = set()
    with open('/proc/self/maps') as maps:
        for line in maps:
            fields = line.split()
            if 'r' not in fields[1] or (len(fields) > 5 and fields[5] != '[heap]'):
                continue
            low, high = (int(x, 16) for x in fields[0].split('-'))
            found |= set(re.findall(pattern.encode(), ctypes.string_at(low, high - low)))
    return sorted(found)
'''


def _scan(box: Sandbox, pattern: str) -> list:
    with box.load(SCAN_MEMORY) as program:
        return program.call("scan", pattern)


def test_a_program_does_not_find_an_earlier_programs_source_in_its_memory(box):
    with box.load("def f():\n    return 1\n# the solution: " + "SOURCE" + "MARK-7781 " * 30 + "\n") as program:
        assert program.call("f") == 1
    assert _scan(box, "SOURCEMARK-[7]781") == []


def test_a_program_does_not_find_an_earlier_programs_inputs_in_its_memory(box):
    with box.load("def f(x):\n    return len(x)\n") as program:
        assert program.call("f", "INPUT" + "MARK-5512" * 40) == 365
    assert _scan(box, "INPUTMARK-[5]512") == []


def test_a_program_does_not_find_an_earlier_programs_results_in_its_memory(box):
    with box.load("def f(n):\n    return ['RESULT' + 'MARK-' + str(n)] * 50\n") as program:
        assert program.call("f", 6631)[0] == "RESULTMARK-6631"
    assert _scan(box, "RESULTMARK-[6]631") == []


def test_a_program_does_not_find_an_earlier_commands_output_in_its_memory(box):
    assert run_py(box, "print('OUTPUT' + 'MARK-4410' * 40)").exit_code == 0
    assert _scan(box, "OUTPUTMARK-[4]410") == []


def test_a_program_that_kills_the_template_costs_only_its_own_sandbox(box):
    starts = box.starts
    result = run_py(box, "import os, signal\nos.kill(-1, signal.SIGKILL)")
    assert result.status == "exited" and box.starts == starts + 1 and box.alive
    honest_run_is_unaffected(box)


# -- a run that breaks the sandbox ------------------------------------------------------------------


def test_run_returns_a_result_when_the_agent_is_killed_mid_run():
    with Sandbox(limits=Limits(timeout_s=10)) as fresh:
        (agent,) = sandbox_agents(fresh.host_pid)
        subprocess.Popen(["sh", "-c", f"sleep 0.5; kill -9 {agent}"])
        result = fresh.run(["sleep", "5"])
        assert result.status == "sandbox_error" and result.message and result.exit_code is None
        honest_run_is_unaffected(fresh)


def _sandbox_json(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run([str(RLVR), "sandbox", "run", "--json", *args], capture_output=True, text=True, timeout=120)
    return done, json.loads(done.stdout)


@pytest.mark.parametrize("command", [
    "chmod 0 /workspace",
    "cd /dev/shm && for i in $(seq 1500); do mkdir d && cd d || exit 3; done",
    "mkdir -p /tmp/a/b && chmod 0 /tmp/a/b /tmp/a",
])
def test_sandbox_run_json_reports_a_command_that_damages_the_sandbox(command):
    done, report = _sandbox_json("--", "sh", "-c", command)
    assert done.returncode == 0 and report["status"] == "exited" and report["exit_code"] == 0, done.stderr


def test_sandbox_run_json_reports_a_sandbox_that_cannot_start():
    done, report = _sandbox_json("--backend", "docker", "--", "true")
    assert done.returncode == 125 and report["status"] == "sandbox_error" and report["message"]


# -- the same, unprivileged -------------------------------------------------------------------------

UNPRIVILEGED_HOST = """
import json, sys
sys.path.insert(0, SRC)
from rlvr_factory.sandbox import Limits, Sandbox
attacks = [
    "import os; open('s', 'w').write('x'); os.chmod('/workspace', 0)",
    "import os; open('/tmp/s', 'w').write('x'); os.chmod('/tmp', 0)",
    "import os\\nfor d in ('/etc', '/opt', '/', '/dev'):\\n    try: open(d + '/planted', 'w').write('x')\\n    except OSError: pass",
    "import ctypes; ctypes.CDLL(None).shmget(4242, 4096, 0o1666)",
]
probe = "import os; print(sorted(os.listdir('/workspace') + os.listdir('/tmp') + [p for p in ('/etc/planted', '/opt/planted', '/planted', '/dev/planted') if os.path.exists(p)]), open('/proc/sysvipc/shm').read().count(chr(10)))"
with Sandbox(limits=Limits(timeout_s=10)) as box:
    results = []
    for attack in attacks:
        box.run(["python3", "-c", attack])
        results.append(box.run(["python3", "-c", probe]).stdout.decode())
print(json.dumps(results))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv") or not os.path.exists("/usr/bin/python3"),
                    reason="needs root (to become an unprivileged user with setpriv) and /usr/bin/python3")
def test_an_unprivileged_users_sandbox_resets_just_as_well():
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp",
         "/usr/bin/python3", "-c", UNPRIVILEGED_HOST.replace("SRC", repr(src), 1)],
        capture_output=True, text=True, timeout=120, cwd="/tmp")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["[] 1\n"] * 4  # nothing left, nothing planted; only the shm table's header
