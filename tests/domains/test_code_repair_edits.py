"""The search/replace edit format: parsed exactly, applied only when every block matches once."""

import pytest

from rlvr_factory.domains.code_repair_edits import DONE, Block, EditError, apply_edits, parse_edits

FILES = {"solution.py": "def add(a, b):\n    return a - b\n", "test_solution.py": "assert add(1, 2) == 3\n"}
EDITABLE = ["solution.py"]


def block(path="solution.py", search="    return a - b\n", replace="    return a + b\n"):
    return Block(path, search, replace).render()


def test_a_block_round_trips_and_applies():
    blocks = parse_edits(block())
    assert blocks == [Block("solution.py", "    return a - b\n", "    return a + b\n")]
    assert apply_edits(FILES, blocks, EDITABLE)["solution.py"] == "def add(a, b):\n    return a + b\n"


def test_a_search_may_be_part_of_a_line_and_the_last_newline_is_the_format_s():
    assert parse_edits(block(search="-", replace="+")) == [Block("solution.py", "-", "+")]
    assert apply_edits(FILES, parse_edits(block(search="-", replace="+")), EDITABLE)["solution.py"] == (
        "def add(a, b):\n    return a + b\n")
    # a SEARCH that ends with a newline is written with an empty line after it; an empty REPLACE deletes
    for search, replace in (("    return a - b\n", ""), ("a - b", ""), ("b):\n", "b, c):\n")):
        assert parse_edits(block(search=search, replace=replace)) == [Block("solution.py", search, replace)]
    deleted = apply_edits(FILES, parse_edits(block(search="    return a - b\n", replace="")), EDITABLE)
    assert deleted["solution.py"] == "def add(a, b):\n"
    with pytest.raises(EditError, match="found 3 times"):  # `a` is in `add`, the signature and the body
        apply_edits(FILES, parse_edits(block(search="a", replace="x")), EDITABLE)


def test_done_has_no_blocks():
    assert parse_edits(f"  {DONE}\n") == []


@pytest.mark.parametrize("action, message", [
    ("fix it please", "expected a file path"),
    ("solution.py\n<<<<<<< SEARCH\nx\n=======\ny\n", "not closed"),
    ("solution.py\n<<<<<<< SEARCH\n=======\ny\n>>>>>>> REPLACE\n", "SEARCH text is empty"),
    ("solution.py\n<<<<<<< SEARCH\nx\n<<<<<<< SEARCH\n", "where '=======' was expected"),
    (block() + "and some words\n", "expected a file path"),
    ("", "no edit found"),
])
def test_malformed_actions_say_what_is_wrong(action, message):
    with pytest.raises(EditError, match=message):
        parse_edits(action)


def test_binary_and_huge_edits_are_refused():
    with pytest.raises(EditError, match="binary"):
        parse_edits(block(replace="\x00\x01\n"))
    with pytest.raises(EditError, match="more than the limit"):
        parse_edits(block(replace="x = 1\n" * 1000), max_chars=4000)


@pytest.mark.parametrize("path, message", [
    ("../solution.py", "leaves the workspace"), ("/etc/passwd", "not a plain relative path"),
    ("./solution.py", "not a plain relative path"), ("sub/../solution.py", "not a plain relative path"),
    ("test_solution.py", "test files are read-only"), ("tests/test_x.py", "test files are read-only"),
    ("conftest.py", "conftest files cannot be edited"), ("helpers.py", "not an editable file"),
])
def test_edits_outside_the_editable_files_are_refused(path, message):
    with pytest.raises(EditError, match=message):
        apply_edits(FILES, parse_edits(block(path=path)), EDITABLE)


def test_a_search_must_match_exactly_once_and_a_failed_block_changes_nothing():
    files = {"solution.py": "x = 1\nx = 1\ny = 2\n"}
    with pytest.raises(EditError, match="found 2 times"):
        apply_edits(files, parse_edits(block(search="x = 1\n", replace="x = 3\n")), EDITABLE)
    with pytest.raises(EditError, match="not found"):
        apply_edits(files, parse_edits(block(search="y = 2\n") + block(search="z = 9\n")), EDITABLE)
    assert files == {"solution.py": "x = 1\nx = 1\ny = 2\n"}


def test_an_edit_may_not_grow_a_file_past_its_limit():
    with pytest.raises(EditError, match="longer than"):
        apply_edits(FILES, parse_edits(block(replace="    return a + b\n" * 40)), EDITABLE, max_file_chars=300)
