"""Spans recorded after the fact, assembled in batches, and their cheap path to OTLP bytes.

The Dask scheduler and workers record plain tuples on their hot paths (see dask_scheduler and
dask_worker). A background thread (the assembler) wakes every INTERVAL seconds, asks each
registered source for the spans it can finish, and hands them to the tracer provider's span
processors (batch processors, consumers), so they go wherever the user's exporters send spans.

Why not ordinary SDK spans: on a Dask scheduler the per-task cost decides throughput, and most of
the cost of a span is not in the SDK but in the OTLP encoder (one protobuf object per attribute,
per event, per event attribute). So a ``FinishedSpan`` keeps its transitions as tuples and builds
SDK ``Event`` objects only if someone reads ``.events`` (the run-folder or console exporter, a
consumer), and the OTLP encoder is given a fast path for these spans: their protobuf bytes are
written directly (constant parts cached), and parsed back into one message per batch in C.
Other spans go through the encoder unchanged.
"""
from __future__ import annotations

import os
import random
import struct
import sys
import threading
import weakref
from time import perf_counter, sleep
from typing import Callable

from opentelemetry.sdk.trace import Event, ReadableSpan, SpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from evlog import __version__, _report, stats

INTERVAL = 0.5  # seconds between assembler passes
SCOPE = InstrumentationScope("evlog.dask", __version__)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = Status(StatusCode.UNSET)
CARRIER = "evlog.traceparent"  # the task annotation that carries the trace context
_getrandbits = random.getrandbits
_tuple_new = tuple.__new__

# ---- spans --------------------------------------------------------------------------------------


class FinishedSpan(ReadableSpan):
    """A finished span built from recorded fields; SDK events are made only when read.

    ``transitions`` are (key, start, finish, stimulus_id, worker, time in seconds) tuples
    (evlog.events.Transition); each becomes a span event ``transition``. ``extra`` are
    (name, time in ns, attributes) events (exceptions, startstops).
    """

    def __init__(self, name, context, parent, resource, attributes, kind, status, start, end,
                 transitions=(), extra=()):
        # ReadableSpan.__init__ only assigns fields; assigning them here saves a call per span.
        self._name = name
        self._context = context
        self._parent = parent
        self._resource = resource
        self._attributes = attributes
        self._kind = kind
        self._status = status
        self._start_time = start
        self._end_time = end
        self._links = ()
        self._instrumentation_scope = SCOPE
        self._instrumentation_info = None
        self.transitions = transitions
        self.extra = extra
        self._built = None

    @property
    def _events(self):  # read by ReadableSpan.events and to_json
        if self._built is None:
            evs = [_transition_event(t) for t in self.transitions]
            evs.extend(Event(name, attrs, t) for name, t, attrs in self.extra)
            evs.sort(key=lambda e: e.timestamp)
            self._built = tuple(evs)
        return self._built


def _transition_event(t) -> Event:
    attrs = {"dask.transition.start": t[1], "dask.transition.finish": t[2]}
    if t[4]:
        attrs["dask.worker.address"] = t[4]
    attrs["dask.stimulus_id"] = t[3]
    return Event("transition", attrs, int(t[5] * 1e9))


def new_span_id() -> int:
    return _getrandbits(64) or 1


def new_trace_id() -> int:
    return _getrandbits(128) or 1


def context(trace_id: int, span_id: int) -> SpanContext:
    """A sampled local SpanContext; made as SpanContext.__new__ makes it, without re-checking ids
    that are valid by construction (one per span, so it counts)."""
    return _tuple_new(SpanContext, (trace_id, span_id, False, SAMPLED, DEFAULT_TRACE_STATE, True))


# ---- parents: the carrier -----------------------------------------------------------------------

_parsed: dict = {}


def parse_traceparent(tp) -> SpanContext | None:
    """The remote parent SpanContext of a W3C traceparent string, cached (one per client call)."""
    sc = _parsed.get(tp)
    if sc is None:
        try:
            _v, trace_hex, span_hex, flags = tp.split("-")[:4]
            sc = SpanContext(int(trace_hex, 16), int(span_hex, 16), True, TraceFlags(int(flags, 16) & 0xFF))
        except Exception:
            return None
        if not sc.is_valid:
            return None
        if len(_parsed) > 4096:
            _parsed.clear()
        _parsed[tp] = sc
    return sc


def format_traceparent(sc: SpanContext) -> str:
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def trace_of_group(span_id) -> int:
    """A trace id for tasks with no carrier: from Dask's own span id (a uuid), shared by scheduler
    and workers, so tasks of one Dask span still land in one trace; random if there is none."""
    if span_id:
        try:
            return int(str(span_id).replace("-", ""), 16) & ((1 << 128) - 1) or 1
        except ValueError:
            pass
    return new_trace_id()


# ---- pacing: background work in short slices ----------------------------------------------------

SLICE = 0.0002  # seconds of work before a background thread lets the GIL go
PAUSE = 0.0001  # how long it lets it go


class Pacer:
    """Lets the GIL go every SLICE seconds of work. A Dask scheduler or worker is latency-bound:
    its event loop sleeps on sockets, and when it wakes while a background thread computes, it
    waits for the GIL up to the 5 ms switch interval. Work in slices of a fraction of a millisecond,
    each followed by a real sleep, bounds that wait at the slice length."""

    __slots__ = ("_t0",)

    def __init__(self):
        self._t0 = perf_counter()

    def __call__(self) -> None:
        if perf_counter() - self._t0 > SLICE:
            sleep(PAUSE)
            self._t0 = perf_counter()


def no_pause() -> None:
    pass


def pacer():
    """A Pacer on evlog's background threads; a no-op on any other (a flush, a story() call)."""
    return Pacer() if threading.current_thread().name in _BACKGROUND else no_pause


_BACKGROUND = {"evlog-dask", "OtelBatchSpanRecordProcessor"}


# ---- the assembler ------------------------------------------------------------------------------


class Assembler:
    """One background thread per process turning recorded tuples into spans, in batches."""

    def __init__(self):
        self._sources: list = []  # objects with .drain(final: bool) -> list of spans
        self._lock = threading.Lock()  # one pass at a time
        self._wake = threading.Event()
        self._thread = None
        self._pid = -1
        self._stopping = False

    def add(self, source) -> None:
        if source not in self._sources:
            self._sources.append(source)
        _processors()  # from now on, a force_flush of the provider includes what is held here
        self._ensure_thread()

    def remove(self, source) -> None:
        self.run_once(final=True, only=source)
        if source in self._sources:
            self._sources.remove(source)

    def _ensure_thread(self) -> None:
        alive = self._thread is not None and self._pid == os.getpid() and self._thread.is_alive()
        if alive and not self._stopping:
            return
        if alive:
            self._thread.join(2.0)  # a stop() in progress
        self._pid = os.getpid()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="evlog-dask", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping:
            self._wake.wait(INTERVAL)
            self._wake.clear()
            if not self._stopping:
                self.run_once()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self.run_once(final=True)

    def _after_fork(self) -> None:
        """A forked child is not the scheduler or worker its parent is: it must not send their spans."""
        self._sources = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None
        self._stopping = False

    def run_once(self, final: bool = False, only=None) -> int:
        """One pass: collect finished spans from every source and hand them to the processors."""
        with self._lock:
            spans = []
            for src in list(self._sources) if only is None else [only]:
                try:
                    spans.extend(src.drain(final))
                except Exception as exc:
                    _report.warn_once(f"dask-drain-{type(src).__name__}",
                                      f"Dask telemetry could not be assembled, some spans are lost: {exc!r}")
            if spans:
                _deliver(spans)
            return len(spans)


def _deliver(spans) -> None:
    if encoder_patch._original is None and EncoderPatch._common in sys.modules:
        encoder_patch.install()  # once an OTLP exporter is in use here
    proc = _processors()
    if proc is None:
        _report.warn_once("dask-no-sdk", "the tracer provider is not the OTel SDK's: Dask task spans are dropped")
        return
    on_end = proc.on_end
    pause = pacer()
    for s in spans:
        on_end(s)
        pause()
    stats.incr("spans", len(spans))


def _processors():
    """The global tracer provider's span processors (None without the SDK), with a _Flusher."""
    from opentelemetry import trace

    tp = trace.get_tracer_provider()
    proc = getattr(tp, "_active_span_processor", None)
    if proc is not None and tp not in _flushers:
        _flushers[tp] = _Flusher(proc)
        tp.add_span_processor(_flushers[tp])
    return proc


class _Flusher(SpanProcessor):
    """A span processor whose force_flush first delivers the spans the assembler still holds, so
    ``TracerProvider.force_flush()`` (and evlog's exit flush) includes Dask's spans."""

    def __init__(self, active):
        self._active = active
        self._busy = False

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        if self._busy:
            return True
        self._busy = True
        try:
            if assembler.run_once():  # processors flushed before this one get them flushed again
                return self._active.force_flush(timeout_millis)
            return True
        finally:
            self._busy = False


_flushers: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def resource():
    from opentelemetry import trace

    return getattr(trace.get_tracer_provider(), "resource", None)


assembler = Assembler()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=assembler._after_fork)


# ---- fast OTLP encoding -------------------------------------------------------------------------
# Protobuf wire format of opentelemetry/proto/trace/v1/trace.proto, written by hand for FinishedSpan.

_pack_q = struct.Struct("<Q").pack
_pack_d = struct.Struct("<d").pack
_KIND = {SpanKind.INTERNAL: b"\x30\x01", SpanKind.SERVER: b"\x30\x02", SpanKind.CLIENT: b"\x30\x03",
         SpanKind.PRODUCER: b"\x30\x04", SpanKind.CONSUMER: b"\x30\x05"}
_FLAGS_LOCAL = b"\x85\x01" + struct.pack("<I", 0x100)  # span flags: has-is-remote
_FLAGS_REMOTE = b"\x85\x01" + struct.pack("<I", 0x300)  # ... and the parent is remote
_STATUS_UNSET = b"\x7a\x00"  # an empty Status message, as the standard encoder writes


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# lengths below 16 KiB: a list lookup, not a call
_LEN = [bytes((i,)) for i in range(128)] + [bytes(((i & 0x7F) | 0x80, i >> 7)) for i in range(128, 1 << 14)]


def _ld(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    n = len(payload)
    return tag + (_LEN[n] if n < 16384 else _varint(n)) + payload


def _str(tag: bytes, s: str) -> bytes:
    return _ld(tag, s.encode("utf-8", "replace"))


def _any(v) -> bytes:
    """An AnyValue message."""
    t = type(v)
    if t is str:
        return _str(b"\x0a", v)
    if t is bool:
        return b"\x10\x01" if v else b"\x10\x00"
    if t is int:
        return b"\x18" + (_LEN[v] if 0 <= v < 16384 else _varint(v & 0xFFFFFFFFFFFFFFFF))
    if t is float:
        return b"\x21" + _pack_d(v)
    if t is list or t is tuple:
        return _ld(b"\x2a", b"".join([_ld(b"\x0a", _any(x)) for x in v]))
    if t is bytes:
        return _ld(b"\x3a", v)
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, int):
        return b"\x18" + _varint(int(v) & 0xFFFFFFFFFFFFFFFF)
    if isinstance(v, float):
        return b"\x21" + _pack_d(float(v))
    return _str(b"\x0a", str(v))


_key_cache: dict = {}


def _kv(key: str, value) -> bytes:
    """A KeyValue message."""
    kb = _key_cache.get(key)
    if kb is None:
        if len(_key_cache) > 4096:
            _key_cache.clear()
        kb = _key_cache[key] = _str(b"\x0a", key)
    return kb + _ld(b"\x12", _any(value))


_CACHED_KEYS = frozenset({"dask.task.prefix", "dask.task.group", "dask.worker.address", "dask.task.state",
                          "thread.name", "dask.transfer.source"})
_field_cache: dict = {}  # (tag, key, text) -> the whole attribute field, for values that repeat
_EV_TRANSITION_NAME = _str(b"\x12", "transition")
_tr_cache: dict = {}


def _cached_field(tag: bytes, key: str, value: str) -> bytes:
    k = (tag, key, value)
    b = _field_cache.get(k)
    if b is None:
        if len(_field_cache) > 8192:
            _field_cache.clear()
        b = _field_cache[k] = _ld(tag, _kv(key, value))
    return b


def _transition_const(start: str, finish: str, worker) -> bytes:
    """name + start + finish + worker attributes of a transition event: shared by many tasks."""
    b = _EV_TRANSITION_NAME + _ld(b"\x1a", _kv("dask.transition.start", start)) + _ld(
        b"\x1a", _kv("dask.transition.finish", finish))
    if worker:
        b += _ld(b"\x1a", _kv("dask.worker.address", worker))
    if len(_tr_cache) > 8192:
        _tr_cache.clear()
    _tr_cache[(start, finish, worker)] = b
    return b


def _text_field(tag: bytes, key: str, value: str) -> bytes:
    """An attribute field (tag, KeyValue with a string AnyValue), written out inline."""
    kb = _key_cache.get(key)
    if kb is None:
        kb = _key_cache[key] = _str(b"\x0a", key)
    vb = value.encode("utf-8", "replace")
    n = len(vb)
    av = b"\x0a" + (_LEN[n] if n < 16384 else _varint(n)) + vb
    n = len(av)
    kv = kb + b"\x12" + (_LEN[n] if n < 16384 else _varint(n)) + av
    n = len(kv)
    return tag + (_LEN[n] if n < 16384 else _varint(n)) + kv


def _attr_fields(tag: bytes, attrs, out: list) -> None:
    for k, v in attrs.items():
        if type(v) is str:
            if k in _CACHED_KEYS:
                out.append(_cached_field(tag, k, v))
            else:
                out.append(_text_field(tag, k, v))
        else:
            out.append(_ld(tag, _kv(k, v)))


_head_cache: dict = {}  # (trace id, parent span id) -> their two fields


def _head(ctx, parent) -> bytes:
    """trace_id and parent_span_id fields (the same for every span of one client call).
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


_name_cache: dict = {}


def _span_bytes(s: FinishedSpan, stims: dict) -> bytes:
    # fields in any order: protobuf parsers accept it, and the message written out again is canonical
    ctx = s._context
    parent = s._parent
    name = _name_cache.get(s._name)
    if name is None:
        if len(_name_cache) > 4096:
            _name_cache.clear()
        name = _name_cache[s._name] = _str(b"\x2a", s._name)
    parts = [_head(ctx, parent), b"\x12\x08", ctx[1].to_bytes(8, "big"), name, _KIND[s._kind]]
    parts.append(b"\x39" + _pack_q(s._start_time) + b"\x41" + _pack_q(s._end_time))
    _attr_fields(b"\x4a", s._attributes, parts)
    if s.transitions:
        # a transition event: its time, then name + start + finish + worker (the same bytes for many
        # tasks) and the stimulus (shared by the tasks it moved), each written once
        trc = _tr_cache
        for _key, start, finish, stim, w, t in s.transitions:
            c = trc.get((start, finish, w)) or _transition_const(start, finish, w)
            sf = stims.get(stim)
            if sf is None:
                sf = stims[stim] = _text_field(b"\x1a", "dask.stimulus_id", stim or "")
            n = 9 + len(c) + len(sf)
            parts += (b"\x5a", _LEN[n] if n < 16384 else _varint(n), b"\x09", _pack_q(int(t * 1e9)), c, sf)
    for name, ts, attrs in s.extra:
        ev = [b"\x09", _pack_q(ts), _str(b"\x12", name)]
        _attr_fields(b"\x1a", attrs, ev)
        parts.append(_ld(b"\x5a", b"".join(ev)))
    st = s._status
    if st is None or st.status_code is StatusCode.UNSET:
        parts.append(_STATUS_UNSET)
    else:
        body = (_str(b"\x12", st.description) if st.description else b"") + b"\x18" + _LEN[st.status_code.value]
        parts.append(_ld(b"\x7a", body))
    parts.append(_FLAGS_REMOTE if parent is not None and parent[2] else _FLAGS_LOCAL)
    return b"".join(parts)


_res_cache: dict = {}


def _resource_bytes(res) -> bytes:
    hit = _res_cache.get(id(res))
    if hit is not None and hit[0] is res:
        return hit[1]
    from opentelemetry.exporter.otlp.proto.common._internal import _encode_resource

    b = _encode_resource(res).SerializeToString() if res is not None else b""
    if len(_res_cache) > 64:
        _res_cache.clear()
    _res_cache[id(res)] = (res, b)
    return b


_SCOPE_FIELD = _ld(b"\x0a", _str(b"\x0a", SCOPE.name) + _str(b"\x12", SCOPE.version))  # ScopeSpans.scope


def encode_request(spans) -> bytes:
    """FinishedSpans -> the bytes of an ExportTraceServiceRequest (one ResourceSpans per resource)."""
    by_res: dict = {}
    for s in spans:
        by_res.setdefault(id(s._resource), (s._resource, []))[1].append(s)
    out = []
    stims: dict = {}  # per batch: the tasks one stimulus moved share its bytes
    pause = pacer()
    for res, group in by_res.values():
        parts = [_SCOPE_FIELD]
        for s in group:
            parts.append(_ld(b"\x12", _span_bytes(s, stims)))
            pause()
        out.append(_ld(b"\x0a", _ld(b"\x0a", _resource_bytes(res)) + _ld(b"\x12", b"".join(parts))))
    return b"".join(out)


class EncoderPatch:
    """Gives the OTLP trace exporters (gRPC and HTTP share one encoder) a fast path for FinishedSpan:
    their ``encode_spans`` is replaced, in each module that holds it, by one that parses the request
    written by ``encode_request`` (and encodes any other spans as before)."""

    _common = "opentelemetry.exporter.otlp.proto.common._internal.trace_encoder"
    _holders = (  # modules that hold encode_spans as a global
        "opentelemetry.exporter.otlp.proto.common._internal.trace_encoder",
        "opentelemetry.exporter.otlp.proto.common.trace_encoder",
        "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    )

    def __init__(self):
        self._original: Callable | None = None
        self._fast: Callable | None = None

    def install(self) -> None:
        if self._original is not None:
            return
        try:
            import importlib

            original = importlib.import_module(self._common).encode_spans
            from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                ExportTraceServiceRequest,
            )
        except Exception:
            return  # another exporter version: FinishedSpans take the ordinary path

        def encode_spans(sdk_spans):
            mine = [s for s in sdk_spans if type(s) is FinishedSpan]
            if not mine:
                return original(sdk_spans)
            try:
                body = encode_request(mine)
            except Exception as exc:
                _report.warn_once("dask-encode", f"fast span encoding failed, using the standard encoder: {exc!r}")
                return original(sdk_spans)
            if len(mine) == len(sdk_spans):
                return ExportTraceServiceRequest.FromString(body)
            request = original([s for s in sdk_spans if type(s) is not FinishedSpan])
            request.MergeFromString(body)  # appends these resource_spans
            return request

        encode_spans.__wrapped__ = original
        self._original, self._fast = original, encode_spans
        for name in self._holders:
            mod = sys.modules.get(name)
            if mod is not None and getattr(mod, "encode_spans", None) is original:
                mod.encode_spans = encode_spans

    def uninstall(self) -> None:
        if self._original is None:
            return
        for name in self._holders:
            mod = sys.modules.get(name)
            if mod is not None and getattr(mod, "encode_spans", None) is self._fast:
                mod.encode_spans = self._original
        self._original = self._fast = None


encoder_patch = EncoderPatch()
