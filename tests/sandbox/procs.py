"""Host process helpers for the sandbox tests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install -y bubblewrap)")


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` on the host (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def alive(pid: int) -> bool:
    """Whether `pid` is running (not gone, not a zombie)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def sandbox_agents(under: int) -> set[int]:
    """The pids of the sandbox agents below process `under` (not counting the agents' forked children)."""
    below = descendants(under)
    agents = set()
    for pid in below:
        try:
            if b"/opt/rlvr/agent.py" in Path(f"/proc/{pid}/cmdline").read_bytes() and alive(pid):
                agents.add(pid)
        except OSError:
            continue
    return {pid for pid in agents if _parent(pid) not in agents}


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except OSError:
        return 0
