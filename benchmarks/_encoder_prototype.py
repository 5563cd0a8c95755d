"""Prototype (issue 28, not used by evlog): the OTLP trace protobuf of the Dask task spans written by hand, with
per-(key, value) caches of the encoded attributes, against the stock encoder; checks both parse to the same
message. What a hand encoder would save the exporter process, for the decision the issue note asks for.

    python benchmarks/_encoder_prototype.py
"""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from task_encoding import task_spans  # noqa: E402  (benchmarks/task_encoding.py)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


_kv: dict = {}


def kv(key, value) -> bytes:
    k = (key, type(value), value)
    b = _kv.get(k)
    if b is None:
        if type(value) is str:
            any_ = ld(1, value.encode())
        elif type(value) is bool:
            any_ = b"\x10" + varint(int(value))
        elif type(value) is int:
            any_ = b"\x18" + varint(value & 0xFFFFFFFFFFFFFFFF)
        elif type(value) is float:
            any_ = b"\x21" + struct.pack("<d", value)
        else:
            raise TypeError(type(value))
        b = ld(1, key.encode()) + ld(2, any_)
        if len(_kv) < 100_000:
            _kv[k] = b
    return b


def attrs(field: int, attributes) -> bytes:
    return b"".join([ld(field, kv(k, v)) for k, v in attributes.items()])


_FIX64 = struct.Struct("<Q")


def span(s) -> bytes:
    c = s.context
    parts = [b"\x0a\x10" + c.trace_id.to_bytes(16, "big"), b"\x12\x08" + c.span_id.to_bytes(8, "big")]
    if s.parent is not None:
        parts.append(b"\x22\x08" + s.parent.span_id.to_bytes(8, "big"))
    parts.append(ld(5, s.name.encode()))
    parts.append(b"\x30" + varint(s.kind.value + 1))
    parts.append(b"\x39" + _FIX64.pack(s.start_time))
    parts.append(b"\x41" + _FIX64.pack(s.end_time))
    parts.append(attrs(9, s.attributes))
    for e in s.events:
        parts.append(ld(11, b"\x09" + _FIX64.pack(e.timestamp) + ld(2, e.name.encode()) + attrs(3, e.attributes)))
    parts.append(b"\x7a\x00")  # status {}
    parts.append(b"\x85\x01" + struct.pack("<I", 0x100 | (0x200 if s.parent is not None and s.parent.is_remote else 0)))
    return b"".join(parts)


def encode(spans) -> bytes:
    groups: dict = {}
    for s in spans:
        groups.setdefault(id(s.resource), (s.resource, {}))[1].setdefault(id(s.instrumentation_scope), (s.instrumentation_scope, []))[1].append(s)
    out = []
    for res, scopes in groups.values():
        ss = []
        for scope, items in scopes.values():
            sc = ld(1, scope.name.encode()) + ld(2, (scope.version or "").encode())
            ss.append(ld(2, ld(1, sc) + b"".join([ld(2, span(x)) for x in items])))
        out.append(ld(1, ld(1, attrs(1, res.attributes)) + b"".join(ss)))
    return b"".join(out)


if __name__ == "__main__":
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    for events in (True, False):
        spans = task_spans(512, events, True)
        stock = encode_spans(spans)
        mine = ExportTraceServiceRequest.FromString(encode(spans))
        assert MessageToDict(stock) == MessageToDict(mine), "differs"
        for name, fn in (("stock", lambda: encode_spans(spans).SerializeToString()), ("hand", lambda: encode(spans))):
            best = min((lambda t: (fn(), time.process_time() - t)[1])(time.process_time()) for _ in range(7))
            print(f"events={events} {name}: {best / 512 * 1e6:.1f} us per task")
