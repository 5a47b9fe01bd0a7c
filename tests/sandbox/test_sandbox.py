"""The sandbox: commands and programs run isolated, within their limits, and leave nothing behind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlvr_factory.sandbox import (
    CandidateError,
    CommandFailed,
    Limits,
    ProgramEnded,
    Remote,
    Sandbox,
    SandboxPool,
    SandboxStartError,
    Snapshot,
    UnsafeSandboxWarning,
)
from rlvr_factory.sandbox.agent import ProtocolError, dumps, safe_loads
from rlvr_factory.sandbox.backends import BubblewrapBackend
from tests.sandbox.procs import alive, descendants, needs_bwrap, sandbox_agents

PY = "python3"
# The processes of the sandbox other than this one, the agent and the agent's own (its template, the
# next run's process, which run agent.py): a leftover of an earlier run would show here.
OTHER_PROCESSES = ("import os\nme = os.getpid()\nprint([open(f'/proc/{p}/cmdline', 'rb').read() for p in os.listdir('/proc')"
                   " if p.isdigit() and int(p) not in (1, me) and b'/opt/rlvr/agent.py' not in "
                   "open(f'/proc/{p}/cmdline', 'rb').read()])")
_EMPTY_TAR = bytes(10240)  # an empty tar archive: two zero blocks


@pytest.fixture(scope="module")
def box():
    with Sandbox(limits=Limits(timeout_s=5, cpu_s=5, memory_mb=512, nproc=16), workspace_mb=8) as sandbox:
        yield sandbox


@needs_bwrap
class TestRun:
    def test_a_command_gives_its_output_and_exit_code(self, box):
        result = box.run([PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
        assert (result.exit_code, result.stdout, result.stderr) == (3, b"out\n", b"err\n")
        assert not result.timed_out and result.backend == "bubblewrap" and result.wall_s > 0

    def test_stdin_reaches_the_command(self, box):
        assert box.run(["cat"], stdin=b"hello").stdout == b"hello"

    def test_a_missing_command_exits_127(self, box):
        result = box.run(["no-such-command-here"])
        assert result.exit_code == 127 and b"cannot run" in result.stderr

    def test_the_wall_clock_limit_kills_the_whole_tree(self, box):
        started = time.monotonic()
        result = box.run(["sh", "-c", "sleep 30 & sleep 30"], limits=Limits(timeout_s=0.5))
        assert result.timed_out and time.monotonic() - started < 5
        assert box.run([PY, "-c", OTHER_PROCESSES]).stdout == b"[]\n"  # nothing left behind

    def test_the_cpu_limit_stops_a_busy_loop(self, box):
        result = box.run([PY, "-c", "while True: pass"], limits=Limits(timeout_s=10, cpu_s=1))
        assert not result.timed_out and result.exit_code < 0 and result.wall_s < 5

    def test_the_memory_limit_refuses_large_allocations(self, box):
        result = box.run([PY, "-c", "x = bytearray(400 * 1024 * 1024)"], limits=Limits(memory_mb=128))
        assert result.exit_code == 1 and b"MemoryError" in result.stderr

    def test_the_process_limit_stops_a_fork_bomb(self, box):
        code = "import os\nn = 0\ntry:\n    while True:\n        if os.fork() == 0:\n            import time; time.sleep(5)\n        n += 1\nexcept OSError:\n    print(n)"
        result = box.run([PY, "-c", code], limits=Limits(nproc=8, timeout_s=5))
        assert result.exit_code == 0 and int(result.stdout) < 8

    def test_the_file_size_limit_stops_a_big_file(self, box):
        result = box.run(["sh", "-c", "head -c 3000000 /dev/zero > big"], limits=Limits(file_size_mb=1))
        assert result.exit_code != 0

    def test_the_workspace_cannot_fill_the_host_disk(self, box):
        result = box.run(["sh", "-c", "for i in $(seq 20); do head -c 1000000 /dev/zero > f$i || exit 9; done"],
                         limits=Limits(file_size_mb=4))
        assert result.exit_code == 9  # the 8 MB workspace is full

    def test_the_open_files_limit_applies(self, box):
        code = "fs = []\ntry:\n    while True: fs.append(open('/dev/null'))\nexcept OSError:\n    print(len(fs))"
        assert int(box.run([PY, "-c", code], limits=Limits(open_files=32)).stdout) < 32

    def test_captured_output_is_cut_at_its_limit(self, box):
        result = box.run([PY, "-c", "print('x' * 100000)"], limits=Limits(output_bytes=1000))
        assert result.exit_code == 0 and len(result.stdout) == 1000 and result.output_truncated

    def test_the_workspace_is_reset_after_each_run(self, box):
        assert box.run(["sh", "-c", "echo data > kept.txt"]).exit_code == 0
        assert box.run(["ls", "-A"]).stdout == b""


@needs_bwrap
class TestIsolation:
    def test_the_host_filesystem_is_not_visible(self, box, tmp_path):
        secret = tmp_path / "secret.txt"
        secret.write_text("host data")
        for path in (str(secret), "/etc/shadow", "/root/.ssh", os.path.expanduser("~/.bash_history"), "/work"):
            assert box.run(["cat", path]).exit_code != 0, path

    def test_the_system_is_read_only(self, box):
        for path in ("/usr/bin/planted", "/etc/planted", "/opt/rlvr/agent.py", "/planted"):
            assert box.run(["sh", "-c", f"echo x > {path}"]).exit_code != 0, path

    def test_there_is_no_network(self, box):
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.2)
        port = server.getsockname()[1]
        code = f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=1)\nexcept OSError as e:\n    print('refused')"
        assert box.run([PY, "-c", code]).stdout == b"refused\n"
        with pytest.raises(socket.timeout):
            server.accept()
        server.close()

    def test_host_processes_are_invisible_and_the_agent_is_pid_1(self, box):
        pids = box.run([PY, "-c", "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"])
        assert eval(pids.stdout)[:2] == [1, 2] and len(eval(pids.stdout)) <= 4  # agent, template, next run, this
        assert box.run([PY, "-c", OTHER_PROCESSES]).stdout == b"[]\n"

    def test_the_sandbox_survives_its_programs_killing_everything(self, box):
        result = box.run([PY, "-c", "import os, signal\nfor p in (1, -1): \n  try: os.kill(p, signal.SIGKILL)\n  except OSError: pass"])
        assert result.exit_code in (0, -9)
        assert box.run(["true"]).exit_code == 0 and box.alive

    def test_the_user_has_no_capabilities(self, box):
        status = box.run(["cat", "/proc/self/status"]).stdout.decode()
        assert "CapEff:\t0000000000000000" in status


@needs_bwrap
class TestPrograms:
    def test_calls_return_plain_values_with_exact_types(self, box):
        with box.load("def f(x):\n    return {'a': (x, 1.5, [True, None]), 'b': {1, 2}}\n") as program:
            assert program.call("f", 3) == {"a": (3, 1.5, [True, None]), "b": {1, 2}}

    def test_other_objects_stay_in_the_sandbox_as_references(self, box):
        with box.load("class P:\n    def __init__(self, v): self.v = v\ndef make(v): return P(v)\ndef get(p): return p.v\n") as program:
            handle = program.call("make", 7)
            assert isinstance(handle, Remote) and handle.type_name == "P" and not handle.disguised
            assert program.call("get", handle) == 7
            with pytest.raises(TypeError):
                bool(handle)

    def test_a_disguised_value_is_flagged(self, box):
        with box.load("class I(int):\n    def __eq__(self, o): return True\ndef f(): return I(1)\n") as program:
            value = program.call("f")
            assert isinstance(value, Remote) and value.disguised

    def test_exceptions_come_back_by_builtin_name(self, box):
        with box.load("class MyError(KeyError): pass\ndef f(): raise MyError('boom')\n") as program:
            with pytest.raises(CandidateError) as raised:
                program.call("f")
            assert raised.value.kind == "KeyError" and "boom" in raised.value.message

    def test_in_place_changes_to_arguments_are_copied_back(self, box):
        with box.load("def f(items, table):\n    items.sort()\n    table['k'] = 1\n") as program:
            items, table = [3, 1, 2], {}
            program.call("f", items, table)
            assert items == [1, 2, 3] and table == {"k": 1}

    def test_a_program_that_exits_ends_with_its_output(self, box):
        with box.load("import sys\nprint('bye')\nsys.stdout.flush()\nimport os\nos._exit(0)\n") as program:
            assert program.ended is not None and program.ended.exit_code == 0 and program.ended.stdout == b"bye\n"
            with pytest.raises(ProgramEnded):
                program.call("anything")

    def test_a_call_past_the_deadline_times_out(self, box):
        with box.load("def f():\n    while True: pass\n", limits=Limits(timeout_s=0.5)) as program:
            with pytest.raises(ProgramEnded) as ended:
                program.call("f")
            assert ended.value.result.timed_out

    def test_a_load_error_is_reported(self, box):
        with box.load("1/0\n") as program:
            assert program.load_error[0] == "ZeroDivisionError"


@needs_bwrap
class TestDirectCalls:
    """The host calls a loaded program over its own pipes; the agent still drains it and ends it on time."""

    def test_a_program_is_called_over_its_own_pipes(self, box):
        with box.load("def f(x):\n    return x + 1\n") as program:
            assert program.pipes is not None
            assert [program.call("f", i) for i in range(3)] == [1, 2, 3]
        assert program.pipes is None  # stopping it closes the host's ends

    def test_without_handed_over_pipes_calls_are_relayed_by_the_agent(self, monkeypatch):
        with Sandbox(limits=Limits(timeout_s=1), workspace_mb=8) as relayed:  # as in a Docker container
            relayed.start()
            monkeypatch.setattr(relayed._transport, "receive_call_fds", lambda: None)
            with relayed.load("import time\ndef f(x):\n    return x * 2\ndef slow():\n    time.sleep(60)\n") as program:
                assert program.pipes is None and program.call("f", 21) == 42
                with pytest.raises(ProgramEnded) as ended:
                    program.call("slow")
            assert ended.value.result.timed_out

    def test_a_program_left_idle_past_its_deadline_is_ended_then(self, box):
        with box.load("def f():\n    return 1\n", limits=Limits(timeout_s=0.5)) as program:
            time.sleep(1.5)
            with pytest.raises(ProgramEnded) as ended:
                program.call("f")
        assert ended.value.result.timed_out and ended.value.result.wall_s < 1.2

    def test_a_program_that_stops_reading_its_calls_ends_at_its_deadline(self, box):
        stop_reading = "import __main__, time\n__main__.read_frame = lambda *a, **k: time.sleep(60)\ndef f(x): return 1\n"
        with box.load(stop_reading, limits=Limits(timeout_s=1)) as program:
            started = time.monotonic()
            with pytest.raises(ProgramEnded) as ended:
                program.call("f", b"x" * 1_000_000)  # far more than a pipe holds
        assert ended.value.result.timed_out and time.monotonic() - started < 3
        assert box.run([PY, "-c", "print(6 * 7)"]).stdout == b"42\n"

    def test_a_forked_child_holding_the_pipes_does_not_outlive_the_deadline(self, box):
        holder = "import os, time\ndef f():\n    if os.fork() == 0:\n        time.sleep(60)\n    time.sleep(60)\n"
        with box.load(holder, limits=Limits(timeout_s=1)) as program:
            started = time.monotonic()
            with pytest.raises(ProgramEnded) as ended:
                program.call("f")
        assert ended.value.result.timed_out and time.monotonic() - started < 3
        assert box.run([PY, "-c", OTHER_PROCESSES]).stdout == b"[]\n"

    def test_output_is_drained_while_the_host_waits_on_a_call(self, box):
        talker = "import sys\ndef f():\n    sys.stdout.write('x' * 1_000_000)\n    sys.stdout.flush()\n    return 'done'\n"
        with box.load(talker, limits=Limits(timeout_s=3, output_bytes=1000)) as program:
            assert program.call("f") == "done"  # a full stdout pipe would block the program till its deadline
            result = program.stop()
        assert result.output_truncated and len(result.stdout) == 1000 and not result.timed_out

    def test_a_program_that_dies_mid_call_reports_its_exit(self, box):
        with box.load("import os\ndef f():\n    os._exit(3)\n") as program:
            with pytest.raises(ProgramEnded) as ended:
                program.call("f")
        assert ended.value.result.exit_code == 3 and not ended.value.result.timed_out

    def test_a_garbled_reply_ends_the_program_without_breaking_the_sandbox(self, box):
        garble = ("import __main__, os\ndef f():\n    real = __main__.write_frame\n"
                  "    __main__.write_frame = lambda fd, payload, *a: real(fd, b'not a pickle') or os.write(fd, b'\\xff' * 4)\n"
                  "def g(): return 2\n")
        with box.load(garble) as program:
            with pytest.raises(CandidateError):
                program.call("f")  # the well-framed garbage is refused as a value
            with pytest.raises(ProgramEnded):
                program.call("g")  # the stray bytes announce an oversize frame: the program is stopped
        assert box.run([PY, "-c", "print(1)"]).stdout == b"1\n"


# a loaded program that serves another in a child of its own (as the code judge serves the candidate)
PARENT = """
import os, time
from __main__ import SEALED_PATH, start_child


def serve(source, seconds=2.0):
    child = start_child(source, time.monotonic() + seconds)
    return child


def call(source, name, *args):
    child = serve(source)
    try:
        return child.loaded(), child.load_error, child.call(name, args, {})[:2], child.ended
    except Exception as e:
        return child.loaded(), child.load_error, type(e).__name__, child.ended


def sealed():
    return SEALED_PATH
"""


@needs_bwrap
class TestChildPrograms:
    def test_a_preloaded_module_is_imported_in_every_run(self):
        with Sandbox(limits=Limits(timeout_s=5), preload={"rlvr_probe": "ANSWER = 41\n"}) as box:
            for _ in range(2):
                with box.load("import rlvr_probe\ndef f():\n    rlvr_probe.ANSWER += 1\n    return rlvr_probe.ANSWER\n") as p:
                    assert p.call("f") == 42  # each run starts from the module as the agent loaded it

    def test_a_program_calls_its_child_and_sees_how_it_ended(self, box):
        with box.load(PARENT) as parent:
            assert parent.call("call", "def f(x):\n    return x * 2\n", "f", 21) == (True, None, ("return", 42), None)
            loaded, error, _, _ = parent.call("call", "raise ValueError('no')\n", "f")
            assert not loaded and error == ("ValueError", "no")
            _, _, gone, ended = parent.call("call", "import os\ndef f():\n    os._exit(3)\n", "f")
            assert gone == "ChildGone" and ended == {"exit_code": 3, "timed_out": False}
            _, _, gone, ended = parent.call("call", "def f():\n    while True:\n        pass\n", "f")
            assert gone == "ChildGone" and ended == {"exit_code": -9, "timed_out": True}

    def test_the_parent_keeps_only_import_paths_nothing_in_the_sandbox_can_write(self, box):
        with box.load(PARENT) as parent:
            sealed = parent.call("sealed")
        stdlib = os.path.dirname(os.__file__)
        assert stdlib in sealed
        assert not [p for p in sealed if p.startswith(("/workspace", "/tmp", "/dev/shm"))]


@needs_bwrap
def test_a_multi_step_workspace_is_snapshotted_and_restored():
    with Sandbox(persist_workspace=True, workspace_mb=8) as box:
        assert box.run(["sh", "-c", "echo step1 > state.txt && mkdir d && echo y > d/x"]).exit_code == 0
        after_step_1 = box.snapshot()
        assert after_step_1.files() == ["d", "d/x", "state.txt"]
        box.run(["sh", "-c", "echo step2 > state.txt && rm -r d && touch junk"])
        assert box.run(["cat", "state.txt"]).stdout == b"step2\n"
        box.restore(after_step_1)
        assert box.run(["sh", "-c", "cat state.txt d/x; ls"]).stdout == b"step1\ny\nd\nstate.txt\n"
        box.reset()
        assert box.run(["ls", "-A"]).stdout == b""


@needs_bwrap
def test_a_corrupt_snapshot_is_refused_and_the_sandbox_serves_on(box):
    with pytest.raises(CommandFailed, match="restore"):
        box.restore(Snapshot(b"not a tar archive"))
    assert box.alive and box.run(["true"]).exit_code == 0


@needs_bwrap
def test_a_base_snapshot_is_what_every_run_starts_from(box):
    with Sandbox(persist_workspace=True, workspace_mb=8) as maker:
        maker.run(["sh", "-c", "echo base > state.txt"])
        base = maker.snapshot()
    box.restore(base, as_base=True)
    try:
        assert box.run(["sh", "-c", "cat state.txt; echo changed > state.txt"]).stdout == b"base\n"
        assert box.run(["cat", "state.txt"]).stdout == b"base\n"
    finally:
        box.restore(Snapshot(_EMPTY_TAR), as_base=True)
    assert box.run(["ls", "-A"]).stdout == b""


@needs_bwrap
def test_a_warm_pool_runs_in_parallel_and_replaces_a_broken_sandbox():
    with SandboxPool(2, limits=Limits(timeout_s=5)) as pool:
        started = time.monotonic()
        results = pool.map(lambda box, i: box.run(["sh", "-c", f"sleep 0.5; echo {i}"]), range(4))
        assert [r.stdout for r in results] == [b"0\n", b"1\n", b"2\n", b"3\n"]
        assert time.monotonic() - started < 1.9  # 4 half-second runs on 2 sandboxes
        with pool.acquire() as box:
            box.close()  # as if it had died
        assert all(r.exit_code == 0 for r in pool.map(lambda box, _: box.run(["true"]), range(2)))


def test_the_process_backend_must_be_chosen_and_warns():
    with pytest.warns(UnsafeSandboxWarning, match="isolates NOTHING"):
        box = Sandbox("process", limits=Limits(timeout_s=5))
    with box:
        result = box.run([PY, "-c", "import os; open('f', 'w').write('1'); print(os.listdir('.'))"])
        assert result.exit_code == 0 and result.stdout == b"['f']\n" and result.backend == "process"
        assert box.run(["sh", "-c", "sleep 10"], limits=Limits(timeout_s=0.3)).timed_out
        with box.load("def f(x): return x + 1\n") as program:
            assert program.call("f", 1) == 2


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        Sandbox("vm")


def test_a_missing_bubblewrap_is_a_start_error_that_says_what_to_install():
    with pytest.raises(SandboxStartError, match="apt-get install -y bubblewrap"):
        BubblewrapBackend(bwrap="no-such-bwrap")


@needs_bwrap
def test_a_sandbox_whose_agent_dies_is_a_sandbox_error_and_restarts():
    with Sandbox() as box:
        (agent,) = sandbox_agents(box.host_pid)
        os.kill(agent, 9)
        lost = box.run(["true"])
        assert lost.status == "sandbox_error" and "agent exited" in lost.message and not box.alive
        assert box.run(["true"]).exit_code == 0 and box.starts == 2  # started again on next use


@needs_bwrap
def test_the_sandbox_dies_with_its_host(tmp_path):
    script = tmp_path / "host.py"
    script.write_text(
        "import sys, os\nsys.path.insert(0, %r)\nfrom rlvr_factory.sandbox import Sandbox, Limits\n"
        "box = Sandbox(limits=Limits(timeout_s=60)); box.start()\nprint(box.host_pid, flush=True)\n"
        "box.run(['sleep', '60'])\n" % str(Path(__file__).resolve().parents[2] / "src"))
    host = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    bwrap = int(host.stdout.readline())
    time.sleep(0.5)
    inside = descendants(bwrap)
    assert len(inside) == 4  # the agent, its template, the next run's process and the `sleep`
    host.kill()
    host.wait()
    deadline = time.monotonic() + 5
    while any(alive(p) for p in inside) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in inside)


def test_the_docker_backend_needs_an_engine():
    try:
        import docker

        docker.from_env().ping()
    except Exception as e:  # noqa: BLE001
        with pytest.raises(SandboxStartError, match="Docker"):
            Sandbox("docker").start()
        pytest.skip(f"no Docker engine is reachable here ({type(e).__name__}); the docker backend's runs are not tested")
    with Sandbox("docker", limits=Limits(timeout_s=20)) as box:
        assert box.run(["python3", "-c", "print(6 * 7)"]).stdout == b"42\n"
        with box.load("def f(x): return x * 2\n") as program:
            assert program.call("f", 21) == 42


def test_the_wire_refuses_anything_but_plain_values():
    assert safe_loads(dumps(("ok", [1, 2.5, "s", b"b", None, {1: (2, 3)}, {4}, frozenset()]))) == (
        "ok", [1, 2.5, "s", b"b", None, {1: (2, 3)}, {4}, frozenset()])
    with pytest.raises(ProtocolError, match="not a plain value"):
        safe_loads(dumps(Path("/etc")))
    with pytest.raises(ProtocolError):
        safe_loads(b"\x80\x05garbage")
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    with pytest.raises(ProtocolError):
        safe_loads(pickle.dumps(Evil()))


def test_limits_are_validated():
    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=0)
    assert Limits.of({"memory_mb": 64}, timeout_s=2).memory_mb == 64


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0, -1, True, "3"])
def test_a_limit_that_is_not_a_positive_finite_number_is_refused_by_name(bad):
    from rlvr_factory.sandbox import Limits

    with pytest.raises(ValueError, match="timeout_s"):
        Limits(timeout_s=bad)
