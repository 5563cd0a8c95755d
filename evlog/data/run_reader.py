"""Reading a run folder (``traces*.jsonl``, ``logs*.jsonl``, ``metrics*.jsonl``: one OTLP/JSON export
request per line) into decoded rows, whole or by following the files as a live run appends to them.

A corrupt line is reported with its file and line number and skipped; the rest is kept. Only whole
lines are read, so a line being written is picked up on the next poll, never half. A path that is not
a folder, or a folder with none of these files but other things in it, raises ``RunFolderError``.
"""
from __future__ import annotations

import json
import os
import re

from evlog.data import otlp_decode

_FILE = re.compile(r"^(traces|logs|metrics)[^/]*\.jsonl$")
_CHUNK = 8 << 20  # bytes read per file per step: bounded memory for large runs
_MAX_PROBLEMS = 50


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
    __slots__ = ("path", "signal", "offset", "line", "partial")

    def __init__(self, path: str, signal: str):
        self.path = path
        self.signal = signal
        self.offset = 0
        self.line = 0
        self.partial = False


class RunFolder:
    """Follows the JSON-lines files of one run folder; ``poll()`` returns rows added since last time."""

    def __init__(self, path: str):
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
                self.files[name] = _File(os.path.join(self.path, name), m.group(1))

    def _problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < _MAX_PROBLEMS:
            self.problems.append(text)

    def poll(self, max_bytes: int = _CHUNK) -> list[tuple[str, list[dict]]]:
        """Decode whole lines appended since the last poll (up to ``max_bytes`` per file)."""
        self._scan()
        out: list[tuple[str, list[dict]]] = []
        for f in self.files.values():
            rows = self._read(f, max_bytes)
            if rows:
                out.append((f.signal, rows))
        return out

    def _read(self, f: _File, max_bytes: int) -> list[dict]:
        try:
            with open(f.path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < f.offset:  # truncated or replaced: start again
                    self._problem(f"{f.path}: file shrank; read again from the start")
                    f.offset, f.line = 0, 0
                if size == f.offset:
                    return []
                fh.seek(f.offset)
                data = fh.read(max_bytes)
        except OSError as e:
            self._problem(f"{f.path}: cannot read: {e.strerror or e}")
            return []
        end = data.rfind(b"\n")
        if end < 0:
            if len(data) >= max_bytes:  # one line longer than a chunk: read it whole
                return self._read(f, max_bytes * 4)
            f.partial = True
            return []
        f.partial = end + 1 < len(data)
        f.offset += end + 1
        decode = otlp_decode.decode
        rows: list[dict] = []
        for raw in data[:end].split(b"\n"):
            f.line += 1
            if not raw.strip():
                continue
            self.lines += 1
            try:
                text = raw.decode("utf-8")  # json.loads(bytes) would guess UTF-16 or 32 for random bytes
            except UnicodeDecodeError as e:
                self._problem(f"{f.path}:{f.line}: skipped a corrupt line: not UTF-8 JSON "
                              f"(byte 0x{raw[e.start]:02x} at column {e.start + 1})")
                continue
            try:
                rows.extend(decode(f.signal, json.loads(text)))
            except (ValueError, RecursionError) as e:  # json and DecodeError are ValueErrors
                msg = str(e)
                self._problem(f"{f.path}:{f.line}: skipped a corrupt line: {msg[:200]}")
        return rows

    def read_all(self) -> list[tuple[str, list[dict]]]:
        """Everything in the folder now, in (signal, rows) batches."""
        out = []
        while True:
            batch = self.poll()
            if not batch:
                break
            out.extend(batch)
        self.finish()
        return out

    def load_into(self, store) -> int:
        """Read everything now present into ``store`` (a Store); returns rows stored."""
        n = 0
        while True:
            batch = self.poll()
            if not batch:
                break
            n += store.ingest(batch)
        self.finish()
        return n

    def finish(self) -> None:
        """Report files whose last line never ended (a writer killed mid-line)."""
        for f in self.files.values():
            if f.partial:
                self._problem(f"{f.path}:{f.line + 1}: incomplete last line, skipped")
                f.partial = False
