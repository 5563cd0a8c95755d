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
written directly (constant parts cached) and sent as they are.
Other spans go through the encoder unchanged.
"""
from __future__ import annotations

import os
import random
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
    Status,
    StatusCode,
    TraceFlags,
)

from evlog import __version__, _report, stats

from . import dask_lives

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
        sc = dask_lives.parse_traceparent(tp)
        if sc is None:
            return None
        if len(_parsed) > 4096:
            _parsed.clear()
        _parsed[tp] = sc
    return sc


def format_traceparent(sc: SpanContext) -> str:
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


trace_of_group = dask_lives.trace_of_group  # shared by the scheduler's spans (built elsewhere) and the workers'


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

    def start(self) -> None:
        """Start the thread now rather than at the first source."""
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
# FinishedSpan's Span message, written by hand with evlog.exporters.fast_otlp's writers; transition
# events (the bulk of a Dask span) from constant parts shared by many tasks.

from evlog.exporters import fast_otlp as _fo  # noqa: E402

_CACHED_KEYS = frozenset({"dask.task.prefix", "dask.task.group", "dask.worker.address", "dask.task.state",
                          "thread.name", "dask.transfer.source"})
_EV_TRANSITION_NAME = _fo.text(b"\x12", "transition")
_tr_cache: dict = {}


def _transition_const(start: str, finish: str, worker) -> bytes:
    """name + start + finish + worker attributes of a transition event: shared by many tasks."""
    b = _EV_TRANSITION_NAME + _fo.ld(b"\x1a", _fo.kv("dask.transition.start", start)) + _fo.ld(
        b"\x1a", _fo.kv("dask.transition.finish", finish))
    if worker:
        b += _fo.ld(b"\x1a", _fo.kv("dask.worker.address", worker))
    if len(_tr_cache) > 8192:
        _tr_cache.clear()
    _tr_cache[(start, finish, worker)] = b
    return b


def _span_bytes(s: FinishedSpan, stims: dict) -> bytes:
    # fields in any order: protobuf parsers accept it, and the message written out again is canonical
    ctx = s._context
    parent = s._parent
    parts = [_fo.head(ctx, parent), b"\x12\x08", ctx[1].to_bytes(8, "big"), _fo.name_field(s._name),
             _fo.KIND_FIELD[s._kind.value], _fo.pack_times(0x39, s._start_time, 0x41, s._end_time)]
    _fo.attr_fields(b"\x4a", s._attributes, parts, _CACHED_KEYS)
    if s.transitions:
        # a transition event: its time, then name + start + finish + worker (the same bytes for many
        # tasks) and the stimulus (shared by the tasks it moved), each written once
        trc = _tr_cache
        LEN, varint, pack_q = _fo.LEN, _fo.varint, _fo.pack_q
        for _key, start, finish, stim, w, t in s.transitions:
            c = trc.get((start, finish, w)) or _transition_const(start, finish, w)
            sf = stims.get(stim)
            if sf is None:
                sf = stims[stim] = _fo.text_field(b"\x1a", "dask.stimulus_id", stim or "")
            n = 9 + len(c) + len(sf)
            parts += (b"\x5a", LEN[n] if n < 16384 else varint(n), b"\x09", pack_q(int(t * 1e9)), c, sf)
    for name, ts, attrs in s.extra:
        ev = [b"\x09", _fo.pack_q(ts), _fo.text(b"\x12", name)]
        _fo.attr_fields(b"\x1a", attrs, ev, _CACHED_KEYS)
        parts.append(_fo.ld(b"\x5a", b"".join(ev)))
    parts.append(_fo.status_field(s._status))
    parts.append(_fo.FLAGS_REMOTE if parent is not None and parent[2] else _fo.FLAGS_LOCAL)
    return b"".join(parts)


def _writer() -> Callable:
    stims: dict = {}  # per request: the tasks one stimulus moved share its bytes
    return lambda s: _span_bytes(s, stims)


def encode_request(spans) -> bytes:
    """FinishedSpans -> the bytes of an ExportTraceServiceRequest (one ResourceSpans per resource)."""
    return _fo.encode_request(spans, _writer(), pacer())


EncoderPatch = _fo.EncoderPatch
encoder_patch = EncoderPatch(FinishedSpan, _writer, pauser=pacer)
