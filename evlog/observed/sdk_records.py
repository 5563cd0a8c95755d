"""The user's telemetry leaves the SDK here: as records for the run's exporter process, never exported here.

The observed process keeps the SDK's providers, so the user's span processors, samplers, views and limits
work as the SDK documents. What would be an exporter is, through the SDK's public interfaces:
- ``SpanRecords``, a SpanProcessor: ``on_end`` turns the finished (sampled) span into a tuple of atoms
  (``span_record``) and appends it to a records source;
- ``LogRecords``, a LogRecordProcessor: ``on_emit`` appends the log record, which the shipping thread turns
  into atoms (``log_record``);
- ``MetricRecords``, a MetricExporter on the SDK's periodic reader: each collection becomes one record.
The shipping thread (evlog.observed.records, every 0.5 s and at exit) writes them to the run's exporter
process, which rebuilds them with the SDK's public constructors (evlog.builders.sdk_rebuild) and exports
them with the stock exporters.
So this process encodes no OTLP, opens no connection, and has no queue that drops: the channel's own memory
bound counts what it drops (``dropped.exporter_behind``), and the exporter process spools.

Records: evlog/wire/otel.py (kinds ``otel.span``, ``otel.log``, ``otel.metrics``).
The resource is not in the records: each process's hello carries it (its current one).
"""
from __future__ import annotations

from opentelemetry.sdk._logs import LogRecordProcessor
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.trace import SpanProcessor

from evlog import notices, stats
from evlog.observed import records
from evlog.observed.atoms import Appender, atom
from evlog.observed.atoms import attrs as _attrs
from evlog.observed.atoms import copy as _copy
from evlog.wire import kinds

SPAN, LOG, METRICS = kinds.OTEL_SPAN, kinds.OTEL_LOG, kinds.OTEL_METRICS


def _span_attrs(attributes):
    """A span's, an event's or a link's attributes: the SDK let only atoms and tuples of atoms in."""
    return _copy(attributes) if attributes else None


class Scopes:
    """InstrumentationScope -> its tuple, made once (marshal then writes a repeated one once per frame)."""

    def __init__(self):
        self._made: dict = {}

    def __call__(self, scope):
        if scope is None:
            return None
        made = self._made.get(id(scope))
        if made is None or made[0] is not scope:
            if len(self._made) > 4096:
                self._made.clear()
            made = self._made[id(scope)] = (scope, (scope.name, scope.version, scope.schema_url,
                                                    _attrs(getattr(scope, "attributes", None))))
        return made[1]


def span_record(s, scopes: Scopes) -> tuple:
    """A finished SDK span -> its span record (in ``on_end``, in the span's thread)."""
    sc = s.context
    p = s.parent
    status = s.status
    events = s.events
    links = s.links
    return (
        s.name, s.kind.value, scopes(s.instrumentation_scope), sc.trace_id, sc.span_id, int(sc.trace_flags),
        sc.trace_state.to_header() if sc.trace_state else "",
        (p.trace_id, p.span_id, int(p.trace_flags), p.is_remote) if p is not None else None,
        s.start_time, s.end_time, _span_attrs(s.attributes),
        tuple((e.name, _span_attrs(e.attributes), e.timestamp) for e in events) if events else None,
        tuple((ln.context.trace_id, ln.context.span_id, int(ln.context.trace_flags), _span_attrs(ln.attributes),
               ln.context.is_remote) for ln in links) if links else None,
        (status.status_code.value, status.description) if status.status_code.value or status.description else None,
        _dropped(s),
    )


def span_records(spans, scopes: Scopes) -> list:
    """Many spans' records (tests, and any batch of finished spans)."""
    return [span_record(s, scopes) for s in spans]


def _dropped(s):
    """What the SDK's limits dropped of a span: (attributes, events, links), or None (the usual case)."""
    d = (s.dropped_attributes, s.dropped_events, s.dropped_links)
    return d if d[0] or d[1] or d[2] else None


def log_record(r, scopes: Scopes) -> tuple:
    """An emitted SDK log record (ReadWriteLogRecord) -> its log record (in the shipping thread)."""
    lr = r.log_record
    sev = lr.severity_number
    flags = lr.trace_flags
    return (lr.timestamp, lr.observed_timestamp, lr.trace_id or 0, lr.span_id or 0,
            int(flags) if flags is not None else 0, lr.severity_text,
            sev.value if sev is not None else None, atom(lr.body), _attrs(lr.attributes),
            lr.event_name or None, scopes(r.instrumentation_scope), r.dropped_attributes or None)


def log_records(logs, scopes: Scopes) -> list:
    """The shipping thread's converter of log records."""
    return [log_record(r, scopes) for r in logs]


def _exemplars(exemplars) -> tuple:
    return tuple((_attrs(e.filtered_attributes), e.value, e.time_unix_nano, e.span_id, e.trace_id)
                 for e in exemplars) if exemplars else ()


def _data(data):
    kind = type(data).__name__
    points = data.data_points
    if kind in ("Gauge", "Sum"):
        pts = tuple((_attrs(p.attributes), p.start_time_unix_nano, p.time_unix_nano, p.value,
                     _exemplars(p.exemplars)) for p in points)
        if kind == "Gauge":
            return ("gauge", pts)
        return ("sum", int(data.aggregation_temporality), bool(data.is_monotonic), pts)
    if kind == "Histogram":
        return ("histogram", int(data.aggregation_temporality), tuple(
            (_attrs(p.attributes), p.start_time_unix_nano, p.time_unix_nano, p.count, p.sum, tuple(p.bucket_counts),
             tuple(p.explicit_bounds), p.min, p.max, _exemplars(p.exemplars)) for p in points))
    if kind == "ExponentialHistogram":
        return ("exponential", int(data.aggregation_temporality), tuple(
            (_attrs(p.attributes), p.start_time_unix_nano, p.time_unix_nano, p.count, p.sum, p.scale, p.zero_count,
             (p.positive.offset, tuple(p.positive.bucket_counts)), (p.negative.offset, tuple(p.negative.bucket_counts)),
             p.flags, p.min, p.max, _exemplars(p.exemplars)) for p in points))
    raise TypeError(f"unknown metric data {kind}")


def metrics_record(data, scopes: Scopes) -> tuple | None:
    """One collection (MetricsData) -> one metrics record, or None when it holds no point."""
    out = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            metrics = tuple((m.name, m.description or "", m.unit or "", _data(m.data))
                            for m in sm.metrics if m.data.data_points)
            if metrics:
                out.append((scopes(sm.scope), sm.schema_url or "", metrics))
    return tuple(out) or None


def _lost(exc: Exception) -> None:
    """A span the conversion failed on (a bug of evlog's): counted, said once, the program goes on."""
    stats.incr("dropped.unconvertible")
    notices.warn_once("records-convert-span", f"a span could not be recorded and is dropped: {exc!r}")


class SpanRecords(SpanProcessor):
    """Finished sampled spans -> this process's records, converted to atoms at once in the span's thread.

    At once, not later in the shipping thread: a finished span kept for up to 0.5 s holds some 40 objects
    the garbage collector walks again and again. A loop of spans in one process ran at 15 us a span
    converted at once, 33 us kept for the shipping thread; benchmarks/user_spans.py went from 0.86 to 1.6
    of the plain SDK's loop."""

    def __init__(self):
        self._append = Appender(SPAN)
        self._scopes = Scopes()

    def on_end(self, span) -> None:
        if span.context.trace_flags.sampled:
            try:
                record = span_record(span, self._scopes)
            except Exception as exc:
                return _lost(exc)
            self._append(record)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        records.flush()
        return True


class LogRecords(LogRecordProcessor):
    """Emitted log records -> this process's records, converted in the shipping thread (not at once, as
    spans are): a log record stays writable, and a processor the program adds after this one (a redaction)
    changes what is exported, as with the SDK's BatchLogRecordProcessor."""

    def __init__(self):
        self._append = Appender(LOG, log_records, Scopes)

    def on_emit(self, log_record) -> None:
        self._append(log_record)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        records.flush()
        return True


class MetricRecords(MetricExporter):
    """Each collection of the SDK's periodic reader -> one record (converted in the reader's thread)."""

    def __init__(self, **preferences):
        super().__init__(**preferences)
        self._append = Appender(METRICS)
        self._scopes = Scopes()

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        try:
            rec = metrics_record(metrics_data, self._scopes)
        except Exception as exc:
            notices.warn_once("metrics-record", f"metric points could not be recorded: {exc!r}")
            return MetricExportResult.FAILURE
        if rec is not None:
            self._append(rec)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


def metric_preferences() -> dict:
    """The temporality and aggregation preferences an OTLP metric exporter takes from
    OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE and OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION
    (own_metrics.preferences), as the SDK reader's arguments: known before the exporter is built (the reader
    asks at its start), without reading the exporter's own fields: the program's reader aggregates as the
    run's OTLP exporter, in the exporter process, will send."""
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )
    from opentelemetry.sdk.metrics.export import AggregationTemporality
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation

    from evlog.observed.own_metrics import preferences

    deltas, exponential = preferences()
    classes = {"counter": Counter, "up_down_counter": UpDownCounter, "histogram": Histogram,
               "observable_counter": ObservableCounter, "observable_up_down_counter": ObservableUpDownCounter,
               "observable_gauge": ObservableGauge}
    delta, cumulative = AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE
    out = {"preferred_temporality": {cls: delta if name in deltas else cumulative for name, cls in classes.items()}}
    if exponential:
        out["preferred_aggregation"] = {Histogram: ExponentialBucketHistogramAggregation()}
    return out
