"""The code-repair edit format: search/replace blocks, one file each, parsed exactly.

An action is one or more blocks, nothing else but blank lines between them:

    solution.py
    <<<<<<< SEARCH
        return a - b
    =======
        return a + b
    >>>>>>> REPLACE

The first line names an editable file of the workspace (a relative path); the SEARCH text (the
lines between the markers, joined by newlines: no newline after the last one) must occur exactly once
in that file as it stands after the blocks before it, and is replaced by the REPLACE text. It may be
part of a line (`a - b` for `a + b`), as in str_replace editing tools: the shortest text that is
unique is the least to copy. A SEARCH that should end with a newline ends with an empty line.
An action that is exactly `DONE` ends the episode. Anything else (text outside blocks, an unclosed
block, a path outside the editable files, a search that matches nowhere or more than once, binary
content, an action or file over its size limit) is an `EditError` whose message the model reads;
then no block of the action is applied.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

SEARCH, DIVIDER, REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"
DONE = "DONE"
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # control characters but tab and newline (\r is refused)
_TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*\.py$|[^/]*_test\.py$)")


class EditError(ValueError):
    """An action that cannot be applied; the message says what and where (the model reads it)."""


@dataclass(frozen=True)
class Block:
    """One search/replace block: in `path`, replace `search` (found exactly once) by `replace`."""

    path: str
    search: str
    replace: str

    def render(self) -> str:
        """The block in the edit format (what `parse_edits` reads back as this block)."""
        return f"{self.path}\n{SEARCH}\n{self.search}\n{DIVIDER}\n{self.replace}\n{REPLACE}\n"


def location_problem(path: str) -> str | None:
    """Why `path` is not a plain relative path inside the workspace (None: it is)."""
    if not path or path.startswith("/") or "\\" in path or path != posixpath.normpath(path):
        return f"{path!r} is not a plain relative path inside the workspace"
    if path.split("/")[0] == "..":
        return f"{path!r} leaves the workspace"
    return None


def path_problem(path: str, editable: Sequence[str]) -> str | None:
    """Why `path` may not be edited (None: it may): outside the workspace, a test or conftest file,
    or not one of the `editable` files."""
    location = location_problem(path)
    if location is not None:
        return location
    if posixpath.basename(path) == "conftest.py":
        return f"{path!r}: conftest files cannot be edited"
    if _TEST_FILE.search(path):
        return f"{path!r}: test files are read-only"
    if path not in editable:
        return f"{path!r} is not an editable file (editable: {', '.join(editable)})"
    return None


def is_test_path(path: str) -> bool:
    """Whether `path` names a test or conftest file (read-only in every workspace)."""
    return bool(_TEST_FILE.search(path)) or posixpath.basename(path) == "conftest.py"


def parse_edits(action: str, max_chars: int = 4000) -> list[Block]:
    """The blocks of an action, exactly as written; EditError says the first thing that is wrong.
    An action of only `DONE` has no blocks (an empty list)."""
    if len(action) > max_chars:
        raise EditError(f"the edit is {len(action)} characters, more than the limit of {max_chars}")
    if _CONTROL.search(action):
        raise EditError("the edit contains binary or control characters")
    if action.strip() == DONE:
        return []
    lines = action.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        path = lines[i]
        if i + 1 >= len(lines) or lines[i + 1] != SEARCH:
            raise EditError(f"line {i + 1}: expected a file path followed by a line {SEARCH!r}, got {path[:60]!r}")
        search, i = _section(lines, i + 2, DIVIDER, len(blocks) + 1)
        replace, i = _section(lines, i, REPLACE, len(blocks) + 1)
        if not search.strip():
            raise EditError(f"block {len(blocks) + 1}: the SEARCH text is empty")
        blocks.append(Block(path.strip(), search, replace))
    if not blocks:
        raise EditError(f"no edit found: write search/replace blocks (a path, {SEARCH}, ..., {DIVIDER}, ..., "
                        f"{REPLACE}) or {DONE}")
    return blocks


def _section(lines: list[str], start: int, end_marker: str, block: int) -> tuple[str, int]:
    """The lines from line `start` up to the line `end_marker`, joined by newlines, and the line after it."""
    for j in range(start, len(lines)):
        if lines[j] == end_marker:
            return "\n".join(lines[start:j]), j + 1
        if lines[j] in (SEARCH, DIVIDER, REPLACE):
            raise EditError(f"block {block}: {lines[j]!r} where {end_marker!r} was expected (line {j + 1})")
    raise EditError(f"block {block}: not closed; expected a line {end_marker!r}")


def apply_edits(files: Mapping[str, str], blocks: Sequence[Block], editable: Sequence[str],
                max_file_chars: int = 20_000) -> dict[str, str]:
    """The workspace's files after the blocks, in order; EditError (and nothing changed) when a block
    names a file that may not be edited, or its search text occurs in the file other than exactly once."""
    out = dict(files)
    for n, block in enumerate(blocks, 1):
        problem = path_problem(block.path, editable)
        if problem is None and block.path not in out:
            problem = f"{block.path!r} does not exist in the workspace"
        if problem is not None:
            raise EditError(f"block {n}: {problem}")
        text = out[block.path]
        count = occurrences(text, block.search)
        if count != 1:
            where = "not found" if count == 0 else f"found {count} times (add text around it to make it unique)"
            raise EditError(f"block {n}: the SEARCH text is {where} in {block.path}")
        out[block.path] = text.replace(block.search, block.replace, 1)
        if len(out[block.path]) > max_file_chars:
            raise EditError(f"block {n}: {block.path} would be longer than {max_file_chars} characters")
    return out


def occurrences(text: str, search: str) -> int:
    """How many times `search` starts in `text`, overlapping ones included."""
    count, start = 0, text.find(search)
    while start >= 0:
        count += 1
        start = text.find(search, start + 1)
    return count
