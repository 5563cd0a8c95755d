"""The short export paths of task spans give exactly what the standard paths give.

evlog.exporters.fast_otlp writes the OTLP protobuf of task spans (and plain SDK spans) by hand;
otlp_json.encode_spans_text writes the run folder's JSON line from cached parts. Both are checked
against the standard encoders on the same spans: the OTLP request parsed back must be the same message,
the JSON line must parse to the same document.
"""
from __future__ import annotations

import json

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common._internal import trace_encoder
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, Status, StatusCode, TraceFlags, TraceState

from evlog.exporters import fast_otlp, otlp_json, runfolder
from evlog.instrumentation import _taskspan

SHARED = {"code.function.name": "app.square", "evlog.pool.kind": "process"}  # as _context shares them
EVERY_TYPE = {"s": "é ✓", "empty": "", "t": True, "f": False, "zero": 0, "neg": -3, "big": 2 ** 63 - 1,
              "x": 0.5, "strs": ["a", "b"], "ints": [1, -2], "floats": [0.5, 1e300], "bools": [True, False],
              "tuple": ("x", "y")}


def _task_spans() -> list:
    """Task spans as pool workers make them: root and child of a remote parent (with trace state),
    shared and written attributes, a failure with its exception event."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "t", "process.pid": 1}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("evlog.futures", "1.0")
    assert _taskspan.usable(tracer)
    remote = SpanContext(0x0123456789ABCDEF0123456789ABCDEF, 0x0123456789ABCDEF, True, TraceFlags(1),
                         TraceState([("k", "v"), ("evlog", "1")]))
    parents = [otel_context.Context(), trace.set_span_in_context(NonRecordingSpan(remote))]
    for i in range(12):
        span = _taskspan.start(tracer, f"futures.task f{i % 3}", SHARED, parents[i % 2])
        if i % 3 == 1:
            span.set_attributes(EVERY_TYPE)
        if i % 4 == 3:
            try:
                raise ValueError("bad ✓")
            except ValueError as exc:
                span.set_status(Status(StatusCode.ERROR, "ValueError: bad ✓"))
                span.record_exception(exc, escaped=True)
        span.end()
    spans = list(exporter.get_finished_spans())
    assert len(spans) == 12 and all(type(s) is _taskspan.TaskSpan for s in spans)
    return spans


def _sdk_spans() -> list:
    """Ordinary SDK spans (ReadableSpan copies): events, an OK status, one with a link."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "u"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("outer", attributes=EVERY_TYPE) as outer:
        outer.add_event("e", {"n": 1, "l": [1.5]})
        with tracer.start_as_current_span("inner", kind=trace.SpanKind.CLIENT) as inner:
            inner.set_status(Status(StatusCode.OK))
        with tracer.start_as_current_span("linked", links=[Link(outer.get_span_context(), {"a": 1})]):
            pass
    spans = list(exporter.get_finished_spans())
    assert all(type(s) is ReadableSpan for s in spans)
    return spans


def _standard(spans) -> ExportTraceServiceRequest:
    original = getattr(trace_encoder.encode_spans, "__wrapped__", trace_encoder.encode_spans)
    return original(spans)


def _canonical(request) -> list:
    """(resource, scope, span) bytes of each span, sorted: grouping may differ, the content may not."""
    return sorted((rs.resource.SerializeToString(), ss.scope.SerializeToString(), ss.schema_url,
                   rs.schema_url, s.SerializeToString())
                  for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)


def test_task_spans_written_by_hand_parse_to_the_standard_message():
    spans = _task_spans()
    fast = ExportTraceServiceRequest.FromString(fast_otlp.encode_request(spans, fast_otlp.sdk_span_bytes))
    assert _canonical(fast) == _canonical(_standard(spans))
    errors = [s for rs in fast.resource_spans for ss in rs.scope_spans for s in ss.spans if s.status.code == 2]
    assert errors and all(e.events[0].name == "exception" for e in errors)


def test_sdk_spans_without_links_written_by_hand_parse_to_the_standard_message():
    spans = [s for s in _sdk_spans() if fast_otlp.sdk_fits(s)]
    assert len(spans) == 2
    fast = ExportTraceServiceRequest.FromString(fast_otlp.encode_request(spans, fast_otlp.sdk_span_bytes))
    assert _canonical(fast) == _canonical(_standard(spans))


@pytest.fixture
def patched():
    patches = [fast_otlp.sdk_patch(_taskspan.TaskSpan), fast_otlp.sdk_patch(ReadableSpan)]
    for p in patches:
        p.install()
    yield trace_encoder.encode_spans
    for p in patches:
        p.uninstall()
    assert not hasattr(trace_encoder.encode_spans, "__wrapped__")  # the last uninstall restores it


def test_the_exporters_encoder_takes_the_short_path_and_the_standard_one_for_the_rest(patched, monkeypatch):
    spans = _task_spans() + _sdk_spans()  # the linked span goes the standard way, in the same request
    written = []
    encode_request = fast_otlp.encode_request
    monkeypatch.setattr(fast_otlp, "encode_request", lambda s, *a: written.extend(s) or encode_request(s, *a))
    assert _canonical(patched(spans)) == _canonical(_standard(spans))
    assert len(written) == len(spans) - 1 and all(not s.links for s in written)


def test_a_failing_short_path_falls_back_to_the_standard_encoder(patched, monkeypatch):
    spans = _task_spans()
    monkeypatch.setattr(fast_otlp, "sdk_span_bytes", None)
    monkeypatch.setattr(fast_otlp, "_writers", {_taskspan.TaskSpan: (bool, lambda: 1 / 0)})
    assert _canonical(patched(spans)) == _canonical(_standard(spans))


def test_run_folder_line_is_the_same_json_as_the_full_encoder():
    runfolder.span_exporter("unused")  # registers ReadableSpan for the short path
    assert {ReadableSpan, _taskspan.TaskSpan} <= otlp_json.FAST_TYPES
    spans = _task_spans() + _sdk_spans()
    line = otlp_json.encode_spans_text(spans)
    assert line == otlp_json.dumps(otlp_json.encode_spans(spans))  # byte for byte, key order included
    assert json.loads(line) == json.loads(otlp_json.dumps(otlp_json.encode_spans(spans)))


def test_a_failing_run_folder_short_path_writes_the_full_encoders_line(tmp_path, monkeypatch):
    spans = _task_spans()
    exporter = runfolder.span_exporter(str(tmp_path))
    monkeypatch.setattr(otlp_json, "encode_spans_text", lambda _spans: 1 / 0)
    exporter.export(spans)
    exporter.shutdown()
    (line,) = [p.read_text() for p in tmp_path.glob("traces-*.jsonl")]
    assert json.loads(line) == json.loads(otlp_json.dumps(otlp_json.encode_spans(spans)))


def _rows(rows) -> list:
    return sorted(json.dumps(r, sort_keys=True, default=str) for r in rows)


def test_a_raw_request_is_the_written_bytes_and_reads_as_the_message(patched):
    spans = _task_spans()
    raw = fast_otlp._installed[2](spans)
    assert type(raw) is fast_otlp.RawRequest
    assert raw.SerializePartialToString() == raw.SerializeToString() == raw.body and raw.ByteSize() == len(raw.body)
    assert _canonical(raw) == _canonical(_standard(spans))  # resource_spans, read through the parsed message
    both = spans + _sdk_spans()
    mixed = fast_otlp._installed[2](both)  # the linked span: the standard encoder's bytes, then ours
    assert type(mixed) is fast_otlp.RawRequest
    assert _canonical(mixed.message()) == _canonical(patched(both)) == _canonical(_standard(both))


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_otlp_exporters_send_the_written_bytes_without_parsing_them(otlp_receiver, protocol, patched, monkeypatch):
    """Through the real exporters to the real receiver: the rows are those of the standard encoder's
    request, and after the first request or two (the patch completes at the first request after the
    exporter's module is imported; a gRPC exporter's old stub is already chosen for the request that
    replaces it) the written bytes are sent as they are, never parsed."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    from evlog.viewer import otlp_decode

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=otlp_receiver.grpc_endpoint, insecure=True)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=otlp_receiver.http_endpoint + "/v1/traces")
    parsed, raw = [], []
    message = fast_otlp.RawRequest.message
    monkeypatch.setattr(fast_otlp.RawRequest, "message", lambda self: parsed.append(1) or message(self))
    if protocol == "grpc":  # the stub's serializer, read when the exporter's new stub is made
        serialize = fast_otlp._serialize
        monkeypatch.setattr(fast_otlp, "_serialize", lambda r: raw.append(type(r)) or serialize(r))
    else:
        monkeypatch.setattr(fast_otlp.RawRequest, "SerializePartialToString",
                            lambda self: raw.append(type(self)) or self.body)
    spans = _task_spans()
    try:
        for _ in range(4):
            assert exporter.export(spans) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()
    got = otlp_receiver.wait_for(lambda: len(otlp_receiver.spans()) >= 4 * len(spans) and otlp_receiver.spans())
    expected = otlp_decode.decode_proto("traces", _standard(spans))
    assert _rows(got) == _rows(expected * 4)
    assert len(parsed) <= 1
    assert len(raw) >= 2 and raw[-2:] == [fast_otlp.RawRequest] * 2  # the steady state: bytes as written


def test_uninstall_gives_the_grpc_exporter_its_own_translation_back(patched):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    fast_otlp._installed[2](_task_spans())  # the first request completes the patch
    assert OTLPSpanExporter.__dict__["_translate_data"] is not fast_otlp.raw_bytes._original
    original = fast_otlp.raw_bytes._original
    for p in list(fast_otlp._writers):
        fast_otlp._writers.pop(p)
    fast_otlp._uninstall()
    assert OTLPSpanExporter.__dict__["_translate_data"] is original
    assert not fast_otlp._unpatched
