"""The locked environment (scripts/lock.py): the committed locks satisfy pyproject.toml, pin every
package with its hashes, hold the CPU torch, and a change to pyproject.toml that they miss fails
naming the command that re-locks."""

from __future__ import annotations

import copy
import importlib.util
import re
import tomllib

from tests.pipelines.conftest import PROJECT_ROOT

_spec = importlib.util.spec_from_file_location("lock", PROJECT_ROOT / "scripts" / "lock.py")
lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock)
LOCK_EXTRAS = lock.EXTRAS


def _pyproject() -> dict:
    return tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())


def test_the_committed_locks_agree_with_pyproject():
    problems = lock.disagreements(_pyproject(), lock.read_locks())
    assert not problems, "the locks disagree with pyproject.toml; re-lock: python scripts/lock.py\n" + "\n".join(problems)


def test_every_pin_carries_its_hashes():
    for name, text in lock.read_locks().items():
        entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])  # one entry per pinned package
        for entry in entries:
            assert "--hash=sha256:" in entry, f"{name}: {entry.splitlines()[0]} has no hash"
        assert len(entries) == len(lock.pins(text))


def test_the_locks_hold_the_cpu_torch_and_no_cuda_libraries():
    for text in lock.read_locks().values():
        pins = lock.pins(text)
        assert pins["torch"].endswith("+cpu")
        assert not [n for n in pins if n.startswith("nvidia-")]


def test_a_dependency_the_locks_miss_is_named():
    pyproject = copy.deepcopy(_pyproject())
    pyproject["project"]["dependencies"].append("rlvr-not-locked>=0.1")
    problems = lock.disagreements(pyproject, lock.read_locks())
    assert f"{lock.RUNTIME_LOCK} has no pin for `rlvr-not-locked>=0.1` of pyproject.toml" in problems
    assert f"{lock.TEST_LOCK} has no pin for `rlvr-not-locked>=0.1` of pyproject.toml" in problems


def test_a_test_extra_the_test_lock_misses_is_named_but_not_in_the_runtime_lock():
    pyproject = copy.deepcopy(_pyproject())
    pyproject["project"]["optional-dependencies"]["dev"].append("hypothesis>=6")
    problems = lock.disagreements(pyproject, lock.read_locks())
    assert problems == [f"{lock.TEST_LOCK} has no pin for `hypothesis>=6` of pyproject.toml"]


def test_a_pin_the_new_bounds_exclude_is_named():
    pyproject = copy.deepcopy(_pyproject())
    pinned = lock.pins(lock.read_locks()[lock.RUNTIME_LOCK])["transformers"]
    deps = pyproject["project"]["dependencies"]
    deps[:] = [d for d in deps if not d.startswith("transformers")] + [f"transformers>{pinned}"]
    problems = lock.disagreements(pyproject, lock.read_locks())
    assert f"{lock.RUNTIME_LOCK} pins transformers=={pinned}, which `transformers>{pinned}` of pyproject.toml excludes" in problems


def test_a_dependency_pyproject_dropped_is_named():
    pyproject = copy.deepcopy(_pyproject())
    deps = pyproject["project"]["dependencies"]
    deps[:] = [d for d in deps if not d.startswith("tqdm")]
    problems = lock.disagreements(pyproject, lock.read_locks())
    assert f"{lock.RUNTIME_LOCK} holds tqdm, which pyproject.toml no longer asks for" in problems


def test_the_runtime_lock_pins_what_the_test_lock_pins():
    locks = lock.read_locks()
    runtime = locks[lock.RUNTIME_LOCK].replace("tqdm==", "tqdm==0.0.0-", 1)  # a runtime pin the test lock lacks
    problems = lock.disagreements(_pyproject(), {**locks, lock.RUNTIME_LOCK: runtime})
    assert any(p.startswith(f"{lock.RUNTIME_LOCK} pins tqdm==0.0.0-") and lock.TEST_LOCK in p for p in problems)
