"""pprof (github.com/google/pprof, proto/profile.proto): the few messages evlog writes and reads, by hand.

Standard library only: the run's exporter process encodes task profiles with it (gzip'd, base64, in the
body of an ``evlog.profile`` log record, as Splunk's profiler sends them) and the dashboard and
``evlog report`` decode them, with no protobuf package on either side.

A profile here is a list of samples, each ``(stack, values, labels)``: ``stack`` a tuple of
``(function, file, line)`` frames, leaf first (pprof's order); ``values`` one int per sample type;
``labels`` a dict of str -> str or int.
"""
from __future__ import annotations

import base64
import gzip

from evlog.text import utf8

FORMAT = "pprof-gzip-base64"


# ---- encoding --------------------------------------------------------------------------------------

def _varint(n: int, out: bytearray) -> None:
    n &= (1 << 64) - 1  # int64 as two's complement, as protobuf does
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _key(field: int, wire: int, out: bytearray) -> None:
    _varint((field << 3) | wire, out)


def _int(field: int, n: int, out: bytearray) -> None:
    if n:
        _key(field, 0, out)
        _varint(n, out)


def _bytes(field: int, data: bytes, out: bytearray) -> None:
    _key(field, 2, out)
    _varint(len(data), out)
    out += data


def _packed(field: int, values, out: bytearray) -> None:
    body = bytearray()
    for v in values:
        _varint(v, body)
    if body:
        _bytes(field, bytes(body), out)


class _Strings:
    def __init__(self):
        self.index = {"": 0}

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.index)
        return i


def encode(samples, sample_types, period_type, period: int, time_ns: int = 0, duration_ns: int = 0) -> bytes:
    """A serialized pprof Profile. ``sample_types``: ``((type, unit), ...)``, one per value of a sample;
    ``period_type``: ``(type, unit)``."""
    s = _Strings()
    out = bytearray()
    for t, u in sample_types:
        vt = bytearray()
        _int(1, s(t), vt)
        _int(2, s(u), vt)
        _bytes(1, bytes(vt), out)
    functions: dict = {}  # frame -> id (one location per function: the frame's first line)
    for stack, values, labels in samples:
        ids = []
        for frame in stack:
            i = functions.get(frame)
            if i is None:
                i = functions[frame] = len(functions) + 1
            ids.append(i)
        sm = bytearray()
        _packed(1, ids, sm)
        _packed(2, values, sm)
        for k, v in labels.items():
            lb = bytearray()
            _int(1, s(k), lb)
            if isinstance(v, int):
                _int(3, v, lb)
            else:
                _int(2, s(str(v)), lb)
            _bytes(3, bytes(lb), sm)
        _bytes(2, bytes(sm), out)
    for (_name, _file, line), i in functions.items():
        ln = bytearray()
        _int(1, i, ln)
        _int(2, line, ln)
        loc = bytearray()
        _int(1, i, loc)
        _bytes(4, bytes(ln), loc)
        _bytes(4, bytes(loc), out)
    for (name, file, line), i in functions.items():
        fn = bytearray()
        _int(1, i, fn)
        _int(2, s(name), fn)
        _int(3, s(name), fn)
        _int(4, s(file), fn)
        _int(5, line, fn)
        _bytes(5, bytes(fn), out)
    pt = bytearray()
    _int(1, s(period_type[0]), pt)
    _int(2, s(period_type[1]), pt)
    for text in s.index:  # every string is known now: the table, in index order
        _bytes(6, utf8(text), out)  # a lone surrogate as U+FFFD: protobuf refuses a profile with one
    _int(9, time_ns, out)
    _int(10, duration_ns, out)
    _bytes(11, bytes(pt), out)
    _int(12, period, out)
    return bytes(out)


def to_body(profile: bytes) -> str:
    """The log record's body: gzip'd, base64 (Splunk's ``pprof-gzip-base64``)."""
    return base64.b64encode(gzip.compress(profile, compresslevel=6)).decode("ascii")


# ---- decoding --------------------------------------------------------------------------------------

class DecodeError(ValueError):
    pass


def _fields(data: bytes):
    """(field, wire type, value) of one message: ints for varints, bytes for length-delimited."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            n, pos = _read_varint(data, pos)
            if pos + n > end:
                raise DecodeError("truncated pprof message")
            value, pos = data[pos:pos + n], pos + n
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise DecodeError(f"unsupported wire type {wire} in pprof")
        yield field, wire, value


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise DecodeError("truncated varint in pprof")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise DecodeError("varint too long in pprof")


def _ints(wire: int, value) -> list:
    if wire == 0:
        return [value]
    out, pos = [], 0
    while pos < len(value):
        v, pos = _read_varint(value, pos)
        out.append(v)
    return out


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def decode(profile: bytes) -> dict:
    """``{"samples": [(stack, values, labels)], "sample_types": [(type, unit)], "period": int,
    "time_ns": int, "duration_ns": int}`` of a serialized pprof Profile."""
    strings: list = []
    raw_samples, types, locations, functions = [], [], {}, {}
    period = time_ns = duration_ns = 0
    for field, wire, value in _fields(profile):
        if field == 1 and wire == 2:
            types.append({f: v for f, _w, v in _fields(value)})
        elif field == 2 and wire == 2:
            raw_samples.append(value)
        elif field == 4 and wire == 2:
            loc_id, lines = 0, []
            for f, w, v in _fields(value):
                if f == 1:
                    loc_id = v
                elif f == 4 and w == 2:
                    lines.append({f2: v2 for f2, _w2, v2 in _fields(v)})
            locations[loc_id] = lines
        elif field == 5 and wire == 2:
            fn = {f: v for f, _w, v in _fields(value)}
            functions[fn.get(1, 0)] = fn
        elif field == 6 and wire == 2:
            strings.append(bytes(value).decode("utf-8", "replace"))
        elif field == 9 and wire == 0:
            time_ns = _signed(value)
        elif field == 10 and wire == 0:
            duration_ns = _signed(value)
        elif field == 12 and wire == 0:
            period = _signed(value)

    def text(i: int) -> str:
        return strings[i] if 0 <= i < len(strings) else ""

    frames: dict = {}
    for loc_id, lines in locations.items():
        out = []
        for ln in reversed(lines):  # pprof: the last line is the caller, inlined ones come first
            fn = functions.get(ln.get(1, 0), {})
            out.append((text(fn.get(2, 0)), text(fn.get(4, 0)), _signed(ln.get(2, 0)) or fn.get(5, 0)))
        frames[loc_id] = out
    samples = []
    for raw in raw_samples:
        ids, values, labels = [], [], {}
        for f, w, v in _fields(raw):
            if f == 1:
                ids.extend(_ints(w, v))
            elif f == 2:
                values.extend(_signed(x) for x in _ints(w, v))
            elif f == 3 and w == 2:
                lb = {f2: v2 for f2, _w2, v2 in _fields(v)}
                labels[text(lb.get(1, 0))] = text(lb[2]) if lb.get(2) else _signed(lb.get(3, 0))
        stack = []
        for i in ids:
            stack.extend(reversed(frames.get(i, [("?", "", 0)])))
        samples.append((tuple(stack), values, labels))
    return {"samples": samples, "sample_types": [(text(t.get(1, 0)), text(t.get(2, 0))) for t in types],
            "period": period, "time_ns": time_ns, "duration_ns": duration_ns}


def from_body(body: str) -> dict:
    """``decode`` of a log record's body (``pprof-gzip-base64``); DecodeError when it is not one."""
    try:
        return decode(gzip.decompress(base64.b64decode(body, validate=True)))
    except (ValueError, OSError, EOFError, TypeError) as exc:
        if isinstance(exc, DecodeError):
            raise
        raise DecodeError(f"not a gzip'd base64 pprof body: {exc}") from None
