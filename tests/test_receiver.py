"""The OTLP receiver over real gRPC and real HTTP with the OTel SDK's own exporters, and the
OTLP decoding core (evlog.data.otlp_decode) on hand-written OTLP/JSON lines."""
from __future__ import annotations

import base64
import gzip
import json
import math
import os
import socket
import subprocess
import sys
import threading

import grpc
import pytest
import requests
from google.rpc import status_pb2
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http import Compression as HttpCompression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from receiver import CollectingReceiver

from evlog.data.otlp_decode import (
    DecodeError,
    decode_logs,
    decode_metrics,
    decode_proto,
    decode_spans,
    to_otlp_json,
)
from evlog.data.receiver import OTLPReceiver

pytestmark = pytest.mark.timeout(120)

RESOURCE = Resource.create({"service.name": "receiver-test", "dask.role": "worker"})
TRACE_SERVICE = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRUNCATED_PROTOBUF = b"\x0a\x05abc"  # field 1, length 5, only 3 bytes follow


# --------------------------------------------------------------------------------------------
# helpers


def span_exporter(receiver, transport):
    if transport == "grpc":
        return GrpcSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True, timeout=10)
    return HttpSpanExporter(endpoint=f"{receiver.http_endpoint}/v1/traces", timeout=10,
                            compression=HttpCompression.Gzip)


def log_exporter(receiver, transport):
    if transport == "grpc":
        return GrpcLogExporter(endpoint=receiver.grpc_endpoint, insecure=True, timeout=10)
    return HttpLogExporter(endpoint=f"{receiver.http_endpoint}/v1/logs", timeout=10)


def metric_exporter(receiver, transport):
    if transport == "grpc":
        return GrpcMetricExporter(endpoint=receiver.grpc_endpoint, insecure=True, timeout=10)
    return HttpMetricExporter(endpoint=f"{receiver.http_endpoint}/v1/metrics", timeout=10)


def make_spans(provider):
    """A parent with an event, a link and attributes; a child that fails. Returns nothing."""
    tracer = provider.get_tracer("evlog.tests", "1.0")
    with tracer.start_as_current_span("dask.compute", kind=SpanKind.PRODUCER,
                                      attributes={"dask.keys": 3, "tags": ["a", "b"], "ratio": 0.5}) as parent:
        parent.add_event("transition", {"start": "waiting", "finish": "processing", "ok": True})
        with tracer.start_as_current_span("dask.execute inc", kind=SpanKind.CONSUMER,
                                          links=[trace_link(parent)]) as child:
            child.set_status(Status(StatusCode.ERROR, "ZeroDivisionError: boom"))


def trace_link(span):
    from opentelemetry.trace import Link

    return Link(span.get_span_context(), {"why": "follows"})


def sdk_spans():
    """ReadableSpans from the SDK (for the encoders)."""
    mem = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(mem))
    make_spans(provider)
    provider.shutdown()
    return mem.get_finished_spans()


def post(receiver, signal, body, content_type="application/x-protobuf", **headers):
    return requests.post(f"{receiver.http_endpoint}/v1/{signal}", data=body, timeout=10,
                         headers={"Content-Type": content_type, **headers})


def grpc_raw_export(receiver, body, method=TRACE_SERVICE):
    with grpc.insecure_channel(f"127.0.0.1:{receiver.grpc_port}") as channel:
        call = channel.unary_unary(method)  # no serializers: raw bytes both ways
        return call(body, timeout=10)


def rpc_status(resp):
    status = status_pb2.Status()
    status.ParseFromString(resp.content)
    return status


# --------------------------------------------------------------------------------------------
# spans, logs, metrics from the SDK exporters over both transports


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_spans_arrive_intact(otlp_receiver, transport):
    mem = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(span_exporter(otlp_receiver, transport)))
    provider.add_span_processor(SimpleSpanProcessor(mem))
    make_spans(provider)
    provider.shutdown()
    sent = {s.name: s for s in mem.get_finished_spans()}

    otlp_receiver.wait_for(lambda: len(otlp_receiver.spans()) >= 2, timeout=20)
    got = {s["name"]: s for s in otlp_receiver.spans()}
    assert set(got) == {"dask.compute", "dask.execute inc"}
    parent, child = got["dask.compute"], got["dask.execute inc"]
    sparent = sent["dask.compute"]
    assert parent["trace_id"] == format(sparent.context.trace_id, "032x")
    assert parent["span_id"] == format(sparent.context.span_id, "016x")
    assert parent["parent_span_id"] == ""
    assert child["trace_id"] == parent["trace_id"]
    assert child["parent_span_id"] == parent["span_id"]
    assert (parent["kind"], child["kind"]) == ("PRODUCER", "CONSUMER")
    assert (parent["start"], parent["end"]) == (sparent.start_time, sparent.end_time)
    assert parent["attributes"] == {"dask.keys": 3, "tags": ["a", "b"], "ratio": 0.5}
    assert parent["events"] == [{
        "name": "transition", "time": sparent.events[0].timestamp,
        "attributes": {"start": "waiting", "finish": "processing", "ok": True},
    }]
    assert child["links"] == [{"trace_id": parent["trace_id"], "span_id": parent["span_id"],
                               "attributes": {"why": "follows"}}]
    assert (child["status_code"], child["status_message"]) == ("ERROR", "ZeroDivisionError: boom")
    assert parent["status_code"] == "UNSET"
    assert parent["resource"]["service.name"] == "receiver-test"
    assert parent["resource"]["dask.role"] == "worker"
    assert parent["scope"] == "evlog.tests"
    assert otlp_receiver.requests[(transport, "traces")] == 2


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_log_records_arrive_with_event_name_and_dict_body(otlp_receiver, transport):
    provider = LoggerProvider(resource=RESOURCE)
    provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter(otlp_receiver, transport)))
    tracer_provider = TracerProvider(resource=RESOURCE)
    tracer = tracer_provider.get_tracer("evlog.tests")
    logger = provider.get_logger("evlog.events")
    with tracer.start_as_current_span("dask.task inc") as span:
        logger.emit(event_name="dask.log_event", body={"worker": "tcp://w:1", "n": 2, "tags": ["x"]},
                    attributes={"dask.topic": "my-topic"}, severity_number=SeverityNumber.INFO,
                    severity_text="INFO")
    logger.emit(body="plain line", attributes={"stream": "stdout"})
    provider.force_flush(10_000)
    provider.shutdown()

    otlp_receiver.wait_for(lambda: len(otlp_receiver.logs()) >= 2, timeout=20)
    event, line = sorted(otlp_receiver.logs(), key=lambda r: r["event_name"], reverse=True)
    assert event["event_name"] == "dask.log_event"
    assert event["body"] == {"worker": "tcp://w:1", "n": 2, "tags": ["x"]}
    assert event["attributes"] == {"dask.topic": "my-topic"}
    assert (event["severity_number"], event["severity_text"]) == (9, "INFO")
    assert event["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert event["span_id"] == format(span.get_span_context().span_id, "016x")
    assert event["observed_time"] > 0  # the SDK leaves time unset (0) unless given
    assert event["scope"] == "evlog.events"
    assert event["resource"]["service.name"] == "receiver-test"
    assert (line["event_name"], line["body"], line["trace_id"], line["span_id"]) == ("", "plain line", "", "")


@pytest.mark.parametrize("transport", ["grpc", "http"])
def test_gauge_sum_and_histogram_points_arrive(otlp_receiver, transport):
    reader = PeriodicExportingMetricReader(metric_exporter(otlp_receiver, transport),
                                           export_interval_millis=3_600_000)
    provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = provider.get_meter("evlog.consumers")
    meter.create_gauge("evlog.memory.free_fraction", unit="1").set(0.25, {"host": "h"})
    counter = meter.create_counter("evlog.bytes.allocated", unit="By")
    counter.add(5, {"worker": "w1"})
    counter.add(7, {"worker": "w1"})
    hist = meter.create_histogram("task.duration", unit="s")
    for v in (0.1, 3.0, 40.0):
        hist.record(v)
    provider.force_flush(10_000)
    provider.shutdown()

    otlp_receiver.wait_for(lambda: len({m["name"] for m in otlp_receiver.metrics()}) >= 3, timeout=20)
    points = {m["name"]: m for m in otlp_receiver.metrics()}
    gauge = points["evlog.memory.free_fraction"]
    assert (gauge["kind"], gauge["value"], gauge["unit"], gauge["attributes"]) == ("gauge", 0.25, "1", {"host": "h"})
    assert gauge["temporality"] is None and gauge["monotonic"] is None
    total = points["evlog.bytes.allocated"]
    assert (total["kind"], total["value"], total["monotonic"], total["temporality"]) == ("sum", 12, True, "cumulative")
    assert total["attributes"] == {"worker": "w1"} and total["time"] >= total["start"] > 0
    h = points["task.duration"]
    assert h["kind"] == "histogram"
    assert (h["count"], h["sum"], h["min"], h["max"]) == (3, 43.1, 0.1, 40.0)
    assert len(h["bucket_counts"]) == len(h["explicit_bounds"]) + 1
    assert sum(h["bucket_counts"]) == 3 and h["value"] is None
    assert h["scope"] == "evlog.consumers" and h["resource"]["service.name"] == "receiver-test"


def test_env_points_standard_exporters_at_the_receiver(otlp_receiver):
    code = (
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from opentelemetry.sdk.trace.export import BatchSpanProcessor\n"
        "import os, importlib\n"
        "proto = os.environ['OTEL_EXPORTER_OTLP_PROTOCOL']\n"
        "mod = 'grpc' if proto == 'grpc' else 'http'\n"
        "E = importlib.import_module(f'opentelemetry.exporter.otlp.proto.{mod}.trace_exporter').OTLPSpanExporter\n"
        "p = TracerProvider(); p.add_span_processor(BatchSpanProcessor(E()))\n"
        "p.get_tracer('child').start_span('from ' + proto).end()\n"
        "p.shutdown()\n"
    )
    for protocol in ("grpc", "http/protobuf"):
        env = {**os.environ, **otlp_receiver.env(protocol)}
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    otlp_receiver.wait_for(lambda: {s["name"] for s in otlp_receiver.spans()} == {"from grpc", "from http/protobuf"},
                           timeout=20)
    assert otlp_receiver.requests == {("grpc", "traces"): 1, ("http", "traces"): 1}


# --------------------------------------------------------------------------------------------
# OTLP/HTTP by hand: JSON, gzip, errors


def test_http_json_post_is_decoded_like_protobuf(otlp_receiver):
    request = encode_spans(sdk_spans())
    resp = post(otlp_receiver, "traces", request.SerializeToString())
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/x-protobuf"
    parsed = trace_service_pb2.ExportTraceServiceResponse.FromString(resp.content)
    assert not parsed.HasField("partial_success")
    from_proto = otlp_receiver.spans()
    otlp_receiver.clear()

    resp = post(otlp_receiver, "traces", json.dumps(to_otlp_json(request)), "application/json; charset=utf-8")
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    assert resp.json() == {}
    from_json = otlp_receiver.spans()
    assert len(from_proto) == 2 and from_json == from_proto


def test_http_gzip_bodies_are_decompressed(otlp_receiver):
    request = encode_spans(sdk_spans())
    resp = post(otlp_receiver, "traces", gzip.compress(request.SerializeToString()), **{"Content-Encoding": "gzip"})
    assert resp.status_code == 200
    body = gzip.compress(json.dumps(to_otlp_json(request)).encode())
    resp = post(otlp_receiver, "traces", body, "application/json", **{"Content-Encoding": "gzip"})
    assert resp.status_code == 200
    spans = otlp_receiver.spans()
    assert len(spans) == 4 and spans[:2] == spans[2:]


def test_http_malformed_protobuf_is_400_with_status(otlp_receiver):
    resp = post(otlp_receiver, "traces", TRUNCATED_PROTOBUF)
    assert resp.status_code == 400
    status = rpc_status(resp)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "malformed protobuf" in status.message
    assert otlp_receiver.rejected == 1 and otlp_receiver.spans() == []


def test_http_valid_protobuf_with_bad_trace_id_is_400(otlp_receiver):
    request = encode_spans(sdk_spans())
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\x01\x02\x03"
    resp = post(otlp_receiver, "traces", request.SerializeToString())
    assert resp.status_code == 400
    assert "traceId: expected 16 bytes, got 3" in rpc_status(resp).message


def test_http_bad_json_is_400(otlp_receiver):
    resp = post(otlp_receiver, "logs", b"{not json", "application/json")
    assert resp.status_code == 400 and resp.headers["Content-Type"] == "application/json"
    assert resp.json()["code"] == 3 and "malformed JSON" in resp.json()["message"]
    line = {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "xyz", "spanId": "00f067aa0ba902b7"}]}]}]}
    resp = post(otlp_receiver, "traces", json.dumps(line), "application/json")
    assert resp.status_code == 400
    assert "resourceSpans[0].scopeSpans[0].spans[0]: traceId" in resp.json()["message"]
    assert otlp_receiver.rejected == 2


def test_http_bad_gzip_is_400(otlp_receiver):
    resp = post(otlp_receiver, "traces", b"not gzip at all", **{"Content-Encoding": "gzip"})
    assert resp.status_code == 400 and "gzip" in rpc_status(resp).message


def test_http_oversized_bodies_are_413():
    with CollectingReceiver(max_body=2000) as r:
        resp = post(r, "traces", b"\x00" * 5000)
        assert resp.status_code == 413
        assert rpc_status(resp).code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        # small on the wire, too big once decompressed
        bomb = gzip.compress(b"\x00" * 100_000)
        assert len(bomb) < 2000
        resp = post(r, "traces", bomb, **{"Content-Encoding": "gzip"})
        assert resp.status_code == 413 and "decompressed" in rpc_status(resp).message
        assert r.rejected == 2 and r.spans() == []


def test_http_unsupported_content_type_or_encoding_is_415(otlp_receiver):
    assert post(otlp_receiver, "metrics", b"x", "text/plain").status_code == 415
    assert post(otlp_receiver, "metrics", b"", "application/x-protobuf",
                **{"Content-Encoding": "br"}).status_code == 415
    assert otlp_receiver.rejected == 2


def test_http_unknown_path_is_404(otlp_receiver):
    resp = requests.post(f"{otlp_receiver.http_endpoint}/v1/profiles", data=b"", timeout=10)
    assert resp.status_code == 404


# --------------------------------------------------------------------------------------------
# gRPC by hand


def test_grpc_garbage_is_invalid_argument(otlp_receiver):
    with pytest.raises(grpc.RpcError) as err:
        grpc_raw_export(otlp_receiver, TRUNCATED_PROTOBUF)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed protobuf" in err.value.details()
    request = encode_spans(sdk_spans())
    request.resource_spans[0].scope_spans[0].spans[1].span_id = b"\x01"
    with pytest.raises(grpc.RpcError) as err:
        grpc_raw_export(otlp_receiver, request.SerializeToString())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spanId" in err.value.details()
    assert otlp_receiver.rejected == 2 and otlp_receiver.spans() == []


# --------------------------------------------------------------------------------------------
# robustness and fault injection


def test_raising_sink_does_not_kill_the_server():
    got = []
    calls = []

    def sink(signal, rows):
        calls.append(signal)
        if len(calls) <= 2:
            raise RuntimeError("disk full")
        got.extend(rows)

    body = encode_spans(sdk_spans()).SerializeToString()
    with OTLPReceiver(sink) as r:
        resp = post(r, "traces", body)
        assert resp.status_code == 200
        partial = trace_service_pb2.ExportTraceServiceResponse.FromString(resp.content).partial_success
        assert partial.rejected_spans == 2 and "disk full" in partial.error_message
        reply = trace_service_pb2.ExportTraceServiceResponse.FromString(grpc_raw_export(r, body))
        assert reply.partial_success.rejected_spans == 2
        assert post(r, "traces", body).status_code == 200
        assert len(grpc_raw_export(r, body)) == 0  # an empty response: everything accepted
        assert len(got) == 4 and r.sink_errors == 2 and "disk full" in r.last_error


def test_fail_with_then_clear_failure(otlp_receiver):
    body = encode_spans(sdk_spans()).SerializeToString()
    otlp_receiver.fail_with("UNAVAILABLE")
    assert post(otlp_receiver, "traces", body).status_code == 503
    with pytest.raises(grpc.RpcError) as err:
        grpc_raw_export(otlp_receiver, body)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    otlp_receiver.fail_with(429)
    assert post(otlp_receiver, "traces", body).status_code == 429
    otlp_receiver.clear_failure()
    assert post(otlp_receiver, "traces", body).status_code == 200
    otlp_receiver.fail_with(503, times=1)
    assert post(otlp_receiver, "traces", body).status_code == 503
    assert post(otlp_receiver, "traces", body).status_code == 200
    assert otlp_receiver.rejected == 4 and len(otlp_receiver.spans()) == 4
    with pytest.raises(ValueError):
        otlp_receiver.fail_with("NOT_A_CODE")


def test_exporter_retries_through_a_temporary_failure(otlp_receiver):
    otlp_receiver.fail_with("UNAVAILABLE", times=1)
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(span_exporter(otlp_receiver, "grpc")))
    provider.get_tracer("t").start_span("after retry").end()
    provider.shutdown()
    otlp_receiver.wait_for(lambda: [s["name"] for s in otlp_receiver.spans()] == ["after retry"], timeout=20)
    assert otlp_receiver.rejected == 1


def test_taken_ports_fail_to_start():
    with CollectingReceiver() as first:
        for kwargs in ({"http_port": first.http_port, "grpc_port": None},
                       {"grpc_port": first.grpc_port, "http_port": None}):
            with pytest.raises(OSError):
                OTLPReceiver(lambda s, r: None, **kwargs).start()


def test_stop_closes_both_ports():
    r = CollectingReceiver().start()
    ports = (r.grpc_port, r.http_port)
    r.stop()
    for port in ports:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_extra_routes_share_the_http_app():
    from aiohttp import web

    async def hello(request):
        return web.Response(text="dashboard")

    with OTLPReceiver(lambda s, r: None, grpc_port=None, extra_routes=[web.get("/", hello)]) as r:
        assert requests.get(r.http_endpoint, timeout=10).text == "dashboard"
        assert r.grpc_port is None


def test_wait_for_times_out_with_what_arrived(otlp_receiver):
    with pytest.raises(AssertionError, match="0 spans"):
        otlp_receiver.wait_for(lambda: False, timeout=0.3)


def test_concurrent_exports_all_arrive(otlp_receiver):
    body = encode_spans(sdk_spans()).SerializeToString()

    def send(i):
        if i % 2:
            post(otlp_receiver, "traces", body).raise_for_status()
        else:
            grpc_raw_export(otlp_receiver, body)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(otlp_receiver.spans()) == 16


# --------------------------------------------------------------------------------------------
# otlp_decode on hand-written OTLP/JSON lines

TRACE_ID = "4BF92F3577B34DA6A3CE929D0E0E4736"
SPAN_ID = "00f067aa0ba902b7"
PARENT_ID = "53995c3f42cd8ad8"

SPAN_LINE = {
    "resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "app"}},
            {"key": "process.pid", "value": {"intValue": "4242"}},
        ]},
        "scopeSpans": [{
            "scope": {"name": "evlog.dask", "version": "0.1"},
            "spans": [{
                "traceId": TRACE_ID,
                "spanId": SPAN_ID,
                "parentSpanId": PARENT_ID,
                "name": "dask.task inc",
                "kind": 2,
                "startTimeUnixNano": "1700000000000000001",
                "endTimeUnixNano": "1700000000500000002",
                "attributes": [
                    {"key": "dask.task.key", "value": {"stringValue": "inc-1"}},
                    {"key": "dask.task.nbytes", "value": {"intValue": "9007199254740993"}},
                    {"key": "ratio", "value": {"doubleValue": 0.5}},
                    {"key": "nan", "value": {"doubleValue": "NaN"}},
                    {"key": "ok", "value": {"boolValue": True}},
                    {"key": "blob", "value": {"bytesValue": base64.b64encode(b"\x00\xffhi").decode()}},
                    {"key": "empty", "value": {}},
                    {"key": "deps", "value": {"arrayValue": {"values": [
                        {"stringValue": "a"},
                        {"kvlistValue": {"values": [
                            {"key": "n", "value": {"intValue": 3}},
                            {"key": "inner", "value": {"arrayValue": {}}},
                        ]}},
                    ]}}},
                ],
                "events": [{"timeUnixNano": "1700000000100000000", "name": "transition",
                            "attributes": [{"key": "finish", "value": {"stringValue": "memory"}}]}],
                "links": [{"traceId": TRACE_ID.lower(), "spanId": PARENT_ID}],
                "status": {"code": 2, "message": "boom"},
            }],
        }],
    }]
}


def test_decode_spans_hand_written_line():
    (row,) = decode_spans(json.loads(json.dumps(SPAN_LINE)))
    nan = row["attributes"].pop("nan")
    assert math.isnan(nan)
    assert row == {
        "trace_id": TRACE_ID.lower(),
        "span_id": SPAN_ID,
        "parent_span_id": PARENT_ID,
        "name": "dask.task inc",
        "kind": "SERVER",
        "start": 1700000000000000001,
        "end": 1700000000500000002,
        "attributes": {
            "dask.task.key": "inc-1",
            "dask.task.nbytes": 9007199254740993,
            "ratio": 0.5,
            "ok": True,
            "blob": b"\x00\xffhi",
            "empty": None,
            "deps": ["a", {"n": 3, "inner": []}],
        },
        "events": [{"name": "transition", "time": 1700000000100000000, "attributes": {"finish": "memory"}}],
        "links": [{"trace_id": TRACE_ID.lower(), "span_id": PARENT_ID, "attributes": {}}],
        "status_code": "ERROR",
        "status_message": "boom",
        "resource": {"service.name": "app", "process.pid": 4242},
        "scope": "evlog.dask",
    }


def test_decode_spans_defaults_and_enum_names():
    line = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": TRACE_ID, "spanId": SPAN_ID, "kind": "SPAN_KIND_CLIENT",
         "status": {"code": "STATUS_CODE_OK"}, "startTimeUnixNano": 5},
        {"traceId": TRACE_ID, "spanId": SPAN_ID, "parentSpanId": ""},
    ]}]}]}
    a, b = decode_spans(line)
    assert (a["kind"], a["status_code"], a["start"], a["end"]) == ("CLIENT", "OK", 5, 0)
    assert (b["kind"], b["status_code"], b["parent_span_id"], b["name"]) == ("INTERNAL", "UNSET", "", "")
    assert a["resource"] == {} and a["scope"] == "" and a["events"] == [] and a["links"] == []
    assert decode_spans({}) == [] and decode_spans({"resourceSpans": []}) == []


def test_decode_logs_hand_written_line():
    line = {"resourceLogs": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "app"}}]},
                              "scopeLogs": [{"scope": {"name": "evlog.bridge"}, "logRecords": [
        {"timeUnixNano": "1700000000000000000", "observedTimeUnixNano": "1700000000000000009",
         "severityNumber": 9, "severityText": "INFO", "eventName": "rdzv.join",
         "body": {"kvlistValue": {"values": [{"key": "rank", "value": {"intValue": "3"}},
                                             {"key": "hosts", "value": {"arrayValue": {"values": [
                                                 {"stringValue": "a"}, {"stringValue": "b"}]}}}]}},
         "attributes": [{"key": "evlog.event_type", "value": {"stringValue": "TORCHELASTIC"}}],
         "traceId": TRACE_ID, "spanId": SPAN_ID},
        {"severityNumber": "SEVERITY_NUMBER_WARN", "body": {"stringValue": "line"}},
    ]}]}]}
    first, second = decode_logs(line)
    assert first == {
        "time": 1700000000000000000, "observed_time": 1700000000000000009,
        "severity_number": 9, "severity_text": "INFO", "event_name": "rdzv.join",
        "body": {"rank": 3, "hosts": ["a", "b"]},
        "attributes": {"evlog.event_type": "TORCHELASTIC"},
        "trace_id": TRACE_ID.lower(), "span_id": SPAN_ID,
        "resource": {"service.name": "app"}, "scope": "evlog.bridge",
    }
    assert (second["severity_number"], second["body"], second["trace_id"], second["event_name"]) == (13, "line", "", "")


def test_decode_metrics_hand_written_line():
    attrs = [{"key": "worker", "value": {"stringValue": "w1"}}]
    line = {"resourceMetrics": [{"scopeMetrics": [{"scope": {"name": "m"}, "metrics": [
        {"name": "g", "unit": "1", "gauge": {"dataPoints": [{"timeUnixNano": "10", "asDouble": 0.5, "attributes": attrs}]}},
        {"name": "s", "sum": {"aggregationTemporality": 2, "isMonotonic": True,
                              "dataPoints": [{"startTimeUnixNano": "1", "timeUnixNano": "10", "asInt": "12"}]}},
        {"name": "h", "histogram": {"aggregationTemporality": "AGGREGATION_TEMPORALITY_DELTA", "dataPoints": [
            {"timeUnixNano": "10", "count": "3", "sum": 43.1, "min": 0.1, "max": 40,
             "bucketCounts": ["1", "1", "1"], "explicitBounds": [1, 10]}]}},
        {"name": "e", "exponentialHistogram": {"aggregationTemporality": 2, "dataPoints": [
            {"count": "2", "sum": 3, "scale": 1, "positive": {"offset": 0, "bucketCounts": ["2"]}}]}},
        {"name": "q", "summary": {"dataPoints": [{"count": "4", "quantileValues": [
            {"quantile": 0, "value": 1}, {"quantile": 0.5, "value": 2}, {"quantile": 1, "value": 9}]}]}},
        {"name": "metadata-only"},
    ]}]}]}
    g, s, h, e, q = decode_metrics(line)
    assert g == {"name": "g", "unit": "1", "kind": "gauge", "time": 10, "start": 0, "attributes": {"worker": "w1"},
                 "value": 0.5, "count": None, "sum": None, "min": None, "max": None, "bucket_counts": None,
                 "explicit_bounds": None, "monotonic": None, "temporality": None, "resource": {}, "scope": "m"}
    assert (s["kind"], s["value"], s["monotonic"], s["temporality"], s["start"]) == ("sum", 12, True, "cumulative", 1)
    assert (h["kind"], h["count"], h["sum"], h["min"], h["max"], h["temporality"]) == (
        "histogram", 3, 43.1, 0.1, 40.0, "delta")
    assert (h["bucket_counts"], h["explicit_bounds"]) == ([1, 1, 1], [1.0, 10.0])
    assert (e["kind"], e["count"], e["sum"], e["bucket_counts"]) == ("exponential_histogram", 2, 3.0, None)
    assert (q["kind"], q["count"], q["sum"], q["min"], q["max"]) == ("summary", 4, 0.0, 1.0, 9.0)


def _span_line(**span):
    base = {"traceId": TRACE_ID, "spanId": SPAN_ID}
    base.update(span)
    return {"resourceSpans": [{"scopeSpans": [{"spans": [base]}]}]}


@pytest.mark.parametrize("bad, words", [
    ("not a dict", "expected an OTLP/JSON request object"),
    ([], "expected an OTLP/JSON request object"),
    ({"resourceLogs": []}, "missing 'resourceSpans'"),
    ({"resourceSpans": {}}, "resourceSpans: expected an array"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": "x"}]}]}, "spans: expected an array"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}, "expected a span object"),
    ({"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": SPAN_ID}]}]}]}, "traceId: expected a trace id"),
    (_span_line(traceId="zz" * 16), "traceId: expected a trace id as 32 hex digits"),
    (_span_line(traceId=base64.b64encode(bytes(16)).decode()), "traceId: expected a trace id"),
    (_span_line(spanId="00f067aa0ba902"), "spanId: expected a span id as 16 hex digits"),
    (_span_line(parentSpanId=12), "parentSpanId: expected a span id"),
    (_span_line(startTimeUnixNano="soon"), "startTimeUnixNano: not an integer"),
    (_span_line(endTimeUnixNano=[1]), "endTimeUnixNano: expected an integer"),
    (_span_line(kind=9), "kind: unknown value 9"),
    (_span_line(kind="SPAN_KIND_WEIRD"), "kind: unknown value"),
    (_span_line(name=5), "name: expected a string"),
    (_span_line(attributes={"a": 1}), "attributes: expected an array"),
    (_span_line(attributes=[{"key": "a", "value": {"intValue": "x"}}]), "attribute 'a': intValue: not an integer"),
    (_span_line(attributes=[{"key": "a", "value": {"fooValue": 1}}]), "unknown AnyValue field 'fooValue'"),
    (_span_line(attributes=[{"key": "a", "value": {"bytesValue": "!!"}}]), "bytesValue: not base64"),
    (_span_line(attributes=[{"key": "a", "value": {"arrayValue": {"values": [{"boolValue": "yes"}]}}}]),
     "boolValue: expected true or false"),
    (_span_line(events=[{"name": "e", "timeUnixNano": "x"}]), "events.timeUnixNano: not an integer"),
    (_span_line(events=["e"]), "events[]: expected an object"),
    (_span_line(links=[{"traceId": TRACE_ID}]), "links.spanId"),
    (_span_line(status="ERROR"), "status: expected an object"),
])
def test_decode_spans_rejects_bad_input(bad, words):
    with pytest.raises(DecodeError, match=None) as err:
        decode_spans(bad)
    assert words in str(err.value)


@pytest.mark.parametrize("fn, bad, words", [
    (decode_logs, {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"traceId": "abc"}]}]}]}, "traceId"),
    (decode_logs, {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"severityNumber": "LOUD"}]}]}]}, "severityNumber"),
    (decode_logs, {"resourceLogs": [{"scopeLogs": [{"logRecords": [{"body": "text"}]}]}]}, "AnyValue"),
    (decode_logs, {"resourceLogs": [{"resource": []}]}, "resource: expected an object"),
    (decode_metrics, {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "g", "gauge": {"dataPoints": [{"asDouble": "many"}]}}]}]}]}, "'g' gauge.dataPoints[0]: asDouble"),
    (decode_metrics, {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "s", "sum": {"isMonotonic": "yes", "dataPoints": []}}]}]}]}, "isMonotonic"),
    (decode_metrics, {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "h", "histogram": {"dataPoints": [{"bucketCounts": ["x"]}]}}]}]}]}, "bucketCounts"),
    (decode_metrics, {"resourceMetrics": [{"scopeMetrics": [{"metrics": [
        {"name": "h", "histogram": {"aggregationTemporality": 7, "dataPoints": []}}]}]}]}, "aggregationTemporality"),
])
def test_decode_logs_and_metrics_reject_bad_input(fn, bad, words):
    with pytest.raises(DecodeError) as err:
        fn(bad)
    assert words in str(err.value)


def test_decode_error_is_a_value_error():
    assert issubclass(DecodeError, ValueError)


def test_decode_proto_agrees_with_the_json_form():
    spans = encode_spans(sdk_spans())
    assert decode_proto("traces", spans) == decode_spans(json.loads(json.dumps(to_otlp_json(spans))))
    assert decode_proto("traces", spans.SerializeToString()) == decode_proto("traces", spans)

    mem = InMemoryLogRecordExporter()
    lp = LoggerProvider(resource=RESOURCE)
    lp.add_log_record_processor(SimpleLogRecordProcessor(mem))
    lp.get_logger("l").emit(event_name="e", body={"k": [1, 2.5, b"\x01", None, True]}, attributes={"a": "b"})
    lp.get_logger("l").emit(body="x", severity_number=SeverityNumber.ERROR)
    lp.shutdown()
    logs = encode_logs(mem.get_finished_logs())
    rows = decode_proto("logs", logs)
    assert rows == decode_logs(json.loads(json.dumps(to_otlp_json(logs))))
    assert rows[0]["body"] == {"k": [1, 2.5, b"\x01", None, True]}

    reader = InMemoryMetricReader()
    mp = MeterProvider(resource=RESOURCE, metric_readers=[reader])
    meter = mp.get_meter("m")
    meter.create_gauge("g").set(0)  # zero values are omitted from the JSON form
    meter.create_counter("c").add(3)
    meter.create_up_down_counter("u").add(-2)
    meter.create_histogram("h").record(0)
    metrics = encode_metrics(reader.get_metrics_data())
    mp.shutdown()
    rows = decode_proto("metrics", metrics)
    assert rows == decode_metrics(json.loads(json.dumps(to_otlp_json(metrics))))
    assert {r["name"]: r["kind"] for r in rows} == {"g": "gauge", "c": "sum", "u": "sum", "h": "histogram"}
    assert {r["name"]: r["monotonic"] for r in rows}["u"] is False


def test_decode_proto_rejects_bad_input():
    with pytest.raises(DecodeError, match="malformed protobuf ExportLogsServiceRequest"):
        decode_proto("logs", TRUNCATED_PROTOBUF)
    with pytest.raises(DecodeError, match="expected a ExportTraceServiceRequest"):
        decode_proto("traces", {"resourceSpans": []})
    with pytest.raises(DecodeError, match="unknown signal"):
        decode_proto("profiles", b"")
    assert decode_proto("metrics", b"") == []


def test_decode_never_raises_anything_but_decode_error():
    hypothesis = pytest.importorskip("hypothesis")
    st = hypothesis.strategies
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(
            st.sampled_from(["resourceSpans", "scopeSpans", "spans", "traceId", "spanId", "attributes", "key",
                             "value", "stringValue", "intValue", "arrayValue", "kvlistValue", "values", "events",
                             "resourceLogs", "scopeLogs", "logRecords", "body", "resourceMetrics", "scopeMetrics",
                             "metrics", "gauge", "sum", "dataPoints", "asInt", "histogram", "bucketCounts",
                             "status", "code", "kind", "name", "resource"]) | st.text(max_size=10),
            children, max_size=5),
        max_leaves=30,
    )

    @hypothesis.settings(max_examples=120, deadline=None, database=None)
    @hypothesis.given(json_values)
    def check(value):
        for fn in (decode_spans, decode_logs, decode_metrics):
            try:
                fn(value)
            except DecodeError:
                pass

    check()


def test_a_sink_under_backpressure_makes_exporters_retry_not_drop():
    """Backpressure from the sink is UNAVAILABLE / 503 (retryable), so the exporter sends again."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from evlog.data.receiver import Backpressure, OTLPReceiver

    busy = {"left": 2}
    got = []

    def sink(signal, rows):
        if busy["left"]:
            busy["left"] -= 1
            raise Backpressure("queue full")
        got.extend(rows)

    with OTLPReceiver(sink) as r:
        for make in (lambda: GrpcExporter(endpoint=r.grpc_endpoint, insecure=True),
                     lambda: HttpExporter(endpoint=f"{r.http_endpoint}/v1/traces")):
            busy["left"], got[:] = 2, []
            tp = TracerProvider()
            tp.add_span_processor(SimpleSpanProcessor(make()))
            tp.get_tracer("t").start_span("retried").end()
            tp.shutdown()
            assert [s["name"] for s in got] == ["retried"], r.stats()
        assert r.stats()["rejected"] >= 4
