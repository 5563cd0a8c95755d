"""evlog/builders/console.py: a program's console records (kind ``console``, from its relay) -> log records
for the logs pipeline and ``evlog.metadata.{key}`` gauges, no process.

Records as evlog/wire/console.py defines them: ``("d", stream, context, time_ns, data, offset, lines,
at_line_start)`` output, ``("e", stream, offset, lines, at_line_start)`` a stream's end, ``("x",)`` the
program's exit, ``("l", stream, payload)`` the lines that follow were logged (exported already).
"""
from __future__ import annotations

import zlib

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from opentelemetry.sdk.resources import Resource

from evlog.builders.console import IDLE_S, ConsoleLogs, metric_name
from evlog.wire.console import ATTR_IOSTREAM, ATTR_REPEATED

RES = Resource({"service.name": "app", "process.pid": 4242})
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
SPAN = 0x00F067AA0BA902B7
CTX = f"{TRACE:032x}{SPAN:016x}01".encode()  # the span current when the program wrote (as the relay sends it)
T = 1_700_000_000_000_000_000


class Logs:
    """What the exporter process's logs pipeline is to the builder: ``add(records)``."""

    def __init__(self):
        self.records = []

    def add(self, records):
        self.records += records

    def bodies(self) -> list:
        return [r.log_record.body for r in self.records]


class Metrics(MetricExporter):
    """A MetricExporter keeping the gauges' points: {name: last value}."""

    def __init__(self):
        super().__init__(preferred_temporality={}, preferred_aggregation={})
        self.points: dict = {}

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        for rm in metrics_data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    for p in m.data.data_points:
                        self.points[m.name] = (p.value, dict(rm.resource.attributes))
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


def builder(mode="enabled", redact=(), metrics=None):
    logs = Logs()
    return ConsoleLogs({"streams": ["stdout", "stderr"], "mode": mode, "redact": list(redact)}, lambda: RES, logs,
                       metrics), logs


def out(stream, data, offset=0, lines=0, ctx=None, t=T, at_start=True):
    return ("d", stream, ctx, t, data, offset, lines, at_start)


def test_lines_are_log_records_in_the_context_and_at_the_time_they_were_written():
    b, logs = builder()
    assert b.feed([out(0, b"hello\nworld\n", ctx=CTX), out(1, b"oops\n", t=T + 5)], 0.0) == []  # no spans
    assert logs.bodies() == ["hello", "world", "oops"]
    hello, _world, oops = logs.records
    assert (hello.log_record.trace_id, hello.log_record.span_id) == (TRACE, SPAN)
    assert hello.log_record.trace_flags == 1 and hello.log_record.timestamp == T
    assert dict(hello.log_record.attributes) == {ATTR_IOSTREAM: "stdout"} and hello.log_record.event_name is None
    assert oops.log_record.trace_id == 0 and oops.log_record.timestamp == T + 5
    assert dict(oops.log_record.attributes) == {ATTR_IOSTREAM: "stderr"}
    assert hello.resource is RES and hello.instrumentation_scope.name == "evlog.console"


def test_a_line_cut_short_goes_out_at_its_streams_end_or_the_programs_exit():
    b, logs = builder()
    b.feed([out(0, b"no newline"), out(1, b"err tail")], 0.0)
    assert logs.bodies() == []
    b.feed([("e", 0, 10, 0, False)], 0.1)
    assert logs.bodies() == ["no newline"]
    b.feed([("x",)], 0.2)
    assert logs.bodies() == ["no newline", "err tail"]


def test_a_metadata_line_is_an_event_and_its_numbers_are_gauges_with_the_programs_resource():
    metrics = Metrics()
    b, logs = builder(mode="metadata", metrics=metrics)
    b.feed([out(0, b'plain text\n{"epoch": 3, "loss": 0.25, "tag": "x", "ok": true}\n')], 0.0)
    [record] = logs.records  # in mode metadata, text lines stay on the console
    assert record.log_record.event_name == "evlog.metadata"
    assert record.log_record.body == {"epoch": 3, "loss": 0.25, "tag": "x", "ok": True}
    b.feed([], 1.0, final=True)  # the gauges' last values go out
    assert metrics.points == {"evlog.metadata.epoch": (3.0, dict(RES.attributes)),
                              "evlog.metadata.loss": (0.25, dict(RES.attributes))}


def test_the_programs_redact_patterns_apply_to_its_lines_and_metadata():
    b, logs = builder(redact=[r"employee-\d+"])
    b.feed([out(0, b'id employee-42 password=hunter2\n{"user": "employee-7", "api_key": 12345}\n')], 0.0)
    assert logs.bodies() == ["id [REDACTED] password=[REDACTED]", {"user": "[REDACTED]", "api_key": "[REDACTED]"}]


def test_the_lines_of_a_logged_record_are_not_sent_again():
    b, logs = builder()
    first = "WARNING:app:disk almost full"
    payload = f"{zlib.crc32(first.encode()):08x}{2:04x}".ljust(50, "0").encode()  # as wire.encode_logged writes it
    b.feed([("l", 1, payload), out(1, f"{first}\n  detail\nafter\n".encode())], 0.0)
    assert logs.bodies() == ["after"]


def test_repeated_lines_are_one_notice_once_the_output_is_idle():
    b, logs = builder()
    b.feed([out(0, b"same\nsame\nsame\n")], 10.0)
    assert logs.bodies() == ["same"]
    b.feed([], 10.0 + IDLE_S / 2)
    assert logs.bodies() == ["same"]
    b.feed([], 10.0 + IDLE_S)
    notice = logs.records[-1].log_record
    assert notice.body == "[evlog: previous line repeated 2 more times]"
    assert dict(notice.attributes) == {ATTR_IOSTREAM: "stdout", ATTR_REPEATED: 2}


def test_metric_names_keep_what_otel_allows_and_replace_the_rest():
    assert metric_name("loss/val") == "evlog.metadata.loss/val"
    assert metric_name("lr (x)") == "evlog.metadata.lr__x_"
    assert metric_name("épsilon") == "evlog.metadata._psilon"
    assert len(metric_name("k" * 400)) == 255
