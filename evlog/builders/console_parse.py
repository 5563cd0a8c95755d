"""The console line parser: bytes of stdout/stderr in, records out. Pure: no I/O, no OTel, no clock.

What it does, after cluster-job-logging.txt:
- splits each stream into lines, decodes them as UTF-8 with replacement, renders them as a console
  would show them (``\\r`` and backspace overwrite, ANSI escape sequences vanish), and truncates
  lines longer than ``max_line`` characters with a marker;
- ``/LOGCOMMAND {json}`` (on either stream) changes the mode for both streams from that line on;
  a malformed one gives a WARNING record and is then handled as an ordinary line;
- a line that is exactly one JSON object is METADATA (in modes enabled and metadata);
- in mode enabled every other line is TEXT, with repeats collapsed into one notice saying how many
  were dropped (REPEATED), runs of empty lines collapsed to one, and secrets redacted;
- ``discard()`` tells it that bytes were dropped upstream (export fell behind): it counts the lines
  lost (a line cut by the drop is dropped whole) and the next record out is a DROPPED notice.

Records come out in order. The relay (console_relay.py) turns them into OTel log records.
"""
from __future__ import annotations

import json
import zlib
from typing import Any, NamedTuple

from evlog.builders.redact import KEY_BEGIN, KEY_END, MASK, Redactor
from evlog.wire.console_render import render

MODES = ("enabled", "metadata", "disabled")
TEXT, METADATA, COMMAND, REPEATED, DROPPED, WARNING = "text", "metadata", "command", "repeated", "dropped", "warning"
COMMAND_PREFIX = "/LOGCOMMAND"
MAX_LINE = 8192  # characters kept of one line (a batch of 512 such lines stays near gRPC's 4 MiB)
MAX_KEY_LINES = 500  # a private key block longer than this is not one: resume after it
EXPECT_LINES = 1000  # lines an expected logged text (expect()) may be late by before it is forgotten
_INT64 = (-(2**63), 2**63 - 1)

class Record(NamedTuple):
    kind: str  # TEXT, METADATA, COMMAND, REPEATED, DROPPED or WARNING
    stream: str  # "stdout" or "stderr"
    body: Any  # str (text, notices, warning) or dict (metadata, command)
    lines: int = 0  # REPEATED / DROPPED: how many lines the notice stands for


class _Stream:
    __slots__ = ("name", "buf", "overflow", "ends_cr", "skip", "last", "repeats", "empty", "key_lines", "lost",
                 "expect", "dropping")

    def __init__(self, name: str):
        self.name = name
        self.buf = bytearray()  # the partial line
        self.overflow = 0  # bytes of the partial line dropped beyond the limit
        self.ends_cr = False  # the partial line ends with "\r" (it may yet be followed by more)
        self.skip = False  # after a gap: drop up to the next newline
        self.last: str | None = None  # the last TEXT line emitted (before redaction)
        self.repeats = 0  # how many times it came again since
        self.empty = False  # the last TEXT line emitted was empty
        self.key_lines = -1  # >= 0 while inside a private key block
        self.lost = 0  # lines discarded upstream, not yet reported
        self.expect: list = []  # [first line's CRC-32, lines, lines seen since]: logged texts to come (expect())
        self.dropping = 0  # lines of a logged text still to drop


def parse_command(line: str) -> tuple[dict | None, str | None]:
    """``/LOGCOMMAND {json}`` -> (the command, None) or (None, why it is malformed)."""
    payload = line[len(COMMAND_PREFIX):].strip()
    if not payload:
        return None, "no JSON object after /LOGCOMMAND"
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({getattr(exc, 'msg', exc)})"
    if not isinstance(obj, dict):
        return None, "expected a JSON object"
    unknown = sorted(k for k in obj if k != "mode")
    if unknown:
        return None, f"unknown option {unknown[0]!r} (known: mode)"
    if "mode" in obj:
        mode = obj["mode"]
        if not isinstance(mode, str) or mode.strip().lower() not in MODES:
            return None, f"mode must be one of {', '.join(MODES)}, got {json.dumps(mode)[:40]}"
        obj = {"mode": mode.strip().lower()}
    return obj, None


def json_safe(obj: Any) -> Any:
    """Integers OTLP cannot carry (beyond int64) become floats, or strings when too large."""
    if isinstance(obj, bool) or obj is None:
        return obj
    if isinstance(obj, int):
        if _INT64[0] <= obj <= _INT64[1]:
            return obj
        try:
            return float(obj)
        except OverflowError:
            return str(obj)
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [json_safe(v) for v in obj]
    return obj


def numeric_items(obj: dict, prefix: str = "", depth: int = 0):
    """(key, number) for each numeric value; nested objects give keys joined with '.'."""
    for k, v in obj.items():
        if isinstance(v, bool):
            continue
        if isinstance(v, (int, float)):
            yield prefix + k, v
        elif isinstance(v, dict) and depth < 8:
            yield from numeric_items(v, f"{prefix}{k}.", depth + 1)


class ConsoleParser:
    """One program's console: two streams sharing one mode (commands on either change it)."""

    def __init__(self, mode: str = "metadata", redact: Redactor | None = None, max_line: int = MAX_LINE):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.redact = redact or Redactor()
        self.max_line = max_line
        self._max_bytes = max_line * 4
        self._streams: dict[str, _Stream] = {}

    def _stream(self, name: str) -> _Stream:
        s = self._streams.get(name)
        if s is None:
            s = self._streams[name] = _Stream(name)
        return s

    # -- input ----------------------------------------------------------------------------------

    def feed(self, stream: str, data: bytes) -> list[Record]:
        """Bytes written to ``stream``; returns the records of the lines they complete."""
        s = self._stream(stream)
        out: list[Record] = []
        if s.lost:
            self._report_lost(s, out)
        if not data:
            return out
        nl = data.rfind(b"\n")
        if nl < 0:
            self._keep(s, data)
            return out
        first = data.find(b"\n")
        if s.skip:  # the rest of a line broken by a gap
            s.skip = False
        else:
            self._keep(s, data[:first])
            self._line(s, bytes(s.buf).decode("utf-8", "replace"), out, s.overflow)
        s.buf.clear()
        s.overflow = 0
        s.ends_cr = False
        if nl > first:
            limit = self._max_bytes
            for raw in data[first + 1:nl].split(b"\n"):
                overflow = 0
                if len(raw) > limit:
                    raw, overflow = self.bound(raw)
                self._line(s, raw.decode("utf-8", "replace"), out, overflow)
        if nl + 1 < len(data):
            self._keep(s, data[nl + 1:])
        return out

    def bound(self, line: bytes) -> tuple[bytes, int]:
        """A line's bytes kept in memory, and how many were dropped: a line longer than the limit
        keeps only what follows its last carriage return (a progress bar's latest state), and
        then at most the limit. The partial-line buffer reproduces this whatever the chunking."""
        limit = self._max_bytes
        if len(line) <= limit:
            return line, 0
        cr = line.rfind(b"\r", 0, len(line) - 1)
        if cr >= 0:
            line = line[cr:]
        if len(line) > limit:
            return line[:limit], len(line) - limit
        return line, 0

    def discard(self, stream: str, newlines: int, partial: bool) -> None:
        """Bytes of ``stream`` were dropped before reaching the parser: they held ``newlines``
        newlines and, if ``partial``, ended inside a line (non-empty bytes without a newline are
        ``(0, True)``). A line cut by the drop is lost whole. Reported by the next DROPPED record."""
        s = self._stream(stream)
        if newlines:
            s.lost += newlines - (1 if s.skip else 0)  # a line being skipped was counted already
            s.skip = False
        if partial and not s.skip:
            s.lost += 1
            s.skip = True
        s.buf.clear()
        s.overflow = 0
        s.ends_cr = False

    def flush(self, stream: str | None = None, partial: bool = False) -> list[Record]:
        """Pending repeat notices now (the stream went idle); with ``partial``, the unfinished line too."""
        out: list[Record] = []
        for s in ([self._stream(stream)] if stream else list(self._streams.values())):
            if s.lost:
                self._report_lost(s, out)
            if partial and (s.buf or s.overflow) and not s.skip:
                line, overflow = bytes(s.buf), s.overflow
                s.buf.clear()
                s.overflow = 0
                s.ends_cr = False
                self._line(s, line.decode("utf-8", "replace"), out, overflow)
            self._end_repeats(s, out)
        return out

    def expect(self, stream: str, first_crc: int, lines: int) -> None:
        """A logging record's text (``lines`` lines, the first with CRC-32 ``first_crc``) is about to come on
        ``stream``; exported as a log record already, in mode enabled it is dropped here, not sent twice."""
        s = self._stream(stream)
        if len(s.expect) < 256 and lines > 0:
            s.expect.append([first_crc, lines, 0])

    def close(self, stream: str) -> list[Record]:
        """End of ``stream``: its last unfinished line and pending notices."""
        return self.flush(stream, partial=True)

    # -- one line -------------------------------------------------------------------------------

    def _keep(self, s: _Stream, data: bytes) -> None:
        """Append to the partial line, bounded; at the line's end (buf, overflow) == bound(line)."""
        if s.skip or not data:
            return
        buf, limit = s.buf, self._max_bytes
        if len(buf) + s.overflow + len(data) <= limit:
            buf += data
        else:  # a long line: keep from its last carriage return that something follows
            cr = data.rfind(b"\r", 0, len(data) - 1)
            if cr >= 0:
                buf[:] = data[cr:]
                s.overflow = 0
            elif s.ends_cr:
                buf[:] = b"\r" + data
                s.overflow = 0
            else:
                cr = buf.rfind(b"\r")
                if cr > 0:
                    del buf[:cr]
                    s.overflow = 0
                buf += data
            if len(buf) > limit:
                s.overflow += len(buf) - limit
                del buf[limit:]
        s.ends_cr = data.endswith(b"\r")

    def _line(self, s: _Stream, line: str, out: list, overflow: int) -> None:
        if "\r" in line or "\x1b" in line or "\b" in line:
            line = render(line)
        if overflow or len(line) > self.max_line:
            extra = overflow + len(line[self.max_line:].encode("utf-8", "surrogatepass"))
            line = line[: self.max_line] + f" [evlog: line truncated, {extra} more bytes]"
        if line[:11] == COMMAND_PREFIX and (len(line) == 11 or line[11].isspace()):
            cmd, why = parse_command(line)
            if cmd is not None:
                if "mode" in cmd:
                    self.mode = cmd["mode"]
                out.append(Record(COMMAND, s.name, cmd))
                return
            out.append(Record(WARNING, s.name, f"ignored a malformed console command on {s.name}: {why}: "
                                               f"{line[:80]!r} (kept as an ordinary line)"))
        mode = self.mode
        if mode == "disabled":
            return
        if (s.dropping or s.expect) and mode == "enabled" and self._logged(s, line):
            return
        if line[:1] == "{" and line[-1:] == "}":
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict):
                self._end_repeats(s, out)
                s.last = None
                s.empty = False
                out.append(Record(METADATA, s.name, json_safe(self.redact.value(obj))))
                return
        if mode != "enabled":
            return
        if s.key_lines >= 0:  # inside a private key block: nothing of it leaves
            s.key_lines += 1
            if KEY_END.search(line) or s.key_lines > MAX_KEY_LINES:
                s.key_lines = -1
            return
        if not line or line.isspace():
            if s.empty:
                return
            self._end_repeats(s, out)
            s.empty = True
            s.last = ""
            out.append(Record(TEXT, s.name, ""))
            return
        if line == s.last:
            s.repeats += 1
            return
        self._end_repeats(s, out)
        s.last = line
        s.empty = False
        if "PRIVATE KEY-----" in line and KEY_BEGIN.search(line) and not KEY_END.search(line):
            s.key_lines = 0
        out.append(Record(TEXT, s.name, self.redact(line)))

    def _logged(self, s: _Stream, line: str) -> bool:
        """Is ``line`` part of a logged text announced by expect() (then it is dropped)?"""
        if s.dropping:
            s.dropping -= 1
            return True
        crc = zlib.crc32(line.encode("utf-8", "surrogatepass"))
        for i, e in enumerate(s.expect):
            if e[0] == crc:
                del s.expect[i]
                s.dropping = e[1] - 1
                return True
            e[2] += 1
        s.expect = [e for e in s.expect if e[2] <= EXPECT_LINES]
        return False

    def _report_lost(self, s: _Stream, out: list) -> None:
        n, s.lost = s.lost, 0
        self._end_repeats(s, out)
        s.last = None
        out.append(Record(DROPPED, s.name, f"[evlog: {n} line{'s' if n != 1 else ''} dropped: "
                                          "output came faster than it could be exported]", n))

    def _end_repeats(self, s: _Stream, out: list) -> None:
        n = s.repeats
        if n:
            s.repeats = 0
            out.append(Record(REPEATED, s.name, f"[evlog: previous line repeated {n} more time{'s' if n != 1 else ''}]", n))


__all__ = ["ConsoleParser", "Record", "render", "parse_command", "numeric_items", "json_safe", "MODES", "MASK",
           "TEXT", "METADATA", "COMMAND", "REPEATED", "DROPPED", "WARNING"]
