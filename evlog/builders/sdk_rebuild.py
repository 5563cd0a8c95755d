"""The user's spans, log records and metrics, rebuilt in the run's exporter process from their records.

The observed processes hand what their SDK providers make to evlog.observed.records as tuples of atoms
(evlog/observed/sdk_records.py; their fields are named in evlog/wire/otel.py). Here each becomes what the
exporter process exports, with the sending process's current resource (from its hello): spans become
SpanData (evlog/builders/span_data.py); log records and metrics the SDK objects an exporter takes, through
the SDK's public constructors (ReadableLogRecord with the API's LogRecord, MetricsData and its parts).
Builders of the exporter process (``feed(records, now, final)``, see evlog/exporter/process.py): spans
are returned for the span pipeline; log records and metrics go to their pipelines (``logs``, ``metrics``).
"""
from __future__ import annotations

from opentelemetry import trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from evlog.builders.span_data import NO_ATTRIBUTES, UNSET, SpanData, SpanEvent, SpanLink, bounded
from evlog.wire.kinds import OTEL_LOG as LOG
from evlog.wire.kinds import OTEL_METRICS as METRICS
from evlog.wire.kinds import OTEL_SPAN as SPAN

KINDS = (SPAN, LOG, METRICS)
_FLAGS = {0: TraceFlags(0), 1: TraceFlags(1)}


class Cache:
    """Scopes and trace states made once per distinct value."""

    def __init__(self):
        self.scopes: dict = {}
        self.states: dict = {}

    def scope(self, t):
        if t is None:
            return None
        if t[3] is not None:  # attributes (a dict): not a key
            return InstrumentationScope(t[0], t[1], t[2], t[3])
        s = self.scopes.get(t)
        if s is None:
            if len(self.scopes) > 4096:
                self.scopes.clear()
            s = self.scopes[t] = InstrumentationScope(t[0], t[1], t[2])
        return s

    def state(self, header: str):
        if not header:
            return None
        s = self.states.get(header)
        if s is None:
            if len(self.states) > 1024:
                self.states.clear()
            s = self.states[header] = TraceState.from_header([header])
        return s


def _flags(f: int) -> TraceFlags:
    return _FLAGS.get(f) or TraceFlags(f)


class Spans:
    """One process's span records -> SpanData (what the SDK's limits dropped is carried as counts)."""

    def __init__(self, resource):
        self.resource = resource  # callable -> the process's current Resource
        self.cache = Cache()

    def feed(self, batch, now: float, final: bool = False) -> list:
        res = self.resource()
        cache = self.cache
        out = []
        for (name, kind, scope, trace_id, span_id, flags, state, parent, start, end, attrs, events, links,
             status, dropped) in batch:  # the fields of evlog.wire.otel.Span, in order
            if parent is not None:
                parent = SpanContext(parent[0], parent[1], parent[3], _flags(parent[2]))
            events = [SpanEvent(n, t, a) for n, a, t in events] if events else ()
            links = [SpanLink(SpanContext(t, s, r, _flags(f)), a) for t, s, f, a, r in links] if links else ()
            out.append(SpanData(
                name,
                context=SpanContext(trace_id, span_id, False, _flags(flags), cache.state(state)),
                parent=parent,
                resource=res,
                attributes=attrs if attrs is not None else NO_ATTRIBUTES,
                events=events,
                links=links,
                kind=SpanKind(kind),
                status=Status(StatusCode(status[0]), status[1]) if status is not None else UNSET,
                start_time=start,
                end_time=end,
                instrumentation_scope=cache.scope(scope),
                dropped_attributes=dropped[0] if dropped is not None else 0,
                dropped_events=dropped[1] if dropped is not None else 0,
                dropped_links=dropped[2] if dropped is not None else 0,
            ))
        return out


class Logs:
    """One process's log records -> ReadableLogRecords, handed to the logs pipeline."""

    def __init__(self, resource, logs):
        self.resource = resource
        self.logs = logs
        self.cache = Cache()
        self._contexts: dict = {}

    def _context(self, trace_id: int, span_id: int, flags: int):
        key = (trace_id, span_id, flags)
        ctx = self._contexts.get(key)
        if ctx is None:
            sc = SpanContext(trace_id, span_id, False, _flags(flags))
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(sc))
            if len(self._contexts) > 1024:
                self._contexts.clear()
            self._contexts[key] = ctx
        return ctx

    def feed(self, batch, now: float, final: bool = False) -> list:
        if not batch:
            return []
        res = self.resource()
        cache = self.cache
        out = []
        for (t, observed, trace_id, span_id, flags, sev_text, sev, body, attrs, event, scope, dropped) in batch:  # wire.otel.Log
            if dropped:
                attrs = bounded(attrs, dropped)
            record = LogRecord(timestamp=t, observed_timestamp=observed,
                               context=self._context(trace_id, span_id, flags) if trace_id else None,
                               severity_text=sev_text, severity_number=SeverityNumber(sev) if sev is not None else None,
                               body=body, attributes=attrs, event_name=event)
            out.append(ReadableLogRecord(record, resource=res, instrumentation_scope=cache.scope(scope)))
        self.logs.add(out)
        return []


def _exemplars(ex) -> list:
    return [Exemplar(a or {}, v, t, s, tr) for a, v, t, s, tr in ex] if ex else []


def _temporality(value: int) -> AggregationTemporality:
    return AggregationTemporality(value)


def _data(d):
    kind = d[0]
    if kind == "gauge":
        return Gauge([NumberDataPoint(a or {}, s, t, v, _exemplars(e)) for a, s, t, v, e in d[1]])
    if kind == "sum":
        return Sum([NumberDataPoint(a or {}, s, t, v, _exemplars(e)) for a, s, t, v, e in d[3]],
                   _temporality(d[1]), d[2])
    if kind == "histogram":
        return Histogram([HistogramDataPoint(a or {}, s, t, n, total, list(counts), list(bounds), lo, hi, _exemplars(e))
                          for a, s, t, n, total, counts, bounds, lo, hi, e in d[2]], _temporality(d[1]))
    if kind == "exponential":
        return ExponentialHistogram([
            ExponentialHistogramDataPoint(a or {}, s, t, n, total, scale, zero, Buckets(pos[0], list(pos[1])),
                                          Buckets(neg[0], list(neg[1])), flags, lo, hi, _exemplars(e))
            for a, s, t, n, total, scale, zero, pos, neg, flags, lo, hi, e in d[2]], _temporality(d[1]))
    raise ValueError(f"unknown metric data {kind!r}")


def points(record) -> int:
    """Data points in a metrics record."""
    return sum(len(m[3][-1]) for _scope, _url, metrics in record for m in metrics)


class Metrics:
    """One process's metrics records -> MetricsData, handed to the metrics pipeline."""

    def __init__(self, resource, metrics):
        self.resource = resource
        self.metrics = metrics
        self.cache = Cache()

    def feed(self, batch, now: float, final: bool = False) -> list:
        if not batch:
            return []
        res = self.resource()
        out = []
        for rec in batch:
            scopes = [ScopeMetrics(self.cache.scope(scope), [Metric(n, d or None, u or None, _data(data))
                                                              for n, d, u, data in metrics], url)
                      for scope, url, metrics in rec]
            out.append((MetricsData([ResourceMetrics(res, scopes, "")]), points(rec)))
        self.metrics.add(out)
        return []
