"""evlog/builders/console_parse.py, what tests/test_console_parse.py leaves out: ``expect()`` (a logging
record's text, exported as a log record already, is not sent again as console lines) and the modes it
applies in, and a parser asked for a mode that does not exist."""
from __future__ import annotations

import zlib

import pytest

from evlog.builders import console_parse as cp
from evlog.builders.console_parse import EXPECT_LINES


def crc(line: str) -> int:
    return zlib.crc32(line.encode("utf-8"))


def kinds_bodies(records) -> list:
    return [(r.kind, r.stream, r.body) for r in records]


def test_an_expected_logged_text_is_dropped_once_on_its_stream_only():
    p = cp.ConsoleParser("enabled")
    p.expect("stderr", crc("WARNING:app:disk almost full"), 2)
    out = p.feed("stdout", b"WARNING:app:disk almost full\n")  # the other stream: a line of its own
    out += p.feed("stderr", b"before\nWARNING:app:disk almost full\n  detail line\nafter\n")
    out += p.feed("stderr", b"WARNING:app:disk almost full\n")  # printed again: no longer expected
    assert kinds_bodies(out) == [(cp.TEXT, "stdout", "WARNING:app:disk almost full"), (cp.TEXT, "stderr", "before"),
                                 (cp.TEXT, "stderr", "after"), (cp.TEXT, "stderr", "WARNING:app:disk almost full")]


def test_an_expected_text_that_never_comes_is_forgotten():
    p = cp.ConsoleParser("enabled")
    p.expect("stdout", crc("late"), 1)
    lines = b"".join(b"line %d\n" % i for i in range(EXPECT_LINES + 1))
    out = p.feed("stdout", lines + b"late\n")
    assert [r.body for r in out][-1] == "late" and len(out) == EXPECT_LINES + 2


def test_expect_applies_in_mode_enabled_only():
    p = cp.ConsoleParser("metadata")
    p.expect("stdout", crc('{"epoch": 1}'), 1)
    assert kinds_bodies(p.feed("stdout", b'{"epoch": 1}\n')) == [(cp.METADATA, "stdout", {"epoch": 1})]


def test_a_mode_that_does_not_exist_is_refused_by_name():
    with pytest.raises(ValueError, match="'loud'"):
        cp.ConsoleParser("loud")
