"""JSON Lines from anyone: each line one value or one reason, never a failed file."""

from __future__ import annotations

import time

import pytest

from rlvr_factory.json_lines import LineError, parse_line, read_json_lines

REFUSED = {
    b"[" * 100_000 + b"]" * 100_000: "nested too deeply",
    b'{"a": 1e999999}': "out of a float's range",
    b'{"a": -1e400}': "out of a float's range",
    b'{"a": ' + b"9" * 100_000 + b"}": "an integer of 100000 digits",
    b'{"a": NaN}': "NaN is not a number JSON allows",
    b'{"a": [Infinity]}': "Infinity is not a number JSON allows",
    b'{"a": "\xff"}': "not UTF-8 text",
    "\ufeff{}".encode(): "byte-order mark",
    b'{"a": 1,\xe2\x80\xa8 "b": 2}': "not JSON",  # U+2028 is no JSON whitespace
    b"{broken": "not JSON",
}


@pytest.mark.parametrize("line", list(REFUSED), ids=lambda line: repr(line[:24]))
def test_a_line_that_is_not_one_readable_value_is_refused_with_its_number_and_why(line):
    started = time.perf_counter()
    with pytest.raises(LineError, match=f"line 7 .*{REFUSED[line]}"):
        parse_line(line, 7)
    assert time.perf_counter() - started < 1.0


def test_lines_break_at_newlines_only_and_a_separator_inside_a_string_is_text():
    data = '{"a": "x\u2028y\u2029z\x85"}\r\n\n  \n[1, 2.5, -3]\n"last"'.encode()  # str.splitlines breaks at all three
    assert read_json_lines(data) == [{"a": "x\u2028y\u2029z\x85"}, [1, 2.5, -3], "last"]


def test_a_bad_line_is_an_error_row_and_the_lines_around_it_are_read():
    rows = read_json_lines(b'{"a": 1}\n{"a": NaN}\n{"a": 3}\n')
    assert rows[0] == {"a": 1} and rows[2] == {"a": 3}
    assert list(rows[1]) == ["_error"] and rows[1]["_error"].startswith("line 2 ")
