"""Reading a run folder (``traces*.jsonl``, ``logs*.jsonl``, ``metrics*.jsonl``, each also as
``.jsonl.gz``: one OTLP/JSON export request per line) into decoded rows, whole or by following the files
as a live run appends to them.

A compressed file is a series of gzip members, one per flush of its writer. Only whole members are
read (their CRC checked), so a member being written is picked up on the next poll, and a file cut by
SIGKILL or ``os._exit`` reads up to its last whole member. A corrupt member is reported with its file
and byte offset, and reading goes on at the next member.

A corrupt line is reported with its file and line number and skipped; the rest is kept. A lone surrogate
in a string (escaped, ``\\ud800``, or as the bytes evlog wrote for one before it wrote U+FFFD) reads as
U+FFFD. Only whole lines are read, so a line being written is picked up on the next poll, never half. A
path that is not a folder, or a folder with none of these files but other things in it, raises
``RunFolderError``.

``bytes_read`` and ``bytes_total`` (of the files as they were at the last poll, compressed bytes for a
compressed file) say how far a read has come, for a page that shows a folder loading.
"""
from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Callable
from typing import Any

import msgspec

from evlog.data import otlp_decode
from evlog.text import without_lone_surrogates

_FILE = re.compile(r"^(traces|logs|metrics)[^/]*\.jsonl(\.gz)?$")
_GZIP_MAGIC = b"\x1f\x8b\x08"
_CHUNK = 8 << 20  # bytes read per file per step: bounded memory for large runs
_FEED = 64 << 10  # compressed bytes given to zlib at a time (a member of a run folder's file: 30 KB)
_MAX_PROBLEMS = 50
# A line's JSON as json.loads gives it, a third faster (evlog view's reading of a 157k-task run: 1.6 s against
# 2.3 s). What msgspec does not take (NaN, a lone surrogate's escape, a number beyond a double, a line that
# is not JSON) goes to json.loads, which decodes it or says what is wrong, as before.
_json_value = msgspec.json.Decoder().decode
_UNREAD = object()
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89abcdefABCDEF]")  # a line's text that json.loads may give lone surrogates


def _fix_surrogates(value: Any) -> Any:
    """json.loads's ``value`` with each lone surrogate in its strings made U+FFFD (evlog.text): a string with one
    cannot be stored (SQLite takes UTF-8) or printed."""
    t = type(value)
    if t is str:
        return without_lone_surrogates(value)
    if t is dict:
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in value.items()}
    if t is list:
        return [_fix_surrogates(v) for v in value]
    return value


class RunFolderError(Exception):
    """Not a run folder we can read; the message names it."""


def newest_run(base: str = "evlog-runs") -> str:
    """The newest run folder under ``base`` (names start with their UTC time; ties by mtime)."""
    try:
        entries = [e for e in os.scandir(base) if e.is_dir()]
    except OSError as e:
        raise RunFolderError(f"no run folder given and none found: {os.path.abspath(base)}: "
                             f"{e.strerror or e}") from None
    if not entries:
        raise RunFolderError(f"no run folder given and none found in {os.path.abspath(base)}")
    return max(entries, key=lambda e: (e.name[:16], e.stat().st_mtime)).path


class _File:
    __slots__ = ("path", "signal", "gz", "offset", "size", "line", "partial", "carry", "skipping")

    def __init__(self, path: str, signal: str, gz: bool):
        self.path = path
        self.signal = signal
        self.gz = gz
        self.offset = 0  # bytes of the file read: up to the last whole line, or the last whole member
        self.size = 0  # the file's size at the last poll
        self.line = 0
        self.partial = False  # a line (or member) begun and not ended at the last poll
        self.carry = b""  # a compressed file: the start of a line a member ended in (its writer's flush cut it)
        self.skipping = False  # a compressed file: going over a corrupt stretch (said once)


class RunFolder:
    """Follows the JSON-lines files of one run folder; ``poll()`` returns rows added since last time."""

    def __init__(self, path: str, keep_traces: Callable[[Any, bytes], Any] | None = None,
                 span_rows: Callable[[bytes], list] | None = None):
        """``keep_traces(request, line)``: what ``poll`` hands on for a traces line instead of its rows (a
        store's json_spans.columns); when it raises, the line is decoded into rows as any other.
        ``span_rows(line)``: a traces line's rows, faster than otlp_decode where it can (evlog.data.span_lines);
        when it raises, the line is decoded as any other."""
        self.keep_traces = keep_traces
        self.span_rows = span_rows
        self._kept: list = []
        self.path = os.path.abspath(path)
        if not os.path.exists(self.path):
            raise RunFolderError(f"{self.path}: no such run folder")
        if not os.path.isdir(self.path):
            raise RunFolderError(f"{self.path}: not a folder (a run folder holds traces*.jsonl, "
                                 "logs*.jsonl and metrics*.jsonl files)")
        self.files: dict[str, _File] = {}
        self.problems: list[str] = []
        self.problem_count = 0
        self.lines = 0
        self.rows = 0
        self.moved = False  # the last poll read something (rows or not: a corrupt stretch, part of a line)
        self._scan()
        if not self.files:
            others = [n for n in os.listdir(self.path) if not n.startswith(".")]
            if others:
                raise RunFolderError(
                    f"{self.path}: not an evlog run folder (no traces*.jsonl, logs*.jsonl or metrics*.jsonl; "
                    f"found {', '.join(sorted(others)[:3])}{', ...' if len(others) > 3 else ''})")

    def _scan(self) -> None:
        try:
            names = os.listdir(self.path)
        except OSError as e:
            self._problem(f"{self.path}: cannot list: {e.strerror or e}")
            return
        for name in sorted(names):
            m = _FILE.match(name)
            if m and name not in self.files:
                f = self.files[name] = _File(os.path.join(self.path, name), m.group(1), bool(m.group(2)))
                try:
                    f.size = os.stat(f.path).st_size  # bytes_total from the start, before it is read
                except OSError:
                    pass

    def _problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)

    def poll(self, max_bytes: int = _CHUNK) -> list[tuple[str, list[dict]]]:
        """Decode whole lines appended since the last poll (up to ``max_bytes`` per file)."""
        self._scan()
        out: list[tuple[str, list[dict]]] = []
        before = self.bytes_read
        for f in self.files.values():
            rows = self._read(f, max_bytes)
            if rows:
                out.append((f.signal, rows))
            if self._kept:
                out.extend((f.signal, k) for k in self._kept)
                self._kept = []
        self.moved = self.bytes_read != before
        return out

    @property
    def bytes_read(self) -> int:
        return sum(f.offset for f in self.files.values())

    @property
    def bytes_total(self) -> int:
        return sum(max(f.size, f.offset) for f in self.files.values())

    def _read(self, f: _File, max_bytes: int) -> list[dict]:
        try:
            with open(f.path, "rb") as fh:
                size = f.size = os.fstat(fh.fileno()).st_size
                if size < f.offset:  # truncated or replaced: start again
                    self._problem(f"{f.path}: file shrank; read again from the start")
                    f.offset, f.line, f.carry = 0, 0, b""
                if size == f.offset:
                    return []
                fh.seek(f.offset)
                data = fh.read(max_bytes)
        except OSError as e:
            self._problem(f"{f.path}: cannot read: {e.strerror or e}")
            return []
        if f.gz:
            text, used, more = self._members(f, data, f.offset + len(data) >= size, max_bytes)
            if not used and more:  # one member longer than a chunk: read it whole
                return self._read(f, max_bytes * 4)
            f.offset += used
            lines = (f.carry + text).split(b"\n")  # split as it is, not sliced first: a chunk copied once less
            f.carry = lines.pop()
            f.partial = bool(f.carry) or f.offset < size
            return self._lines(f, lines)
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= max_bytes:  # one line longer than a chunk: read it whole
                return self._read(f, max_bytes * 4)
            f.partial = True
            return []
        f.partial = end + 1 < len(data)
        f.offset += end + 1
        lines = data.split(b"\n")
        lines.pop()  # after the last newline: read at the next poll
        return self._lines(f, lines)

    def _members(self, f: _File, data: bytes, at_end: bool, limit: int) -> tuple[bytes, int, bool]:
        """(what the whole gzip members at the start of ``data`` hold, up to about ``limit`` bytes of it, the
        bytes they take, whether a member goes on past ``data`` and more of the file is there). A corrupt
        member is reported and skipped: reading resumes at the next gzip header after it."""
        out: list[bytes] = []
        pos = held = 0
        view = memoryview(data)
        while pos < len(data) and held < limit:
            if data[pos:pos + 3] != _GZIP_MAGIC[:len(data) - pos]:
                pos = self._resync(f, data, pos, "not a gzip member", at_end)
                continue
            d = zlib.decompressobj(wbits=31)
            at = pos
            parts = []
            try:  # fed a piece at a time: what follows the member is copied (unused_data) a piece at most
                while not d.eof and at < len(data):
                    piece = view[at:at + _FEED]
                    parts.append(d.decompress(piece))
                    at += len(piece)
            except zlib.error as e:
                pos = self._resync(f, data, pos, str(e), at_end)
                continue
            if not d.eof:  # being written, cut short, or longer than this chunk
                return b"".join(out), pos, not at_end and pos == 0
            f.skipping = False
            out += parts
            held += sum(map(len, parts))
            pos = at - len(d.unused_data)
        return b"".join(out), pos, False

    def _resync(self, f: _File, data: bytes, pos: int, why: str, at_end: bool) -> int:
        """Report a corrupt member at ``pos`` (once per corrupt stretch) and return where the next gzip
        header is (the end of ``data`` when there is none in it; a header cut at its end is left for the
        next poll)."""
        nxt = data.find(_GZIP_MAGIC, pos + 1)
        if nxt < 0:
            nxt = len(data) if at_end else max(pos + 1, len(data) - len(_GZIP_MAGIC) + 1)
        if not f.skipping:
            self._problem(f"{f.path}: byte {f.offset + pos}: skipped a corrupt gzip member ({why[:120]}); "
                          "reading goes on at the next member")
            f.skipping = True
        return nxt

    def _lines(self, f: _File, lines: list[bytes]) -> list[dict]:
        decode = otlp_decode.decode
        rows: list[dict] = []
        keep = self.keep_traces if f.signal == "traces" else None
        fast = self.span_rows if f.signal == "traces" and keep is None else None
        kept = self._kept
        for raw in lines:
            f.line += 1
            if not raw.strip():
                continue
            self.lines += 1
            if fast is not None:
                try:
                    rows.extend(fast(raw))
                    continue
                except Exception:  # not plain: decoded below, which says what is wrong in a bad line
                    pass
            try:
                request = _json_value(raw)
            except Exception:
                request = _UNREAD
            surrogates = False
            if request is _UNREAD:
                try:
                    text = raw.decode("utf-8")  # json.loads(bytes) would guess UTF-16 or 32 for random bytes
                except UnicodeDecodeError as e:
                    try:  # evlog before 2026-11-28 wrote a lone surrogate as the 3 bytes UTF-8 would make of it
                        text, surrogates = raw.decode("utf-8", "surrogatepass"), True
                    except UnicodeDecodeError:
                        self._problem(f"{f.path}:{f.line}: skipped a corrupt line: not UTF-8 JSON "
                                      f"(byte 0x{raw[e.start]:02x} at column {e.start + 1})")
                        continue
            try:
                whole = keep
                if request is _UNREAD:
                    request = json.loads(text)
                    if surrogates or _SURROGATE_ESCAPE.search(text):
                        request, whole = _fix_surrogates(request), None  # stored as rows: not the line
                if whole is not None:
                    try:
                        k = whole(request, raw)
                        kept.append(k)
                        self.rows += len(k)
                        continue
                    except Exception:  # not plain: decoded into rows, which says what is wrong in a bad line
                        pass
                rows.extend(decode(f.signal, request))
            except (ValueError, RecursionError) as e:  # json and DecodeError are ValueErrors
                msg = str(e)
                self._problem(f"{f.path}:{f.line}: skipped a corrupt line: {msg[:200]}")
        self.rows += len(rows)
        return rows

    def read_all(self) -> list[tuple[str, list[dict]]]:
        """Everything in the folder now, in (signal, rows) batches."""
        out = []
        while True:
            batch = self.poll()
            if not batch and not self.moved:
                break
            out.extend(batch)
        self.finish()
        return out

    def load_into(self, store) -> int:
        """Read everything now present into ``store`` (a Store); returns rows stored. Traces lines are kept
        as they are, their columns stored (evlog.data.store.json_spans)."""
        from evlog.data.store.json_spans import columns

        self.keep_traces = self.keep_traces or columns
        n = 0
        while True:
            batch = self.poll()
            if not batch and not self.moved:
                break
            if batch:
                n += store.ingest(batch)
        self.finish()
        return n

    def finish(self) -> None:
        """Report files whose last line or gzip member never ended (a writer killed mid-line)."""
        for f in self.files.values():
            if f.partial and f.gz:
                left = f.size - f.offset
                self._problem(f"{f.path}: byte {f.offset}: incomplete last gzip member ({left:,} bytes), skipped"
                              if left else f"{f.path}:{f.line + 1}: incomplete last line, skipped")
            elif f.partial:
                self._problem(f"{f.path}:{f.line + 1}: incomplete last line, skipped")
            f.partial = False
