"""A pool task's span: an OpenTelemetry API span that becomes a record, built into an SDK span elsewhere.

A pool task of a trivial function costs a few microseconds of Python, so its span must cost less than
``Tracer.start_span`` and the batch processor's queue, encoder and export in the task's own process.
``start()`` decides the span's ids and sampling as the SDK would (the run's sampler, random ids) and
returns a ``TaskSpan``: an implementation of the API's ``Span`` (the public extension point), current
while the task runs, so the user's spans nest under it and what the user writes on it (attributes,
events, status, an exception) is kept. ``end()`` appends one tuple of atoms to this process's records
(evlog.observed.records, kind pool.task); the run's exporter process turns it into an SDK ``ReadableSpan`` (pool_spans) and
exports it with the run's exporters. This process's consumers (evlog.processors) see the span start and
end in the thread that runs the task, as span processors see an SDK span.

Used only when the tracer provider is evlog's (``usable``); under any other provider a task gets an
ordinary ``tracer.start_span`` span.
"""
from __future__ import annotations

import os
import random
import sys
import threading
import traceback
from time import time_ns as _time_ns

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from evlog.wire import kinds
from evlog.observed import records

from evlog.wire.profile_records import Task as _Task  # issue 31: the task profiler
from evlog.observed.profiler import enter as _profile_enter
from evlog.observed.profiler import leave_span as _profile_leave

_POOL = _Task.POOL.value
_getframe = sys._getframe
_BEGIN = ("begin", "_begin")  # _context's function that starts a task span for its caller

_getrandbits = random.getrandbits
_FLAGS = (TraceFlags(0), TraceFlags(1))
_log: list = [None]  # this process's records source (a deque), made at the first task span
_procs: list = [None, ()]  # (registry version, the consumers' span processors) as last looked up
_sampler: list = []  # the run's sampler, or None for the default (parent-based, always on)
_lock = threading.Lock()


def usable(tracer) -> bool:
    """Does ``tracer`` come from evlog's tracer provider (so task spans may take the records path)?"""
    from evlog.observed import sdk

    return isinstance(trace.get_tracer_provider(), sdk.LazyTracerProvider) and not isinstance(tracer, trace.ProxyTracer)


def _source():
    with _lock:
        if _log[0] is None:
            _log[0] = records.source(kinds.POOL_TASK)
        return _log[0]


def _consumers() -> tuple:
    registry = _registry[0] if _registry else _load_registry()
    if _procs[0] != registry.version:
        _procs[1] = tuple(registry.span_processors())
        _procs[0] = registry.version
    return _procs[1]


_registry: list = []


def _load_registry():
    from evlog.processors.registry import registry

    _registry.append(registry)
    return registry


def _run_sampler():
    """The run's sampler when it is not the default one (which start() decides inline)."""
    if not _sampler:
        from evlog import config
        from evlog.observed import sdk

        spec = config.get().sampler
        _sampler.append(None if spec[0] == "parentbased_always_on" else sdk.sampler(spec))
    return _sampler[0]


class TaskSpan(trace.Span):
    """A recording span of a pool task, kept as plain fields; ``end()`` records it."""

    __slots__ = ("name", "context", "parent", "scope", "attributes", "start_time", "end_time", "events",
                 "links", "status", "_owned")

    def __init__(self, name, context, parent, scope, attributes, start_time):
        self.name = name
        self.context = context
        self.parent = parent
        self.scope = scope
        self.attributes = attributes  # shared by the tasks of one function until the first write
        self.start_time = start_time
        self.end_time = None
        self.events = None
        self.links = None
        self.status = None
        self._owned = False

    # ---- what span processors read (the SDK ReadableSpan's public names) -------------------------
    @property
    def resource(self):
        return _resource()

    @property
    def kind(self):
        return SpanKind.CONSUMER

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    # ---- what the user may write while the task runs ----------------------------------------------
    def _own(self) -> dict:
        if not self._owned:
            self.attributes = dict(self.attributes)
            self._owned = True
        return self.attributes

    def set_attribute(self, key: str, value) -> None:
        self.set_attributes({key: value})

    def set_attributes(self, attributes) -> None:
        if self.end_time is None and attributes:
            self._own().update(_clean(attributes))

    def set_checked_attributes(self, attributes: dict) -> None:
        """Attributes evlog made itself (str keys; int, float or str values): kept as given, without
        set_attributes' checks (7 attributes: 7 us with them, well under 1 us without; _chunks)."""
        if self.end_time is None:
            self._own().update(attributes)

    def add_event(self, name: str, attributes=None, timestamp: int | None = None) -> None:
        if self.end_time is None:
            if self.events is None:
                self.events = []
            self.events.append((str(name), _clean(attributes) if attributes else {},
                                timestamp if timestamp is not None else _time_ns()))

    def add_link(self, context, attributes=None) -> None:
        if self.end_time is None and context is not None and context.is_valid:
            if self.links is None:
                self.links = []
            self.links.append((context.trace_id, context.span_id, int(context.trace_flags),
                               _clean(attributes) if attributes else {}, context.is_remote))

    def update_name(self, name: str) -> None:
        if self.end_time is None:
            self.name = str(name)

    def set_status(self, status, description: str | None = None) -> None:
        if self.end_time is not None:
            return
        if isinstance(status, Status):
            code, text = status.status_code, status.description
        else:
            code, text = status, description
        if self.status is not None and self.status[0] == StatusCode.OK.value:
            return  # OK is final, as in the SDK
        if code is not StatusCode.UNSET:
            self.status = (code.value, text if code is StatusCode.ERROR and text else None)

    def record_exception(self, exception, attributes=None, timestamp=None, escaped: bool = False) -> None:
        stack = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
        attrs = {"exception.type": type(exception).__name__, "exception.message": str(exception),
                 "exception.stacktrace": stack, "exception.escaped": str(escaped)}
        if attributes:
            attrs.update(attributes)
        self.add_event("exception", attrs, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else _time_ns()
        top = _profile_leave(self.context.span_id)  # issue 31: the task's hottest functions, or None
        if top is not None:
            self._own()["evlog.profile.top"] = top
        for p in _consumers():
            p.on_end(self)
        sc, parent = self.context, self.parent
        (_log[0] or _source()).append((
            self.name, self.scope, sc.trace_id, sc.span_id, int(sc.trace_flags),
            sc.trace_state.to_header() if sc.trace_state else "",
            (parent.trace_id, parent.span_id, int(parent.trace_flags), parent.is_remote) if parent is not None else None,
            self.start_time, self.end_time, self.attributes,
            tuple(self.events) if self.events else None, tuple(self.links) if self.links else None, self.status))

    def __repr__(self) -> str:
        return f"TaskSpan({self.name!r}, {self.context!r})"


def _clean(attributes) -> dict:
    """Attributes as the SDK keeps them (invalid values dropped with the SDK's warning, sequences as
    tuples), so they travel as atoms."""
    return dict(BoundedAttributes(attributes=attributes, immutable=False))


_res: list = []


def _resource():
    if not _res:
        _res.append(getattr(trace.get_tracer_provider(), "resource", None))
    return _res[0]


def start(scope: str, name: str, attributes: dict, parent) -> trace.Span:
    """A started task span ``name`` under the Context ``parent`` (TaskSpan, or a non-recording span
    when the run's sampler says so)."""
    span = trace.get_current_span(parent)
    psc = span.get_span_context()
    if not psc.is_valid:
        psc = None
        trace_id = _getrandbits(128) or 1
    else:
        trace_id = psc.trace_id
    sampler = _sampler[0] if _sampler else _run_sampler()
    if sampler is None:
        sampled = psc is None or psc.trace_flags & 1
        state = psc.trace_state if psc is not None else None
    else:
        result = sampler.should_sample(parent, trace_id, name, SpanKind.CONSUMER, attributes, ())
        sampled = 1 if result.decision.is_sampled() else 0
        if not result.decision.is_recording():
            sampled = -1
        state = result.trace_state
        if result.attributes:
            attributes = {**attributes, **result.attributes}
    sc = SpanContext(trace_id, _getrandbits(64) or 1, False, _FLAGS[sampled > 0], state)
    if sampled <= 0:
        return NonRecordingSpan(sc)
    span = TaskSpan(name, sc, psc, scope, attributes, _time_ns())
    # issue 31: the task profiler samples this thread until end(); its stacks are cut at the frame that calls the
    # task (_context's Task.__call__ or a runner, which call this directly or through _context.begin)
    stop = _getframe(1)
    _profile_enter(_POOL, attributes.get("code.function.name") or name, trace_id, sc.span_id,
                   stop.f_back if stop.f_code.co_name in _BEGIN else stop)
    for p in _consumers():
        p.on_start(span, parent_context=parent)
    return span


def _after_fork_in_child() -> None:
    global _lock
    _log[0] = None  # a forked child ships its own records (evlog.observed.records starts afresh there)
    _res.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
