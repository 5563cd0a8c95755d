"""Fuzzing what evlog takes from outside: OTLP requests to `evlog serve`, event metadata from programs.

- A real `evlog serve` process gets arbitrary bytes, arbitrary JSON, mutated OTLP/JSON and OTLP
  protobuf requests full of hostile values (ids of any length, enums out of range, uint64 extremes,
  NaN, deep nesting) on /v1/traces, /v1/logs and /v1/metrics, with either content type and any
  encoding; and the same bytes over gRPC. Every answer is 200, 400, 413 or 415 (OK or INVALID_ARGUMENT
  over gRPC), never a 5xx; after each batch of examples the server is alive, what it accepted was
  stored (no write errors), valid exports from the standard exporters are stored, and every dashboard
  endpoint answers.
- A program set up with ``evlog.configure(run_dir=...)`` records events with arbitrary metadata through
  the torchelastic bridge (``evlog.bridge.record``) and ``evlog.log_event``: None, objects whose
  ``str`` raises, NaN, bytes, sets, huge integers, cycles, deep nesting, huge strings. Nothing raises,
  and every event is in the run folder, with plain metadata unchanged.

- A program under evlog-instrument with one setting made bad (an OTEL_*/EVLOG_* variable with any
  text, or an evlog.yaml with any value for a key, or any text): it runs to its end with its exit
  code, and each signal it makes (a span, an event, a metric point) is in the run folder.

The EVLOG_* variables and the YAML file are also fuzzed in test_config.py (settings only, many more
examples), /LOGCOMMAND lines in test_console_parse.py.
"""
from __future__ import annotations

import copy
import gzip
import http.client
import json
import math
import subprocess
import textwrap
import urllib.error
import zlib

import pytest
from helpers import PYTHON, ServeProcess, evlog_env, read_run_folder, run_instrumented, without_run_folder_notice
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("grpc")
pytest.importorskip("opentelemetry.proto")

import grpc  # noqa: E402
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest  # noqa: E402
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue, KeyValueList  # noqa: E402
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs  # noqa: E402
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m_pb  # noqa: E402
from opentelemetry.proto.resource.v1.resource_pb2 import Resource  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status  # noqa: E402

SIGNALS = ("traces", "logs", "metrics")
PROTOBUF, JSON = "application/x-protobuf", "application/json"
OK_HTTP = {200, 400, 413, 415}
GRPC_SERVICES = {
    "traces": "opentelemetry.proto.collector.trace.v1.TraceService",
    "logs": "opentelemetry.proto.collector.logs.v1.LogsService",
    "metrics": "opentelemetry.proto.collector.metrics.v1.MetricsService",
}
FUZZ = settings(max_examples=120, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


MAX_BODY = 1 << 20  # the server's --max-body: small, so that 413 is within reach


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServeProcess(tmp_path_factory.mktemp("serve"), "--max-body", str(MAX_BODY))
    s.channel = grpc.insecure_channel(f"127.0.0.1:{s.grpc}")
    try:
        yield s
        s.stop()  # exits 0 on SIGTERM
    finally:
        s.channel.close()
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait(30)


@pytest.fixture
def serve(server):
    """The module's `evlog serve`, with what it had counted and said before this test (so each test
    answers for its own examples only)."""
    assert server.alive(), server.stderr()
    rec = server.overview()["receiver"]
    server.before = {"write_errors": rec["write_errors"], "sink_errors": rec["sink_errors"],
                     "stderr": len(server.stderr())}
    return server


# -------------------------------------------------------------------------------------------------
# talking to the server


def post(serve, signal: str, body: bytes, ctype: str, encoding: str | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", serve.http, timeout=60)
    try:
        headers = {"Content-Type": ctype}
        if encoding:
            headers["Content-Encoding"] = encoding
        conn.request("POST", f"/v1/{signal}", body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def encode(body: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(body)
    if encoding == "deflate":
        return zlib.compress(body)
    return body


def check_http(serve, signal: str, body: bytes, ctype: str, encoding: str = "identity") -> int:
    status = post(serve, signal, encode(body, encoding), ctype, encoding)
    assert status in OK_HTTP, f"HTTP {status} for {signal} {ctype} {encoding}: {body[:300]!r}"
    return status


def grpc_export(serve, signal: str, body: bytes):
    """(code, details) of an Export call with ``body`` as the raw request bytes."""
    call = serve.channel.unary_unary(f"/{GRPC_SERVICES[signal]}/Export")
    try:
        call(body, timeout=60)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


def check_grpc(serve, signal: str, body: bytes) -> None:
    code, details = grpc_export(serve, signal, body)
    assert code in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), f"{code} {details}: {body[:300]!r}"


def assert_healthy(serve) -> None:
    """The server is up, stored all it accepted, stores valid exports and answers every endpoint."""
    assert serve.alive(), serve.stderr()
    serve.wait_for(lambda o: o["receiver"]["pending_rows"] == 0, timeout=60, what="the store to catch up")
    rec = serve.overview()["receiver"]
    said = serve.stderr()[serve.before["stderr"]:]
    assert (rec["write_errors"], rec["sink_errors"]) == (serve.before["write_errors"], serve.before["sink_errors"]), (
        "what the server accepted (200) could not all be stored", rec, said)
    before = serve.overview()["summary"]
    _valid_exports(serve)
    serve.wait_for(lambda o: o["summary"]["spans"] == before["spans"] + 4 and
                   o["summary"]["events"] == before["events"] + 2 and
                   o["summary"]["metric_points"] >= before["metric_points"] + 2,
                   timeout=60, what="the valid exports to be stored")
    for path in ("api/overview", "api/gantt", "api/plots", "api/dag", "api/events", "api/metadata"):
        serve.get(path)  # 200 with JSON, or it raises
    try:  # the task the templates name: stored unless every request that named it was refused
        serve.get("api/task?key=fuzz-key")
    except urllib.error.HTTPError as e:
        assert e.code == 404, e
    said = serve.stderr()[serve.before["stderr"]:]
    assert "Traceback" not in said and "evlog:" not in said, said


def _valid_exports(serve) -> None:
    """Two spans, an event and a gauge point over each of gRPC and HTTP/protobuf, by the OTel SDK."""
    from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GLog
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GMetric
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GSpan
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HLog
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HMetric
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HSpan
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource as SdkResource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    g, h = serve.grpc_endpoint, serve.http_endpoint
    for span_ex, log_ex, metric_ex in (
        (GSpan(endpoint=g, insecure=True), GLog(endpoint=g, insecure=True), GMetric(endpoint=g, insecure=True)),
        (HSpan(endpoint=f"{h}/v1/traces"), HLog(endpoint=f"{h}/v1/logs"), HMetric(endpoint=f"{h}/v1/metrics")),
    ):
        res = SdkResource.create({"service.name": "after-fuzz"})
        tp = TracerProvider(resource=res)
        tp.add_span_processor(SimpleSpanProcessor(span_ex))
        with tp.get_tracer("fuzz").start_as_current_span("after-fuzz"):
            tp.get_tracer("fuzz").start_span("after-fuzz.child").end()
        tp.shutdown()
        lp = LoggerProvider(resource=res)
        lp.add_log_record_processor(SimpleLogRecordProcessor(log_ex))
        lp.get_logger("fuzz").emit(event_name="after-fuzz", body={"ok": True})
        lp.shutdown()
        reader = PeriodicExportingMetricReader(metric_ex, export_interval_millis=3_600_000)
        mp = MeterProvider(resource=res, metric_readers=[reader])
        mp.get_meter("fuzz").create_gauge("after.fuzz").set(1.0)
        assert mp.force_flush(30_000)
        mp.shutdown()


# -------------------------------------------------------------------------------------------------
# strategies: JSON

KEYS = ["resourceSpans", "scopeSpans", "spans", "resourceLogs", "scopeLogs", "logRecords", "resourceMetrics",
        "scopeMetrics", "metrics", "resource", "scope", "attributes", "key", "value", "stringValue", "intValue",
        "doubleValue", "boolValue", "bytesValue", "arrayValue", "kvlistValue", "values", "traceId", "spanId",
        "parentSpanId", "name", "kind", "startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "events",
        "links", "status", "code", "message", "body", "eventName", "severityNumber", "gauge", "sum",
        "histogram", "exponentialHistogram", "summary", "dataPoints", "asInt", "asDouble", "count",
        "bucketCounts", "explicitBounds", "quantileValues", "positive", "negative", "offset", "scale"]
# text with lone surrogates too: JSON can spell them ("\ud800"), and json.loads lets them through
any_text = st.text(max_size=30) | st.text(st.characters() | st.characters(categories=["Cs"]), max_size=30)
edge_ints = st.sampled_from([-1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30])
json_scalars = (st.none() | st.booleans() | st.integers() | edge_ints | edge_ints.map(str) | st.floats() |
                any_text | st.sampled_from(["NaN", "Infinity", "-Infinity", "0" * 32, "0" * 16, "1e400"]))
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | any_text, c, max_size=5),
    max_leaves=25)

_ID32, _ID16 = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
_ATTRS = [
    {"key": "s", "value": {"stringValue": "v"}}, {"key": "i", "value": {"intValue": "7"}},
    {"key": "d", "value": {"doubleValue": 1.5}}, {"key": "b", "value": {"boolValue": True}},
    {"key": "y", "value": {"bytesValue": "AQI="}},
    {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": 1}]}}},
    {"key": "k", "value": {"kvlistValue": {"values": [{"key": "n", "value": {"doubleValue": 2}}]}}},
    {"key": "dask.task.key", "value": {"stringValue": "fuzz-key"}},
    {"key": "dask.task.prefix", "value": {"stringValue": "fuzz"}},
    {"key": "dask.worker.address", "value": {"stringValue": "tcp://127.0.0.1:1"}},
    {"key": "dask.task.dependencies", "value": {"arrayValue": {"values": [{"stringValue": "dep-1"}]}}},
    {"key": "thread.name", "value": {"stringValue": "MainThread"}},
    {"key": "dask.topic", "value": {"stringValue": "fuzz"}},
]
_RESOURCE = {"attributes": [{"key": "service.name", "value": {"stringValue": "fuzz"}},
                            {"key": "process.pid", "value": {"intValue": "42"}},
                            {"key": "host.name", "value": {"stringValue": "h"}}]}
TEMPLATES = {
    "traces": {"resourceSpans": [{"resource": _RESOURCE, "scopeSpans": [{"scope": {"name": "s", "version": "1"}, "spans": [{
        "traceId": _ID32, "spanId": _ID16, "parentSpanId": _ID16, "name": "dask.task fuzz", "kind": 2,
        "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000001000000000",
        "attributes": _ATTRS, "status": {"code": 2, "message": "boom"},
        "events": [{"name": "transition", "timeUnixNano": "1700000000500000000", "attributes": _ATTRS}],
        "links": [{"traceId": _ID32, "spanId": _ID16, "attributes": _ATTRS}]}]}]}]},
    "logs": {"resourceLogs": [{"resource": _RESOURCE, "scopeLogs": [{"scope": {"name": "s"}, "logRecords": [{
        "timeUnixNano": "1700000000000000000", "observedTimeUnixNano": "1700000000000000001",
        "severityNumber": 9, "severityText": "INFO", "eventName": "dask.log_event",
        "body": {"kvlistValue": {"values": _ATTRS}}, "attributes": _ATTRS, "traceId": _ID32,
        "spanId": _ID16, "flags": 1}]}]}]},
    "metrics": {"resourceMetrics": [{"resource": _RESOURCE, "scopeMetrics": [{"scope": {"name": "s"}, "metrics": [
        {"name": "g", "unit": "1", "gauge": {"dataPoints": [
            {"timeUnixNano": "1700000000000000000", "asDouble": 0.5, "attributes": _ATTRS}]}},
        {"name": "c", "sum": {"aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [
            {"startTimeUnixNano": "1", "timeUnixNano": "1700000000000000000", "asInt": "3"}]}},
        {"name": "h", "histogram": {"aggregationTemporality": 1, "dataPoints": [
            {"timeUnixNano": "1700000000000000000", "count": "3", "sum": 6, "min": 1, "max": 3,
             "bucketCounts": ["1", "2"], "explicitBounds": [2.0]}]}},
        {"name": "e", "exponentialHistogram": {"dataPoints": [
            {"timeUnixNano": "1700000000000000000", "count": "2", "scale": 1, "zeroCount": "0",
             "positive": {"offset": 1, "bucketCounts": ["1", "1"]}}]}},
        {"name": "q", "summary": {"dataPoints": [
            {"timeUnixNano": "1700000000000000000", "count": "2", "sum": 3,
             "quantileValues": [{"quantile": 0, "value": 1}, {"quantile": 1, "value": 2}]}]}},
    ]}]}]},
}


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def _leaf(doc, path) -> bool:
    for step in path:
        doc = doc[step]
    return not isinstance(doc, (dict, list))


PATHS = {signal: [p for p in _paths(t) if p] for signal, t in TEMPLATES.items()}
LEAVES = {signal: [p for p in paths if _leaf(TEMPLATES[signal], p)] for signal, paths in PATHS.items()}


@st.composite
def mutated_json(draw, signal):
    """A valid OTLP/JSON request with a few of its values replaced (or removed): mostly single
    values (a timestamp, an id, an enum) by other scalars, sometimes whole parts by any JSON."""
    doc = copy.deepcopy(TEMPLATES[signal])
    for _ in range(draw(st.integers(1, 3))):
        leaf = draw(st.booleans())
        path = draw(st.sampled_from(LEAVES[signal] if leaf else PATHS[signal]))
        parent = doc
        try:
            for step in path[:-1]:
                parent = parent[step]
            if not leaf and draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = draw(json_scalars if leaf else json_values)
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation changed the shape above this path
    return doc


def dumps(v) -> bytes:
    return json.dumps(v).encode("utf-8", "surrogatepass")


# -------------------------------------------------------------------------------------------------
# strategies: protobuf, valid in form, hostile in content

u64 = (st.integers(0, 2**64 - 1) | st.integers(1_600_000_000 * 10**9, 1_900_000_000 * 10**9) |
       st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1]))
i64 = st.integers(-(2**63), 2**63 - 1) | st.sampled_from([-(2**63), 2**63 - 1, 0])
i32 = st.integers(-(2**31), 2**31 - 1) | st.integers(-1, 30)


def mostly(valid, hostile):
    """Valid values three times in four (so that whole requests pass and reach the store), else hostile."""
    return st.one_of(valid, valid, valid, hostile)


names = st.text(max_size=20) | st.sampled_from(["dask.task inc", "dask.execute inc", "futures.task f",
                                                 "multiprocessing.task g", "dask.log_event", "evlog.metadata",
                                                 "transition", ""])
keys = st.sampled_from(["dask.task.key", "dask.task.prefix", "dask.worker.address", "dask.task.dependencies",
                        "thread.name", "thread.id", "dask.topic", "evlog.topic", "process.pid", "service.name",
                        "host.name", "dask.role", "dask.stimulus_id", "dask.transition.start",
                        "dask.transition.finish"]) | st.text(max_size=12)
scalar_any = st.one_of(
    st.builds(lambda v: AnyValue(string_value=v), st.text(max_size=30)),
    st.builds(lambda v: AnyValue(bool_value=v), st.booleans()),
    st.builds(lambda v: AnyValue(int_value=v), i64),
    st.builds(lambda v: AnyValue(double_value=v), st.floats()),
    st.builds(lambda v: AnyValue(bytes_value=v), st.binary(max_size=20)),
    st.just(AnyValue()),
)


any_values = st.recursive(
    scalar_any,
    lambda c: st.one_of(
        st.lists(c, max_size=3).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
        st.lists(st.tuples(keys, c), max_size=3).map(
            lambda kvs: AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs])))),
    max_leaves=12)
attributes = st.lists(st.builds(lambda k, v: KeyValue(key=k, value=v), keys, any_values), max_size=5)
trace_ids = mostly(st.binary(min_size=16, max_size=16), st.binary(max_size=20))
span_ids = mostly(st.binary(min_size=8, max_size=8), st.binary(max_size=10))
resources = st.builds(lambda a: Resource(attributes=a), attributes)
scopes = st.builds(lambda n, v: InstrumentationScope(name=n, version=v), names, st.text(max_size=5))

spans = st.builds(
    lambda tid, sid, pid, name, kind, t0, t1, attrs, events, links, code, msg: Span(
        trace_id=tid, span_id=sid, parent_span_id=pid, name=name, kind=kind, start_time_unix_nano=t0,
        end_time_unix_nano=t1, attributes=attrs, status=Status(code=code, message=msg),
        events=[Span.Event(name=n, time_unix_nano=t, attributes=a) for n, t, a in events],
        links=[Span.Link(trace_id=lt, span_id=ls, attributes=a) for lt, ls, a in links]),
    trace_ids, span_ids, st.just(b"") | span_ids, names, mostly(st.integers(0, 5), i32), u64, u64, attributes,
    st.lists(st.tuples(names, u64, attributes), max_size=3),
    st.lists(st.tuples(trace_ids, span_ids, attributes), max_size=2), mostly(st.integers(0, 2), i32),
    st.text(max_size=10))
trace_requests = st.builds(
    lambda rss: ExportTraceServiceRequest(resource_spans=rss),
    st.lists(st.builds(lambda r, sss: ResourceSpans(resource=r, scope_spans=sss), resources, st.lists(
        st.builds(lambda s, sps: ScopeSpans(scope=s, spans=sps), scopes, st.lists(spans, max_size=3)),
        max_size=2)), max_size=2))

log_records = st.builds(
    lambda t, ot, sev, stext, body, attrs, tid, sid, flags, ename: LogRecord(
        time_unix_nano=t, observed_time_unix_nano=ot, severity_number=sev, severity_text=stext, body=body,
        attributes=attrs, trace_id=tid, span_id=sid, flags=flags, event_name=ename),
    u64, u64, i32, st.text(max_size=8), any_values, attributes, st.just(b"") | trace_ids,
    st.just(b"") | span_ids, st.integers(0, 2**32 - 1), names)
log_requests = st.builds(
    lambda rls: ExportLogsServiceRequest(resource_logs=rls),
    st.lists(st.builds(lambda r, sls: ResourceLogs(resource=r, scope_logs=sls), resources, st.lists(
        st.builds(lambda s, lrs: ScopeLogs(scope=s, log_records=lrs), scopes, st.lists(log_records, max_size=3)),
        max_size=2)), max_size=2))

doubles = st.floats()


def _number_point(t0, t, attrs, value, as_int):
    p = m_pb.NumberDataPoint(start_time_unix_nano=t0, time_unix_nano=t, attributes=attrs)
    if as_int:
        p.as_int = value if isinstance(value, int) else 0
    elif value is not None:
        p.as_double = float(value)
    return p


number_points = st.builds(_number_point, u64, u64, attributes, i64 | doubles | st.none(), st.booleans())
histogram_points = st.builds(
    lambda t, attrs, count, s, lo, hi, buckets, bounds: m_pb.HistogramDataPoint(
        time_unix_nano=t, attributes=attrs, count=count, sum=s, min=lo, max=hi, bucket_counts=buckets,
        explicit_bounds=bounds),
    u64, attributes, u64, doubles, doubles, doubles, st.lists(u64, max_size=4), st.lists(doubles, max_size=4))
exp_points = st.builds(
    lambda t, count, scale, zero, off, buckets: m_pb.ExponentialHistogramDataPoint(
        time_unix_nano=t, count=count, scale=scale, zero_count=zero,
        positive=m_pb.ExponentialHistogramDataPoint.Buckets(offset=off, bucket_counts=buckets)),
    u64, u64, i32, u64, i32, st.lists(u64, max_size=4))
summary_points = st.builds(
    lambda t, count, s, qs: m_pb.SummaryDataPoint(
        time_unix_nano=t, count=count, sum=s,
        quantile_values=[m_pb.SummaryDataPoint.ValueAtQuantile(quantile=q, value=v) for q, v in qs]),
    u64, u64, doubles, st.lists(st.tuples(doubles, doubles), max_size=3))
metrics = st.one_of(
    st.builds(lambda n, ps: m_pb.Metric(name=n, gauge=m_pb.Gauge(data_points=ps)), names,
              st.lists(number_points, max_size=3)),
    st.builds(lambda n, ps, temp, mono: m_pb.Metric(name=n, sum=m_pb.Sum(
        data_points=ps, aggregation_temporality=temp, is_monotonic=mono)), names, st.lists(number_points, max_size=3),
        i32, st.booleans()),
    st.builds(lambda n, ps, temp: m_pb.Metric(name=n, histogram=m_pb.Histogram(
        data_points=ps, aggregation_temporality=temp)), names, st.lists(histogram_points, max_size=2), i32),
    st.builds(lambda n, ps: m_pb.Metric(name=n, exponential_histogram=m_pb.ExponentialHistogram(data_points=ps)),
              names, st.lists(exp_points, max_size=2)),
    st.builds(lambda n, ps: m_pb.Metric(name=n, summary=m_pb.Summary(data_points=ps)), names,
              st.lists(summary_points, max_size=2)),
    st.builds(lambda n: m_pb.Metric(name=n), names),  # no data at all
)
metric_requests = st.builds(
    lambda rms: ExportMetricsServiceRequest(resource_metrics=rms),
    st.lists(st.builds(lambda r, sms: m_pb.ResourceMetrics(resource=r, scope_metrics=sms), resources, st.lists(
        st.builds(lambda s, ms: m_pb.ScopeMetrics(scope=s, metrics=ms), scopes, st.lists(metrics, max_size=3)),
        max_size=2)), max_size=2))

REQUESTS = {"traces": trace_requests, "logs": log_requests, "metrics": metric_requests}


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field, by hand (for nesting deeper than the library builds)."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def deep_request(signal: str, depth: int) -> bytes:
    """A request whose one AnyValue (a span attribute, a log body, a point attribute) nests ``depth``
    arrays: beyond the protobuf parser's depth limit for large ``depth``."""
    value = AnyValue(string_value="bottom").SerializeToString()
    for _ in range(depth):
        value = _field(5, _field(1, value))  # AnyValue.array_value -> ArrayValue.values
    attribute = _field(1, b"deep") + _field(2, value)  # KeyValue key, value
    if signal == "traces":
        span = Span(trace_id=b"\1" * 16, span_id=b"\2" * 8, name="deep").SerializeToString() + _field(9, attribute)
        return _field(1, _field(2, _field(2, span)))
    if signal == "logs":
        return _field(1, _field(2, _field(2, _field(5, value))))
    point = _field(7, attribute)
    return _field(1, _field(2, _field(2, m_pb.Metric(name="deep").SerializeToString() + _field(5, _field(1, point)))))


@st.composite
def signal_and_proto(draw):
    """(signal, serialized request): hostile content, possibly nested too deep, sent to another
    signal's path or damaged."""
    signal = draw(st.sampled_from(SIGNALS))
    how = draw(st.sampled_from(["as is", "as is", "deep", "elsewhere", "truncated", "flipped"]))
    if how == "deep":
        body = deep_request(signal, draw(st.integers(1, 300)))
    else:
        body = draw(REQUESTS[signal]).SerializeToString()
    if how == "elsewhere":  # a valid message of another signal: protobuf reads it as something else
        signal = draw(st.sampled_from(SIGNALS))
    elif how == "truncated" and body:
        body = body[:draw(st.integers(0, len(body) - 1))]
    elif how == "flipped" and body:
        i = draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([body[i] ^ draw(st.integers(1, 255))]) + body[i + 1:]
    return signal, body


encodings = st.sampled_from(["identity", "identity", "gzip", "deflate"])


# -------------------------------------------------------------------------------------------------
# evlog serve over HTTP


def test_http_arbitrary_bytes_get_a_client_answer_never_a_server_error(serve):
    @FUZZ
    @given(st.sampled_from(SIGNALS), st.binary(max_size=3000),
           st.sampled_from([PROTOBUF, JSON, f"{JSON}; charset=utf-8", "text/plain", "application/octet-stream"]),
           encodings | st.just("br"))
    def check(signal, body, ctype, encoding):
        if encoding == "br":  # an encoding the server does not take, with a body that is not it
            assert post(serve, signal, body, ctype, "br") in OK_HTTP
        else:
            check_http(serve, signal, body, ctype, encoding)

    check()
    assert check_http(serve, "traces", b"\0" * (MAX_BODY + 1), PROTOBUF) == 413
    assert check_http(serve, "logs", b" " * (4 * MAX_BODY) + b"{}", JSON, "gzip") == 413  # once decompressed
    assert_healthy(serve)


def test_http_arbitrary_json_gets_a_client_answer_never_a_server_error(serve):
    @FUZZ
    @given(st.sampled_from(SIGNALS), json_values, st.sampled_from([JSON, PROTOBUF]), encodings)
    def check(signal, value, ctype, encoding):
        check_http(serve, signal, dumps(value), ctype, encoding)

    check()
    check_http(serve, "traces", b"[" * 100_000 + b"]" * 100_000, JSON)  # nesting deeper than Python recurses
    check_http(serve, "logs", b'{"resourceLogs": ' * 50_000, JSON)
    assert_healthy(serve)


def test_http_mutated_otlp_json_is_stored_or_refused(serve):
    accepted = []

    @FUZZ
    @given(st.sampled_from(SIGNALS).flatmap(lambda s: st.tuples(st.just(s), mutated_json(s))), encodings)
    def check(signal_doc, encoding):
        signal, doc = signal_doc
        accepted.append(check_http(serve, signal, dumps(doc), JSON, encoding) == 200)

    for signal, doc in TEMPLATES.items():  # the templates themselves are valid
        assert check_http(serve, signal, dumps(doc), JSON) == 200
    check()
    assert any(accepted) and not all(accepted), "the mutations should give both valid and invalid requests"
    assert_healthy(serve)


def test_http_hostile_protobuf_is_stored_or_refused(serve):
    @FUZZ
    @given(signal_and_proto(), encodings)
    def check(signal_body, encoding):
        signal, body = signal_body
        check_http(serve, signal, body, PROTOBUF, encoding)

    check()
    assert_healthy(serve)


# -------------------------------------------------------------------------------------------------
# evlog serve over gRPC


def test_grpc_arbitrary_bytes_get_ok_or_invalid_argument(serve):
    @FUZZ
    @given(st.sampled_from(SIGNALS), st.binary(max_size=3000))
    def check(signal, body):
        check_grpc(serve, signal, body)

    check()
    assert_healthy(serve)


def test_grpc_hostile_protobuf_gets_ok_or_invalid_argument(serve):
    @FUZZ
    @given(signal_and_proto())
    def check(signal_body):
        check_grpc(serve, *signal_body)

    check()
    assert_healthy(serve)


# -------------------------------------------------------------------------------------------------
# event metadata through the bridge and evlog.log_event

EVENTS_PROGRAM = r'''
import enum, json, sys
import evlog
from evlog.bridge import record
from hypothesis import HealthCheck, example, given, settings, strategies as st

evlog.configure(run_dir=sys.argv[1], consumers="none")
EXAMPLES = int(sys.argv[2])


class Plain:
    pass


class Unprintable:
    """str() and repr() raise, as some proxies and half-built objects do."""

    def __str__(self):
        raise RuntimeError("no str")

    __repr__ = __str__


class BadMapping(dict):
    def items(self):
        raise RuntimeError("no items")


class Color(enum.Enum):
    RED = 1
    BLUE = "blue"


def nest(n, kind):
    v = "bottom"
    for _ in range(n):
        v = [v] if kind == "list" else {"k": v}
    return v


def cycle(kind):
    if kind == "list":
        v = [1]
        v.append(v)
    else:
        v = {"a": 1}
        v["self"] = v
    return v


hashable = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20),
                     st.binary(max_size=20), st.sampled_from(Color), st.builds(Plain), st.builds(Unprintable))
leaves = st.one_of(
    hashable, st.integers(min_value=2**63), st.decimals(), st.complex_numbers(), st.fractions(),
    st.datetimes(), st.binary(max_size=20).map(bytearray),
    st.sampled_from([10**5, 10**6]).map(lambda n: "x" * n),                 # huge strings
    st.sampled_from([10**5, 10**6]).map(lambda n: b"\xff" * n),             # huge bytes
    st.tuples(st.integers(1, 3000), st.sampled_from(["list", "dict"])).map(lambda a: nest(*a)),
    st.sampled_from(["list", "dict"]).map(cycle),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3).map(BadMapping),
)
values = st.recursive(leaves, lambda c: st.one_of(
    st.lists(c, max_size=4), st.lists(c, max_size=4).map(tuple), st.frozensets(hashable, max_size=4),
    st.sets(hashable, max_size=4), st.dictionaries(hashable, c, max_size=4)), max_leaves=20)

# plain metadata (what torchelastic documents) must arrive unchanged
plain_leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=30))

def depth(v):
    if isinstance(v, list):
        return 1 + max(map(depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(depth, v.values()), default=0)
    return 0


plain = st.recursive(plain_leaves, lambda c: st.lists(c, max_size=3) | st.dictionaries(
    st.text(max_size=10), c, max_size=3), max_leaves=10).filter(lambda v: depth(v) <= 6)

sent = []


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(st.text(max_size=30) | st.builds(Unprintable), values | st.none(), values, plain, plain)
def check(event_type, metadata, msg, plain_metadata, plain_msg):
    i = len(sent)
    record(f"fuzz.{i}", event_type, metadata)
    evlog.log_event(f"fuzz.topic.{i}", msg)
    record(f"plain.{i}", "plain", {"m": plain_metadata})
    evlog.log_event(f"plain.topic.{i}", plain_msg)
    sent.append({"i": i, "plain_metadata": {"m": plain_metadata}, "plain_msg": plain_msg})


check()
# one of each kind, to check what they become
record("known", "known", {"nan": float("nan"), "bytes": b"\x00\xff", "set": {3}, "obj": Unprintable(),
                          "big": 2**70, "deep": nest(20, "list"), "cycle": cycle("dict"), "color": Color.BLUE})
evlog.log_event("known.topic", {"nan": float("nan"), "bytes": b"\x00\xff", "set": {3}, "obj": Unprintable(),
                                "big": 2**70, "bad": BadMapping(a=1)})
print(json.dumps(sent), flush=True)
'''


def test_event_metadata_of_any_shape_never_raises_and_is_written(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([PYTHON, "-c", textwrap.dedent(EVENTS_PROGRAM), str(run_dir), "150"],
                          env=evlog_env(EVLOG_CAPTURE="off"), capture_output=True, timeout=600)
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err[-5000:]
    assert "Traceback" not in err and "evlog:" not in without_run_folder_notice(err), err[-5000:]
    sent = json.loads(proc.stdout.decode().splitlines()[-1])
    n = len(sent)
    assert n >= 150

    logs = read_run_folder(str(run_dir))["logs"]
    by_name: dict[str, list] = {}
    for r in logs:
        a = r["attributes"]
        name = r["event_name"] if r["event_name"] != "evlog.log_event" else a.get("evlog.topic")
        by_name.setdefault(name, []).append(r)
    for i in range(n):
        for name in (f"fuzz.{i}", f"fuzz.topic.{i}", f"plain.{i}", f"plain.topic.{i}"):
            assert len(by_name.get(name, ())) == 1, f"{name}: {len(by_name.get(name, ()))} records"
    for s in sent:
        i = s["i"]
        (bridged,) = by_name[f"plain.{i}"]
        assert bridged["body"] == s["plain_metadata"], (bridged["body"], s["plain_metadata"])
        assert bridged["attributes"]["evlog.event_type"] == "plain"
        (logged,) = by_name[f"plain.topic.{i}"]
        assert logged["body"] == s["plain_msg"], (logged["body"], s["plain_msg"])
    (known,) = by_name["known"]
    b = known["body"]
    assert math.isnan(b["nan"]) and b["bytes"] == b"\x00\xff" and b["set"] == [3] and b["big"] == str(2**70)
    assert b["obj"] == "<Unprintable>" and b["color"] == "blue" and isinstance(b["cycle"]["self"]["self"], dict)
    (known,) = by_name["known.topic"]
    b = known["body"]
    assert math.isnan(b["nan"]) and b["bytes"] == b"\x00\xff" and b["set"] == [3] and b["big"] == str(2**70)
    assert b["obj"] == "<Unprintable>" and isinstance(b["bad"], str)
    assert len(logs) == 4 * n + 2, f"{len(logs)} records for {n} examples"


# -- one bad setting, a whole program ------------------------------------------------------------

ONE_OF_EACH = """
from opentelemetry import trace, _logs, metrics
trace.get_tracer("t").start_span("fuzz.span").end()
_logs.get_logger("e").emit(event_name="fuzz.event", body={"i": 1})
metrics.get_meter("m").create_counter("fuzz.counter").add(1)
print("ran", flush=True)
raise SystemExit(7)
"""
# Settings a user may set to send a signal elsewhere or nowhere on purpose are left out: any value of these
# must leave every signal going to the run folder.
SETTING_VARS = ["EVLOG_CAPTURE", "EVLOG_CONSUMERS", "EVLOG_REDACT", "EVLOG_SUMMARY", "EVLOG_DASK_TRANSITIONS",
                "EVLOG_POOL_SPANS", "OTEL_TRACES_SAMPLER_ARG", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME",
                "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS", "EVLOG_CONFIG",
                "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                "OTEL_BLRP_SCHEDULE_DELAY", "OTEL_BLRP_EXPORT_TIMEOUT", "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE",
                "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_METRIC_EXPORT_TIMEOUT"]
YAML_KEYS = ["capture", "consumers", "redact", "dask_transitions", "summary", "pool_spans", "run_dir", "captur"]
_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6)
PROGRAM_FUZZ = settings(max_examples=15, deadline=None, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _runs_with_every_signal(tmp_path, extra_env: dict, yaml_text: str | None = None) -> None:
    import shutil
    import uuid

    work = tmp_path / uuid.uuid4().hex
    work.mkdir()
    run = work / "run"
    if yaml_text is not None:
        (work / "evlog.yaml").write_text(yaml_text, encoding="utf-8", errors="surrogateescape")
    env = evlog_env(extra_env)
    env.setdefault("EVLOG_RUN_DIR", str(run))
    proc = run_instrumented(ONE_OF_EACH, env=env, cwd=str(work), timeout=60)
    try:
        assert proc.returncode == 7 and proc.stdout.startswith(b"ran\n"), (extra_env, yaml_text, proc.stderr)
        assert b"Traceback" not in proc.stderr, proc.stderr
        got = read_run_folder(str(run))
        assert "fuzz.span" in {x["name"] for x in got["spans"]}, (extra_env, yaml_text, proc.stderr)
        assert "fuzz.event" in {x.get("event_name") for x in got["logs"]}, (extra_env, yaml_text, proc.stderr)
        assert "fuzz.counter" in {x["name"] for x in got["metrics"]}, (extra_env, yaml_text, proc.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@PROGRAM_FUZZ
@example("OTEL_BSP_SCHEDULE_DELAY", "-5")  # issue 21: 0 spans and 0 metric points
@example("OTEL_METRIC_EXPORT_INTERVAL", "-5")
@example("EVLOG_CONSUMERS", "foo,bar")
@given(st.sampled_from(SETTING_VARS), st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                                   blacklist_characters="\x00"), max_size=30))
def test_one_bad_variable_never_stops_the_program_nor_silences_a_signal(tmp_path, var, value):
    _runs_with_every_signal(tmp_path, {var: value})


@PROGRAM_FUZZ
@given(st.one_of(st.text(max_size=200),
                 st.builds(lambda k, v: json.dumps({k: v}), st.sampled_from(YAML_KEYS), _yaml_values)))
def test_any_yaml_file_never_stops_the_program_nor_silences_a_signal(tmp_path, text):
    _runs_with_every_signal(tmp_path, {}, text)
