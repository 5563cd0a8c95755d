"""evlog/builders/sdk_rebuild.py: the program's own spans, log records and metrics, made by the real SDK in this
process, turned into records by evlog/observed/sdk_records.py (span_records, log_records, metrics_record),
carried through marshal as the records channel carries them, rebuilt, and compared field by field with
what the SDK made, and by the bytes the stock OTLP encoders make of both."""
from __future__ import annotations

import marshal
import warnings

import pytest
from opentelemetry import context, trace
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.metrics import Observation
from opentelemetry.sdk._logs import LoggerProvider, LogRecordLimits, LogRecordProcessor
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from evlog.builders import sdk_rebuild
from evlog.observed import sdk_records

RES = Resource({"service.name": "app", "process.pid": 4444, "evlog.observed.run.id": "r1"})
SCHEMA = "https://opentelemetry.io/schemas/1.21.0"
REMOTE = SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, True, TraceFlags(1),
                     TraceState([("vendor", "v1"), ("other", "x")]))


def carried(records):
    """Records as the exporter process gets them: through marshal, atoms only."""
    return marshal.loads(marshal.dumps(records))


class Collected(list):
    """Where the log and metrics builders hand what they built (the exporter process's pipelines' add)."""

    def add(self, items: list) -> None:
        self.extend(items)


# ---- spans ----------------------------------------------------------------------------------------

def _spans() -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RES)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app.lib", "1.2.3", schema_url=SCHEMA, attributes={"scope.kind": "lib"})
    plain = provider.get_tracer("bare")
    with tracer.start_as_current_span("request", context=trace.set_span_in_context(NonRecordingSpan(REMOTE)),
                                      kind=SpanKind.SERVER, attributes={"s": "x", "i": 7, "f": 0.5, "b": True,
                                                                        "seq": ("a", "b"), "ints": (1, 2)},
                                      links=[Link(REMOTE, {"why": "retry"})], start_time=1_000) as root:
        root.add_event("checkpoint", {"step": 2}, timestamp=1_500)
        with plain.start_as_current_span("inner", kind=SpanKind.CLIENT, start_time=2_000, end_on_exit=False) as inner:
            inner.set_status(Status(StatusCode.OK))
            inner.end(3_000)
        root.set_status(Status(StatusCode.ERROR, "it failed"))
        root.record_exception(ValueError("bad"), timestamp=4_000)
    producer = plain.start_span("send", context=context.Context(), kind=SpanKind.PRODUCER, start_time=5_000)
    producer.end(6_000)
    return list(exporter.get_finished_spans())


def test_spans_are_rebuilt_field_by_field():
    made = _spans()
    records = carried(sdk_records.span_records(made, sdk_records.Scopes()))
    rebuilt = sdk_rebuild.Spans(lambda: RES).feed(records, 50.0)
    assert [s.name for s in rebuilt] == [s.name for s in made] == ["inner", "request", "send"]
    for a, b in zip(made, rebuilt):
        assert b.kind is a.kind
        assert (b.context.trace_id, b.context.span_id, b.context.trace_flags, b.context.is_remote) == (
            a.context.trace_id, a.context.span_id, a.context.trace_flags, a.context.is_remote)
        assert b.context.trace_state.to_header() == a.context.trace_state.to_header()
        if a.parent is None:
            assert b.parent is None
        else:
            assert (b.parent.trace_id, b.parent.span_id, b.parent.trace_flags, b.parent.is_remote) == (
                a.parent.trace_id, a.parent.span_id, a.parent.trace_flags, a.parent.is_remote)
        assert (b.start_time, b.end_time) == (a.start_time, a.end_time)
        assert dict(b.attributes) == dict(a.attributes)
        assert [(e.name, dict(e.attributes), e.timestamp) for e in b.events] == [
            (e.name, dict(e.attributes), e.timestamp) for e in a.events]
        assert [(ln.context.trace_id, ln.context.span_id, ln.context.trace_flags, dict(ln.attributes))
                for ln in b.links] == [(ln.context.trace_id, ln.context.span_id, ln.context.trace_flags,
                                        dict(ln.attributes)) for ln in a.links]
        assert (b.status.status_code, b.status.description) == (a.status.status_code, a.status.description)
        sa, sb = a.instrumentation_scope, b.instrumentation_scope
        assert (sb.name, sb.version, sb.schema_url, sb.attributes) == (sa.name, sa.version, sa.schema_url, sa.attributes)
        assert b.resource is RES
    request = rebuilt[1]
    assert request.parent.is_remote and request.context.trace_state.to_header() == "vendor=v1,other=x"
    assert request.status.description == "it failed" and request.events[-1].name == "exception"


def test_spans_encode_to_the_same_otlp_bytes():
    made = _spans()
    rebuilt = sdk_rebuild.Spans(lambda: RES).feed(carried(sdk_records.span_records(made, sdk_records.Scopes())), 0.0)
    assert encode_spans(rebuilt).SerializeToString(deterministic=True) == \
        encode_spans(made).SerializeToString(deterministic=True)


def test_the_resource_is_the_one_of_the_processes_hello_not_the_sdks():
    made = _spans()[:1]
    hello = Resource({"service.name": "app", "dask.role": "worker"})  # learnt after the provider was made
    [span] = sdk_rebuild.Spans(lambda: hello).feed(carried(sdk_records.span_records(made, sdk_records.Scopes())), 0.0)
    assert span.resource is hello


def _limited() -> list:
    """A span over the SDK's limits (one attribute, event and link dropped), and one linked to a local span."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=RES, span_limits=SpanLimits(max_span_attributes=2, max_events=1, max_links=1))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app.lib")
    local = tracer.start_span("local", start_time=1)
    local.end(2)
    over = tracer.start_span("over", attributes={"a": 1, "b": 2, "c": 3}, links=[Link(REMOTE), Link(REMOTE)],
                             start_time=3)
    over.add_event("e1", timestamp=4)
    over.add_event("e2", timestamp=5)
    over.end(6)
    linked = tracer.start_span("linked", links=[Link(local.get_span_context())], start_time=7)
    linked.end(8)
    return list(exporter.get_finished_spans())


def test_a_span_over_the_sdks_limits_keeps_its_dropped_counts():
    over = next(s for s in _limited() if s.name == "over")
    assert (over.dropped_attributes, over.dropped_events, over.dropped_links) == (1, 1, 1)
    [rebuilt] = sdk_rebuild.Spans(lambda: RES).feed(carried(sdk_records.span_records([over], sdk_records.Scopes())), 0.0)
    assert (rebuilt.dropped_attributes, rebuilt.dropped_events, rebuilt.dropped_links) == (1, 1, 1)


def test_a_link_to_a_local_span_stays_local():
    linked = next(s for s in _limited() if s.name == "linked")
    assert not linked.links[0].context.is_remote
    [rebuilt] = sdk_rebuild.Spans(lambda: RES).feed(carried(sdk_records.span_records([linked], sdk_records.Scopes())),
                                                    0.0)
    assert not rebuilt.links[0].context.is_remote


# ---- log records ----------------------------------------------------------------------------------

class _Emitted(LogRecordProcessor):
    def __init__(self):
        self.records = []

    def on_emit(self, log_record) -> None:
        self.records.append(log_record)

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _logs() -> list:
    emitted = _Emitted()
    provider = LoggerProvider(resource=RES)
    provider.add_log_record_processor(emitted)
    logger = provider.get_logger("app.log", "0.1", schema_url=SCHEMA, attributes={"scope.kind": "log"})
    span_ctx = trace.set_span_in_context(NonRecordingSpan(REMOTE))
    logger.emit(LogRecord(timestamp=1_000, observed_timestamp=1_001, context=span_ctx, severity_text="WARN",
                          severity_number=SeverityNumber.WARN, body="disk almost full",
                          attributes={"code.line.number": 12, "path": "/data"}))
    logger.emit(LogRecord(timestamp=2_000, observed_timestamp=2_001, severity_number=SeverityNumber.INFO,
                          body={"epoch": 2, "loss": [0.5, 0.25], "nested": {"ok": True}}, event_name="app.metadata"))
    provider.get_logger("bare").emit(LogRecord(timestamp=3_000, observed_timestamp=3_001, body=b"\x00raw"))
    return emitted.records


def test_log_records_are_rebuilt_field_by_field():
    made = _logs()
    records = carried(sdk_records.log_records(made, sdk_records.Scopes()))
    sink = Collected()
    assert sdk_rebuild.Logs(lambda: RES, sink).feed(records, 50.0) == []  # they go to the logs pipeline
    assert len(sink) == 3
    for a, b in zip(made, sink):
        la, lb = a.log_record, b.log_record
        assert (lb.timestamp, lb.observed_timestamp) == (la.timestamp, la.observed_timestamp)
        assert (lb.trace_id or 0, lb.span_id or 0, int(lb.trace_flags or 0)) == (
            la.trace_id or 0, la.span_id or 0, int(la.trace_flags or 0))
        assert (lb.severity_text, lb.severity_number) == (la.severity_text, la.severity_number)
        assert lb.body == sdk_records.atom(la.body)  # as marshal carries it: sequences as tuples
        assert dict(lb.attributes or {}) == dict(la.attributes or {})
        assert lb.event_name == la.event_name
        sa, sb = a.instrumentation_scope, b.instrumentation_scope
        assert (sb.name, sb.version, sb.schema_url, sb.attributes) == (sa.name, sa.version, sa.schema_url, sa.attributes)
        assert b.resource is RES
    first = sink[0].log_record
    assert (first.trace_id, first.span_id) == (REMOTE.trace_id, REMOTE.span_id)
    assert sink[1].log_record.body == {"epoch": 2, "loss": (0.5, 0.25), "nested": {"ok": True}}  # lists as tuples
    assert sink[2].log_record.trace_id in (0, None) and sink[2].log_record.body == b"\x00raw"
    assert sdk_rebuild.Logs(lambda: RES, sink).feed([], 51.0) == [] and len(sink) == 3


def test_log_records_encode_to_the_same_otlp_bytes():
    made = _logs()
    sink = Collected()
    sdk_rebuild.Logs(lambda: RES, sink).feed(carried(sdk_records.log_records(made, sdk_records.Scopes())), 0.0)
    assert encode_logs(sink).SerializeToString(deterministic=True) == \
        encode_logs(made).SerializeToString(deterministic=True)


def test_a_log_record_over_the_sdks_limits_keeps_its_dropped_count():
    emitted = _Emitted()
    provider = LoggerProvider(resource=RES, log_record_limits=LogRecordLimits(max_attributes=1))
    provider.add_log_record_processor(emitted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the SDK's LogRecordDroppedAttributesWarning
        provider.get_logger("app.log").emit(LogRecord(timestamp=1, body="b", attributes={"a": 1, "b": 2}))
    [made] = emitted.records
    assert made.dropped_attributes == 1
    sink = Collected()
    sdk_rebuild.Logs(lambda: RES, sink).feed(carried(sdk_records.log_records([made], sdk_records.Scopes())), 0.0)
    assert sink[0].dropped_attributes == 1


# ---- metrics --------------------------------------------------------------------------------------

def _metrics(temporality=AggregationTemporality.CUMULATIVE):
    reader = InMemoryMetricReader(preferred_temporality={Counter: temporality})
    provider = MeterProvider(resource=RES, metric_readers=[reader],
                             views=[View(instrument_name="latency.exp", aggregation=ExponentialBucketHistogramAggregation())])
    meter = provider.get_meter("app.metrics", "2.0", schema_url=SCHEMA, attributes={"scope.kind": "metrics"})
    provider.get_meter("empty").create_counter("never.used")  # no point: left out of the record
    sampled = trace.set_span_in_context(NonRecordingSpan(REMOTE))
    counter = meter.create_counter("requests", unit="{request}", description="requests served")
    counter.add(3, {"route": "/a"}, context=sampled)  # an exemplar (trace based)
    counter.add(2, {"route": "/b"})
    meter.create_up_down_counter("queue").add(-4)
    hist = meter.create_histogram("latency", unit="s")
    for v in (0.1, 2.5, 700.0):
        hist.record(v, {"route": "/a"}, context=sampled)
    exp = meter.create_histogram("latency.exp", unit="s")
    for v in (0.001, 0.5, 8.0, 0.0):
        exp.record(v)
    meter.create_gauge("temperature").set(21.5, {"room": "lab"})
    meter.create_observable_gauge("load", [lambda options: [Observation(0.75, {"cpu": 1})]])
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def _rebuilt(data):
    rec = carried(sdk_records.metrics_record(data, sdk_records.Scopes()))
    sink = Collected()
    assert sdk_rebuild.Metrics(lambda: RES, sink).feed([rec], 50.0) == []
    [(rebuilt, points)] = sink
    return rec, rebuilt, points


def _flat(data) -> dict:
    out = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = (sm.scope.name, sm.scope.version, sm.scope.schema_url, sm.schema_url, m.description or "",
                               m.unit or "", type(m.data).__name__, m.data.to_json(indent=None))
    return out


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_metrics_are_rebuilt_field_by_field(temporality):
    made = _metrics(temporality)
    rec, rebuilt, points = _rebuilt(made)
    flat = _flat(rebuilt)
    assert flat == _flat(made)
    assert {name: m[6] for name, m in flat.items()} == {"requests": "Sum", "queue": "Sum", "latency": "Histogram",
                                                         "latency.exp": "ExponentialHistogram", "temperature": "Gauge",
                                                         "load": "Gauge"}
    assert points == sdk_rebuild.points(rec) == 2 + 1 + 1 + 1 + 1 + 1
    [rm] = rebuilt.resource_metrics
    assert rm.resource is RES
    requests = next(m for sm in rm.scope_metrics for m in sm.metrics if m.name == "requests")
    assert requests.data.aggregation_temporality is temporality and requests.data.is_monotonic
    [ex] = [e for p in requests.data.data_points for e in p.exemplars]
    assert (ex.trace_id, ex.span_id, ex.value) == (REMOTE.trace_id, REMOTE.span_id, 3)


def test_metrics_encode_to_the_same_otlp_bytes():
    made = _metrics()
    _rec, rebuilt, _points = _rebuilt(made)
    assert encode_metrics(rebuilt).SerializeToString(deterministic=True) == \
        encode_metrics(made).SerializeToString(deterministic=True)


def test_a_metrics_record_of_unknown_data_is_refused_by_name():
    """The exporter process reports it (process.py's warn_once 'spans of otel.metrics records could not be
    built') and goes on; the builder says which data it could not rebuild."""
    bad = (((("app.metrics", "2.0", "", None), "", (("m", "", "", ("summary", ())),)),),)
    with pytest.raises(ValueError, match="unknown metric data 'summary'"):
        sdk_rebuild.Metrics(lambda: RES, Collected()).feed(bad, 50.0)
