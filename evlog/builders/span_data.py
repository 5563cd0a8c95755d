"""What every span builder returns: ``SpanData``, a finished span as OTLP carries it, not yet an SDK object.

The builders of the exporter process (dask_lives, dask_executions, dask_shape, dask_memory, pool_spans,
sdk_rebuild, and any new span builder) return lists of ``SpanData``. Its fields have ReadableSpan's names
and types (``context`` and ``parent`` are SpanContexts, ``kind`` a SpanKind, ``status`` a Status,
``resource`` an SDK Resource, ``instrumentation_scope`` an InstrumentationScope, ``attributes`` a mapping
whose values are the OTel attribute types), so code that reads a ReadableSpan reads it too. Events are
``SpanEvent``s and links ``SpanLink``s: tuples with the SDK Event's and Link's attribute names. The
dropped counts are plain numbers.

Most spans go straight from SpanData to OTLP protobuf bytes (evlog/exporter/span_encoding.py) or OTLP/JSON
(the run folder); ``readable()`` makes the SDK's ReadableSpan only for what needs one: the user's span
processors (EVLOG_SPAN_PROCESSORS) and span exporters other than OTLP and the run folder (console, entry
points). Building a SpanData costs a third of building a ReadableSpan with its SDK Events, and nothing
in it is validated: a builder gives well-formed values (ids as ints, times in ns, attribute values of
the OTel types).
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode

UNSET = Status(StatusCode.UNSET)
#: a span's attributes when it has none (never None, as ReadableSpan's)
NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})


class SpanEvent(NamedTuple):
    """A span event (the SDK Event's attribute names)."""

    #: The event's name.
    name: str
    #: When it happened, ns since the epoch.
    timestamp: int
    #: Its attributes (a mapping), or None.
    attributes: Mapping[str, Any] | None = None
    #: Attributes the SDK's limits dropped.
    dropped_attributes: int = 0


class SpanLink(NamedTuple):
    """A link to another span (the SDK Link's attribute names)."""

    #: The linked span's SpanContext.
    context: SpanContext
    #: The link's attributes (a mapping), or None.
    attributes: Mapping[str, Any] | None = None
    #: Attributes the SDK's limits dropped.
    dropped_attributes: int = 0


class SpanData:
    """A finished span, as a builder makes it (ReadableSpan's names; see the module's docstring)."""

    __slots__ = ("name", "context", "parent", "resource", "attributes", "events", "links", "kind", "status",
                 "start_time", "end_time", "instrumentation_scope", "dropped_attributes", "dropped_events",
                 "dropped_links")

    def __init__(self, name: str, context: SpanContext, parent: SpanContext | None, resource, attributes,
                 events: Sequence[SpanEvent] = (), links: Sequence[SpanLink] = (), kind: SpanKind = SpanKind.INTERNAL,
                 status: Status = UNSET, start_time: int | None = None, end_time: int | None = None,
                 instrumentation_scope=None, dropped_attributes: int = 0, dropped_events: int = 0,
                 dropped_links: int = 0):
        #: The span's name.
        self.name = name
        #: Its SpanContext (trace id, span id, trace flags, trace state; never remote).
        self.context = context
        #: The parent's SpanContext, or None for a root span.
        self.parent = parent
        #: The SDK Resource of the process the span describes (one object per process and hello).
        self.resource = resource
        #: Its attributes: a mapping of str to the OTel attribute types (NO_ATTRIBUTES when none).
        self.attributes = attributes
        #: SpanEvents, in the order they are exported.
        self.events = events
        #: SpanLinks.
        self.links = links
        #: A SpanKind.
        self.kind = kind
        #: A Status.
        self.status = status
        #: Start and end, ns since the epoch.
        self.start_time = start_time
        self.end_time = end_time
        #: An InstrumentationScope (one object per scope), or None.
        self.instrumentation_scope = instrumentation_scope
        #: What the SDK's limits dropped (the program's own spans).
        self.dropped_attributes = dropped_attributes
        self.dropped_events = dropped_events
        self.dropped_links = dropped_links

    def get_span_context(self) -> SpanContext:
        return self.context

    def __repr__(self) -> str:
        return f"SpanData({self.name!r}, trace {self.context.trace_id:032x}, span {self.context.span_id:016x})"


def readable(span: SpanData) -> ReadableSpan:
    """The SDK's ReadableSpan of ``span``, with the same dropped counts (for span processors and exporters
    that take SDK spans)."""
    attributes = span.attributes
    if span.dropped_attributes:
        attributes = bounded(attributes, span.dropped_attributes)
    events = [Event(e.name, bounded(e.attributes, e.dropped_attributes) if e.dropped_attributes else e.attributes,
                    e.timestamp) for e in span.events]
    links = [Link(ln.context, bounded(ln.attributes, ln.dropped_attributes) if ln.dropped_attributes else ln.attributes)
             for ln in span.links]
    return ReadableSpan(
        span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=listed(events, span.dropped_events) if span.dropped_events else events,
        links=listed(links, span.dropped_links) if span.dropped_links else links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def bounded(attrs, dropped: int):
    """Attributes that report ``dropped`` (ReadableSpan, Event, Link and ReadableLogRecord read
    BoundedAttributes.dropped)."""
    from opentelemetry.attributes import BoundedAttributes

    out = BoundedAttributes(None, attrs or {}, immutable=True)
    out.dropped = dropped
    return out


def listed(items, dropped: int):
    """Events or links that report ``dropped`` (ReadableSpan reads BoundedList.dropped)."""
    from opentelemetry.sdk.util import BoundedList

    out = BoundedList.from_seq(None, items)
    out.dropped = dropped
    return out
