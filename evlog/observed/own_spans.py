"""evlog's own spans without the OTel SDK: implementations of the API's ``Span`` that become one record at
``end()``.

A span evlog makes in an observed process (a Dask client call's ``dask.compute``; a pool task's span,
pools/taskspan.py) is kept as plain fields while it is open, so that the process need not build the SDK's
tracer provider for it: a program that makes no span of its own imports no ``opentelemetry.sdk``. It is
a real API span: current while its work runs (the user's spans nest under it, its context goes out with
Dask's messages), and what the user writes on it (attributes, events, links, status, an exception) is
kept. ``start_span`` decides its ids and sampling as the SDK would (the run's sampler, random ids);
``end()`` appends one record (a ``dask.compute`` span: an ``otel.span`` record, the one the SDK's spans
become: evlog/wire/otel.py), and the run's exporter process builds and exports it. This process's
consumers (evlog.processors) and the console's marks (``watch``) see it start and end where it happens,
as span processors see an SDK span.

Used only under evlog's tracer provider (``tracer``); under any other provider evlog's spans are that
provider's.
"""
from __future__ import annotations

import random
import threading
import traceback
from time import time_ns as _time_ns

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from evlog.observed.atoms import Appender
from evlog.wire import kinds

_getrandbits = random.getrandbits
_FLAGS = (TraceFlags(0), TraceFlags(1))
_sampler: list = []  # the run's sampler, or None for the default (parent-based, always on)
_registry: list = []  # evlog.processors.registry.registry, once loaded
_procs: list = [None, ()]  # (registry version, the consumers' span processors) as last looked up
_watchers: list = []  # other processors of this process's own spans (the console's marks)
_append = Appender(kinds.OTEL_SPAN)
_lock = threading.Lock()


class RecordedSpan(trace.Span):
    """A recording span kept as plain fields; a subclass's ``end()`` records it."""

    __slots__ = ("name", "context", "parent", "scope", "attributes", "start_time", "end_time", "events",
                 "links", "status", "_owned")

    def __init__(self, name, context, parent, scope, attributes, start_time):
        self.name = name
        self.context = context
        self.parent = parent
        self.scope = scope
        self.attributes = attributes  # may be shared (a pool's tasks of one function) until the first write
        self.start_time = start_time
        self.end_time = None
        self.events = None
        self.links = None
        self.status = None
        self._owned = False

    # ---- what span processors read (the SDK ReadableSpan's public names) -------------------------
    @property
    def resource(self):
        from evlog.observed import resource

        resource.attributes()  # made, if nothing asked for them yet
        return resource.view

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    # ---- what the user may write while it is open ----------------------------------------------
    def _own(self) -> dict:
        if not self._owned:
            self.attributes = dict(self.attributes)
            self._owned = True
        return self.attributes

    def set_attribute(self, key: str, value) -> None:
        self.set_attributes({key: value})

    def set_attributes(self, attributes) -> None:
        if self.end_time is None and attributes:
            self._own().update(clean(attributes))

    def set_checked_attributes(self, attributes: dict) -> None:
        """Attributes evlog made itself (str keys; int, float or str values): kept as given, without
        set_attributes' checks (7 attributes: 7 us with them, well under 1 us without; pools/chunks)."""
        if self.end_time is None:
            self._own().update(attributes)

    def add_event(self, name: str, attributes=None, timestamp: int | None = None) -> None:
        if self.end_time is None:
            if self.events is None:
                self.events = []
            self.events.append((str(name), clean(attributes) if attributes else {},
                                timestamp if timestamp is not None else _time_ns()))

    def add_link(self, context, attributes=None) -> None:
        if self.end_time is None and context is not None and context.is_valid:
            if self.links is None:
                self.links = []
            self.links.append((context.trace_id, context.span_id, int(context.trace_flags),
                               clean(attributes) if attributes else {}, context.is_remote))

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

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.context!r})"


def clean(attributes) -> dict:
    """Attributes as the SDK keeps them (invalid values dropped with the SDK's warning, sequences as
    tuples), so they travel as atoms."""
    return dict(BoundedAttributes(attributes=attributes, immutable=False))


def consumers() -> tuple:
    """This process's consumers' span processors (evlog.processors.registry), as last looked up."""
    registry = _registry[0] if _registry else _load_registry()
    if _procs[0] != registry.version:
        _procs[1] = tuple(registry.span_processors())
        _procs[0] = registry.version
    return _procs[1]


def _load_registry():
    from evlog.processors.registry import registry

    _registry.append(registry)
    return registry


def _run_sampler():
    """The run's sampler when it is not the default one (which ``decide`` decides inline)."""
    if not _sampler:
        from evlog import config
        from evlog.observed import sdk

        spec = config.get().sampler
        _sampler.append(None if spec[0] == "parentbased_always_on" else sdk.sampler(spec))
    return _sampler[0]


def decide(name: str, kind, attributes: dict, parent):
    """The ids and sampling of a span ``name`` under the Context ``parent``, as the SDK's tracer decides
    them: (its SpanContext, its parent's or None, its attributes) for a span to record, or a
    NonRecordingSpan when the run's sampler says not to record it."""
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
        result = sampler.should_sample(parent, trace_id, name, kind, attributes, ())
        sampled = 1 if result.decision.is_sampled() else 0
        if not result.decision.is_recording():
            sampled = -1
        state = result.trace_state
        if result.attributes:
            attributes = {**attributes, **result.attributes}
    sc = SpanContext(trace_id, _getrandbits(64) or 1, False, _FLAGS[sampled > 0], state)
    if sampled <= 0:
        return NonRecordingSpan(sc)
    return sc, psc, attributes


class Span(RecordedSpan):
    """One of evlog's own spans (``dask.compute``), recorded as an ``otel.span`` record at ``end()``."""

    __slots__ = ("kind",)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else _time_ns()
        for p in consumers():
            p.on_end(self)
        for p in _watchers:
            p.on_end(self)
        sc, parent = self.context, self.parent
        _append((self.name, self.kind.value, self.scope, sc.trace_id, sc.span_id, int(sc.trace_flags),
                 sc.trace_state.to_header() if sc.trace_state else "",
                 (parent.trace_id, parent.span_id, int(parent.trace_flags), parent.is_remote) if parent is not None else None,
                 self.start_time, self.end_time, self.attributes or None,
                 tuple(self.events) if self.events else None, tuple(self.links) if self.links else None,
                 self.status, None))  # the fields of wire.otel.Span


class Tracer:
    """``start_span`` as the API's Tracer's, for evlog's own spans of one instrumentation scope."""

    def __init__(self, name: str, version: str | None):
        self.scope = (name, version, None, None)  # an otel.span record's scope, as the SDK's would be

    def start_span(self, name: str, context=None, kind=SpanKind.INTERNAL, attributes=None) -> trace.Span:
        attributes = clean(attributes) if attributes else {}
        decided = decide(name, kind, attributes, context)
        if type(decided) is NonRecordingSpan:
            return decided
        sc, psc, attributes = decided
        span = Span(name, sc, psc, self.scope, attributes, _time_ns())
        span._owned = True
        span.kind = kind
        for p in consumers():
            p.on_start(span, parent_context=context)
        for p in _watchers:
            p.on_start(span, parent_context=context)
        return span


def tracer(name: str, version: str | None = None):
    """A tracer of evlog's own spans under evlog's tracer provider, else the global provider's tracer."""
    from evlog.observed import sdk

    if isinstance(trace.get_tracer_provider(), sdk.LazyTracerProvider):
        return Tracer(name, version)
    return trace.get_tracer(name, version)


def watch(processor) -> None:
    """``processor`` (``on_start``, ``on_end``) sees this process's own spans too."""
    with _lock:
        if processor not in _watchers:
            _watchers.append(processor)

