"""OTLP protobuf bytes for evlog's spans, written directly, and the patch that gives them to the OTLP exporters.

The standard OTLP encoder builds one protobuf object per span, per attribute and per value (about
44 µs of CPU for a pool task's span on the project's machine), while the bytes of most of a span
are the same for many spans: its name, kind and attributes (shared by every task of one function),
its resource and scope. Here a span's bytes are written by hand (protobuf wire format of
opentelemetry/proto/trace/v1/trace.proto) from cached constant parts and a few packed numbers, and
the exporters send the bytes of a whole request as they are (``RawRequest``: the HTTP exporter
serializes what the encoder returns, the gRPC exporter gets a stub that passes them through).
Anyone else calling ``encode_spans`` gets the usual message, parsed from those bytes in C.

Which spans take this path: evlog's task spans (``TaskSpan``) and the SDK's own ``ReadableSpan``
(``sdk_span_bytes``) when they have no links, and any type registered by an ``EncoderPatch`` with
its own writer (Dask's ``FinishedSpan``). Every other span goes through the standard encoder
unchanged. tests/test_fast_otlp.py and tests/test_dask.py check that the parsed messages equal the
standard encoder's.
"""
from __future__ import annotations

import struct
import sys
from collections.abc import Mapping
from typing import Callable

from opentelemetry.trace import DEFAULT_TRACE_STATE, StatusCode

from evlog import _report

from .otlp_json import memo

pack_q = struct.Struct("<Q").pack
_pack_d = struct.Struct("<d").pack
pack_times = struct.Struct("<BQBQ").pack  # start (field 7) and end (field 8), fixed64 each
# SpanKind values (INTERNAL=0 .. CONSUMER=4) -> the kind field (proto adds UNSPECIFIED=0)
KIND_FIELD = tuple(b"\x30" + bytes((v + 1,)) for v in range(5))
FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", 0x100)  # span flags: has-is-remote
FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x300)  # ... and the parent is remote
STATUS_UNSET = b"\x7a\x00"  # an empty Status message, as the standard encoder writes
_UNSET = StatusCode.UNSET


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# lengths below 16 KiB: a list lookup, not a call
LEN = [bytes((i,)) for i in range(128)] + [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 1 << 14)]


def ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    n = len(payload)
    return tag + (LEN[n] if n < 16384 else varint(n)) + payload


def text(tag: bytes, s: str) -> bytes:
    return ld(tag, s.encode("utf-8", "replace"))


def any_value(v) -> bytes:
    """An AnyValue message (as the standard encoder writes it for the same value)."""
    t = type(v)
    if t is str:
        return text(b"\x0a", v)
    if t is bool:
        return b"\x10\x01" if v else b"\x10\x00"
    if t is int:
        return b"\x18" + (LEN[v] if 0 <= v < 16384 else varint(v & 0xFFFFFFFFFFFFFFFF))
    if t is float:
        return b"\x21" + _pack_d(v)
    if t is list or t is tuple:
        return ld(b"\x2a", b"".join([ld(b"\x0a", any_value(x)) for x in v]))
    if t is bytes:
        return ld(b"\x3a", v)
    if v is None:
        return b""
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        return b"\x18" + varint(int(v) & 0xFFFFFFFFFFFFFFFF)
    if isinstance(v, float):
        return b"\x21" + _pack_d(float(v))
    if isinstance(v, Mapping):
        return ld(b"\x32", b"".join([ld(b"\x0a", kv(str(k), x)) for k, x in v.items()]))
    return text(b"\x0a", str(v))


def _memo_text(cache: dict, tag: bytes, s: str) -> bytes:
    if len(cache) > 4096:
        cache.clear()
    b = cache[s] = text(tag, s)
    return b


_key_cache: dict = {}
_name_cache: dict = {}


def key_field(key: str) -> bytes:
    """KeyValue.key of an attribute."""
    return _key_cache.get(key) or _memo_text(_key_cache, b"\x0a", key)


def name_field(name: str) -> bytes:
    """Span.name."""
    return _name_cache.get(name) or _memo_text(_name_cache, b"\x2a", name)


def kv(key: str, value) -> bytes:
    """A KeyValue message."""
    return key_field(key) + ld(b"\x12", any_value(value))


_field_cache: dict = {}  # (tag, key, text) -> the whole attribute field, for values that repeat


def cached_field(tag: bytes, key: str, value: str) -> bytes:
    k = (tag, key, value)
    b = _field_cache.get(k)
    if b is None:
        if len(_field_cache) > 8192:
            _field_cache.clear()
        b = _field_cache[k] = ld(tag, kv(key, value))
    return b


def text_field(tag: bytes, key: str, value: str) -> bytes:
    """An attribute field (tag, KeyValue with a string AnyValue), written out inline."""
    kb = key_field(key)
    vb = value.encode("utf-8", "replace")
    n = len(vb)
    av = b"\x0a" + (LEN[n] if n < 16384 else varint(n)) + vb
    n = len(av)
    kvb = kb + b"\x12" + (LEN[n] if n < 16384 else varint(n)) + av
    n = len(kvb)
    return tag + (LEN[n] if n < 16384 else varint(n)) + kvb


def attr_fields(tag: bytes, attrs, out: list, cached: frozenset = frozenset()) -> None:
    """Append one field per attribute; string values of the ``cached`` keys are written once."""
    for k, v in attrs.items():
        if type(v) is str:
            if k in cached:
                out.append(cached_field(tag, k, v))
            else:
                out.append(text_field(tag, k, v))
        else:
            out.append(ld(tag, kv(k, v)))


_head_cache: dict = {}  # (trace id, parent span id) -> their two fields


def head(ctx, parent) -> bytes:
    """trace_id and parent_span_id fields (the same for every span under one parent).
    SpanContexts are tuples: [0] trace id, [1] span id, [2] is remote."""
    if parent is not None:
        k = (ctx[0], parent[1])
        b = _head_cache.get(k)
        if b is None:
            if len(_head_cache) > 1024:
                _head_cache.clear()
            b = _head_cache[k] = b"\x0a\x10" + ctx[0].to_bytes(16, "big") + b"\x22\x08" + parent[1].to_bytes(8, "big")
        return b
    return b"\x0a\x10" + ctx[0].to_bytes(16, "big")


def status_field(st) -> bytes:
    if st is None or st.status_code is _UNSET:
        return STATUS_UNSET
    body = (text(b"\x12", st.description) if st.description else b"") + b"\x18" + LEN[st.status_code.value]
    return ld(b"\x7a", body)


# ---- SDK spans (TaskSpan, ReadableSpan) ---------------------------------------------------------

_const_cache: dict = {}  # (name, kind, id(attributes)) -> (attributes, name + kind + attribute fields)


def _make_constant(s) -> bytes:
    parts = [name_field(s._name), KIND_FIELD[s._kind.value]]
    if s._attributes:
        attr_fields(b"\x4a", s._attributes, parts)
    return b"".join(parts)


def _constant(s) -> bytes:
    """name, kind and attribute fields; kept when the attributes are a plain dict shared by many
    spans (a task span's, read-only until written), under its identity."""
    attrs = s._attributes
    if type(attrs) is dict:
        return memo(_const_cache, (s._name, s._kind, id(attrs)), attrs, _make_constant, s)
    return _make_constant(s)


def sdk_span_bytes(s) -> bytes:
    """A Span message for an SDK span without links (``fits(s)``)."""
    ctx = s._context
    parent = s._parent
    attrs = s._attributes
    const = None
    if type(attrs) is dict:  # _constant's cache, looked up inline
        hit = _const_cache.get((s._name, s._kind, id(attrs)))
        if hit is not None and hit[0] is attrs:
            const = hit[1]
    parts = [b"\x0a\x10" + ctx[0].to_bytes(16, "big") if parent is None else head(ctx, parent),
             b"\x12\x08", ctx[1].to_bytes(8, "big"), const or _constant(s),
             pack_times(0x39, s._start_time, 0x41, s._end_time)]
    st = s._status
    flags = FLAGS_REMOTE if parent is not None and parent[2] else FLAGS_LOCAL
    state = ctx[4]
    if (not s._events and (st is None or st.status_code is _UNSET) and state is DEFAULT_TRACE_STATE
            and type(attrs) is dict):  # a task span as most are: nothing more to write
        parts += (STATUS_UNSET, flags)
        return b"".join(parts)
    if state is not DEFAULT_TRACE_STATE and state:
        parts.append(text(b"\x1a", ",".join([f"{k}={v}" for k, v in state.items()])))
    if type(attrs) is not dict:
        dropped = getattr(attrs, "dropped", 0)
        if dropped:
            parts.append(b"\x50" + varint(dropped))
    events = s._events
    if events:
        for e in events:
            ev = [b"\x09", pack_q(e.timestamp), text(b"\x12", e.name)]
            if e.attributes:
                attr_fields(b"\x1a", e.attributes, ev)
            if e.dropped_attributes:
                ev.append(b"\x20" + varint(e.dropped_attributes))
            parts.append(ld(b"\x5a", b"".join(ev)))
        dropped = getattr(events, "dropped", 0)
        if dropped:
            parts.append(b"\x60" + varint(dropped))
    parts.append(status_field(st))
    parts.append(flags)
    return b"".join(parts)


def sdk_writer():
    return sdk_span_bytes


# ---- requests -----------------------------------------------------------------------------------

_res_cache: dict = {}
_scope_cache: dict = {}


def _encode_resource(res) -> bytes:
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_resource

    return ld(b"\x0a", _encode_resource(res).SerializeToString()) if res is not None else ld(b"\x0a", b"")


def _encode_scope(scope) -> tuple:
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_instrumentation_scope

    b = ld(b"\x0a", _encode_instrumentation_scope(scope).SerializeToString())
    return b, (text(b"\x1a", scope.schema_url) if scope is not None and scope.schema_url else b"")


def resource_bytes(res) -> bytes:
    """The ResourceSpans.resource field of ``res``."""
    return memo(_res_cache, id(res), res, _encode_resource, res, 64)


def encode_request(spans, span_bytes: Callable, pause: Callable | None = None) -> bytes:
    """Spans -> the bytes of an ExportTraceServiceRequest (one ResourceSpans per resource, one
    ScopeSpans per scope in it); ``span_bytes(span)`` writes each Span message."""
    by_res: dict = {}
    for s in spans:
        res, scope = s._resource, s._instrumentation_scope
        scopes = by_res.get(id(res))
        if scopes is None:
            scopes = by_res[id(res)] = (res, {})
        group = scopes[1].get(id(scope))
        if group is None:
            group = scopes[1][id(scope)] = (scope, [])
        group[1].append(s)
    out = []
    for res, scopes in by_res.values():
        body = [resource_bytes(res)]
        for scope, group in scopes.values():
            scope_field, schema = memo(_scope_cache, id(scope), scope, _encode_scope, scope, 64)
            parts = [scope_field]
            for s in group:
                b = span_bytes(s)
                n = len(b)
                parts += (b"\x12", LEN[n] if n < 16384 else varint(n), b)
                if pause is not None:
                    pause()
            parts.append(schema)
            body.append(ld(b"\x12", b"".join(parts)))
        if res is not None and res.schema_url:
            body.append(text(b"\x1a", res.schema_url))
        out.append(ld(b"\x0a", b"".join(body)))
    return b"".join(out)


# ---- the exporters' encoder ---------------------------------------------------------------------

_COMMON = "opentelemetry.exporter.otlp.proto.common._internal.trace_encoder"
_HOLDERS = (  # modules that hold encode_spans as a global
    _COMMON,
    "opentelemetry.exporter.otlp.proto.common.trace_encoder",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
)
_writers: dict = {}  # span type -> (fits(span) -> bool, make() -> span_bytes for one request)
_installed: list = []  # [original encode_spans, ours, ours returning RawRequest] while installed


class RawRequest:
    """An ExportTraceServiceRequest kept as the bytes written here. The exporters send these bytes
    as they are: parsing them into a message only to serialize it again cost about a third of the
    export's CPU per span. Anything else asked of it is answered by the parsed message (made once)."""

    __slots__ = ("body", "_msg")

    def __init__(self, body: bytes):
        self.body = body
        self._msg = None

    def SerializeToString(self, **_kw) -> bytes:
        return self.body

    SerializePartialToString = SerializeToString

    def ByteSize(self) -> int:
        return len(self.body)

    def message(self):
        if self._msg is None:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

            self._msg = ExportTraceServiceRequest.FromString(self.body)
        return self._msg

    def __getattr__(self, name):
        return getattr(self.message(), name)


def _fast_encoders(original, request_type) -> tuple:
    """(encode_spans returning a message, as the standard one does; the same returning a RawRequest
    when it wrote spans itself)."""

    def encode_raw(sdk_spans):
        if _unpatched:
            try:
                _patch_exporters()
            except Exception as exc:
                _report.warn_once("fast-otlp-patch", f"spans are sent as parsed messages: {exc!r}")
        writers = _writers
        mine, rest = [], []
        try:
            for s in sdk_spans:
                w = writers.get(type(s))
                (mine if w is not None and w[0](s) else rest).append(s)
        except Exception:
            mine = []
        if not mine:
            return original(sdk_spans)
        try:
            made: dict = {}  # one writer per span type in this request (they may keep per-request caches)

            def span_bytes(s):
                t = type(s)
                w = made.get(t)
                if w is None:
                    w = made[t] = writers[t][1]()
                return w(s)

            first = type(mine[0])
            if all(type(s) is first for s in mine):  # one type (the usual case): its writer directly
                span_bytes = writers[first][1]()
            body = encode_request(mine, span_bytes, _pause_for(mine))
        except Exception as exc:
            _report.warn_once("fast-otlp-encode", f"fast span encoding failed, using the standard encoder: {exc!r}")
            return original(sdk_spans)
        if rest:  # two serialized requests, one after the other, parse as one (repeated fields append)
            body = original(rest).SerializeToString() + body
        return RawRequest(body)

    def encode_spans(sdk_spans):
        r = encode_raw(sdk_spans)
        return request_type.FromString(r.body) if type(r) is RawRequest else r

    encode_spans.__wrapped__ = original
    encode_raw.__wrapped__ = original
    return encode_spans, encode_raw


_pausers: dict = {}  # span type -> make() -> pause, for writers on latency-bound processes (Dask)


def _pause_for(spans) -> Callable | None:
    make = _pausers.get(type(spans[0]))
    return make() if make is not None else None


_HTTP = "opentelemetry.exporter.otlp.proto.http.trace_exporter"  # serializes what encode_spans returns
_GRPC = "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"  # its exporter class: _translate_data


def _install() -> None:
    if _installed:
        return
    try:
        import importlib

        original = importlib.import_module(_COMMON).encode_spans
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    except Exception:
        return  # another exporter version: every span takes the ordinary path
    ours, raw = _fast_encoders(original, ExportTraceServiceRequest)
    _installed[:] = [original, ours, raw]
    for name in _HOLDERS:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "encode_spans", None) is original:
            mod.encode_spans = ours
    _unpatched[:] = [_HTTP, _GRPC]
    _patch_exporters()


def _patch_exporters() -> None:
    """The exporters' side of raw bytes, for each exporter module imported by now (and complete: its
    import may still be running when the encoder module's import installs the patch). Called again
    at each request until both are done."""
    for name in list(_unpatched):
        mod = sys.modules.get(name)
        if name == _HTTP:
            held = getattr(mod, "encode_spans", None)
            if held is None or not _installed or held not in _installed[:2]:
                continue
            mod.encode_spans = _installed[2]
        elif getattr(mod, "OTLPSpanExporter", None) is not None:
            raw_bytes.install(mod.OTLPSpanExporter)
        else:
            continue
        if name in _unpatched:
            _unpatched.remove(name)


_unpatched: list = []  # exporter modules still to patch for raw bytes


def _uninstall() -> None:
    if not _installed:
        return
    original, ours, raw = _installed
    raw_bytes.uninstall()
    _unpatched.clear()
    for name in _HOLDERS:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, "encode_spans", None) in (ours, raw):
            mod.encode_spans = original
    _installed.clear()


def _serialize(request) -> bytes:
    return request.body if type(request) is RawRequest else request.SerializeToString()


class _RawBytes:
    """The gRPC span exporter sends a RawRequest's bytes as they are. Its class's ``_translate_data``
    returns what the raw encoder returns, and the first call on each exporter gives it a stub whose
    serializer takes those bytes (and messages, as before) on the same channel; that call still sends
    a message, because the old stub is already chosen when ``_translate_data`` runs. Exporters made
    before or after, by evlog or by the program, all take this path; without the attributes this
    relies on (another exporter version), they keep the ordinary one."""

    def __init__(self):
        self._cls = None
        self._original = None
        self._stub = None

    def install(self, cls) -> None:
        if self._cls is not None or "_translate_data" not in cls.__dict__:
            return  # done, or another exporter version
        self._cls, self._original = cls, cls.__dict__["_translate_data"]
        stub_type = self._stub_type
        fallback = self._original

        def _translate_data(exporter, data):
            try:
                if _installed:
                    r = _installed[2](data)
                    if type(r) is not RawRequest:
                        return r
                    stub = stub_type()
                    if exporter.__dict__.get("_stub") is stub:
                        return r
                    exporter._client = stub(exporter._channel)  # for the next request
                    exporter._stub = stub  # what a reconnection makes its stub with
                    return r.message()
            except Exception as exc:
                _report.warn_once("fast-otlp-stub", f"spans are sent as parsed messages: {exc!r}")
            return fallback(exporter, data)

        cls._translate_data = _translate_data

    def _stub_type(self):
        if self._stub is None:
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

            class RawTraceServiceStub:
                """TraceServiceStub whose request serializer passes a RawRequest's bytes through."""

                def __init__(self, channel):
                    self.Export = channel.unary_unary(
                        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                        request_serializer=_serialize,
                        response_deserializer=ExportTraceServiceResponse.FromString,
                        _registered_method=True,
                    )

            self._stub = RawTraceServiceStub
        return self._stub

    def uninstall(self) -> None:
        """Exporters keep their stub: it sends messages as the standard one does."""
        if self._cls is not None:
            self._cls._translate_data = self._original
            self._cls = self._original = None


raw_bytes = _RawBytes()


class EncoderPatch:
    """Gives the OTLP trace exporters (gRPC and HTTP share one encoder) a fast path for one span type:
    their ``encode_spans`` is replaced, in each module that holds it, by one that writes the request
    here for the registered types (and encodes any other spans as before): the exporters send those
    bytes as they are (``RawRequest``), any other caller gets them parsed into the message. ``install()`` once
    an OTLP exporter is in use in the process (its encoder module imported), or ``install_on_import()``
    to have it done when that happens; the last ``uninstall()`` restores the standard encoder."""

    _common = _COMMON

    def __init__(self, span_type: type, make_writer: Callable, fits: Callable = bool, pauser: Callable | None = None):
        self._type = span_type
        self._entry = (fits, make_writer)
        self._pauser = pauser
        self._original: Callable | None = None  # the standard encode_spans while installed
        self._hooked = False

    def install(self) -> None:
        _writers[self._type] = self._entry
        if self._pauser is not None:
            _pausers[self._type] = self._pauser
        _install()
        if _installed:
            self._original = _installed[0]

    def install_on_import(self) -> None:
        """``install()`` now if the OTLP encoder is imported, else as soon as it is."""
        if _COMMON in sys.modules:
            self.install()
            return
        if self._hooked:
            return
        self._hooked = True
        try:
            import wrapt

            wrapt.register_post_import_hook(self._on_import, _COMMON)
        except Exception as exc:
            _report.warn_once("fast-otlp-hook", f"spans take the standard OTLP encoder: {exc!r}")

    def _on_import(self, _module) -> None:
        try:
            self.install()
        except Exception as exc:  # inside someone's import: never let it fail
            _report.warn_once("fast-otlp-hook", f"spans take the standard OTLP encoder: {exc!r}")

    def uninstall(self) -> None:
        if _writers.get(self._type) is self._entry:
            del _writers[self._type]
            _pausers.pop(self._type, None)
        self._original = None
        if not _writers:
            _uninstall()


def sdk_fits(s) -> bool:
    """Can ``sdk_span_bytes`` write this SDK span? (links go the standard way)"""
    links = s._links
    return not links and not getattr(links, "dropped", 0)


def sdk_patch(span_type: type) -> EncoderPatch:
    return EncoderPatch(span_type, sdk_writer, sdk_fits)
