"""Text as OTLP and pprof take it: UTF-8, which a Python str need not be.

A str can hold a lone surrogate (a name built from odd bytes, a file name decoded with surrogateescape);
UTF-8 cannot, and a line or message holding one is refused whole by its readers (evlog's, protobuf's).
Every writer of evlog writes U+FFFD in its place, a pair of surrogates as the character it makes, and
evlog's readers read one the same way.
"""
from __future__ import annotations


def without_lone_surrogates(text: str) -> str:
    """``text`` with U+FFFD for each lone surrogate (a pair becomes the character it makes)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate as U+FFFD."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return without_lone_surrogates(text).encode()
