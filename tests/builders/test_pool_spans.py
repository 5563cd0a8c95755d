"""evlog/builders/pool_spans.py: pool task records -> ``futures.task`` / ``multiprocessing.task`` spans, no pool.

The records are made by the observed side's own writer: a real ``TaskSpan`` (evlog/observed/pools/taskspan.py)
written to as a task would (attributes, events, an exception, links, status), whose ``end()`` appends its
record to a list standing in for this process's records source, carried through marshal as the records
channel carries it; and by hand, as its docstring describes them, for the fields a task rarely sets.
"""
from __future__ import annotations

import marshal

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanContext, SpanKind, StatusCode, TraceFlags, TraceState

from evlog import __version__
from evlog.builders.pool_spans import PoolSpans
from evlog.observed.pools import taskspan

RES = Resource({"service.name": "app", "process.pid": 4343})
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CALLER = 0xB7AD6B7169203331
SPAN = 0x00F067AA0BA902B7
OTHER = (0x1234567890ABCDEF1234567890ABCDEF, 0x1122334455667788)


def recorded(monkeypatch, write) -> tuple:
    """The record a TaskSpan's end() appends, after ``write(span)``, as the exporter process receives it."""
    log: list = []
    monkeypatch.setattr(taskspan, "_log", [log])
    state = TraceState([("vendor", "v1")])
    parent = SpanContext(TRACE, CALLER, True, TraceFlags(1), state)
    span = taskspan.TaskSpan("futures.task app.square", SpanContext(TRACE, SPAN, False, TraceFlags(1), state), parent,
                             "evlog.futures", {"code.function.name": "app.square", "evlog.pool.kind": "process"},
                             1_000_000_000)
    write(span)
    span.end(1_500_000_000)
    [rec] = log
    return marshal.loads(marshal.dumps(rec))


def test_a_task_span_written_by_the_task_is_rebuilt_field_by_field(monkeypatch):
    def write(span):
        span.set_attribute("rows", 3)
        span.set_attributes({"tags": ["a", "b"]})
        span.add_event("checkpoint", {"step": 2}, timestamp=1_200_000_000)
        span.add_link(SpanContext(*OTHER, False, TraceFlags(1)), {"why": "batch"})
        try:
            raise ValueError("bad row")
        except ValueError as exc:
            span.record_exception(exc, timestamp=1_400_000_000)
        span.set_status(StatusCode.ERROR, "ValueError: bad row")

    rec = recorded(monkeypatch, write)
    [s] = PoolSpans(lambda: RES).feed([rec], 50.0)
    assert s.name == "futures.task app.square" and s.kind is SpanKind.CONSUMER
    assert (s.context.trace_id, s.context.span_id, s.context.is_remote) == (TRACE, SPAN, False)
    assert s.context.trace_flags.sampled and s.context.trace_state.to_header() == "vendor=v1"
    assert (s.parent.trace_id, s.parent.span_id, s.parent.is_remote) == (TRACE, CALLER, True)
    assert s.parent.trace_flags.sampled
    assert (s.start_time, s.end_time) == (1_000_000_000, 1_500_000_000)
    assert dict(s.attributes) == {"code.function.name": "app.square", "evlog.pool.kind": "process", "rows": 3,
                                  "tags": ("a", "b")}
    assert [(e.name, e.timestamp) for e in s.events] == [("checkpoint", 1_200_000_000), ("exception", 1_400_000_000)]
    assert dict(s.events[0].attributes) == {"step": 2}
    exc = dict(s.events[1].attributes)
    assert exc["exception.type"] == "ValueError" and exc["exception.message"] == "bad row"
    assert "raise ValueError" in exc["exception.stacktrace"] and exc["exception.escaped"] == "False"
    [link] = s.links
    assert (link.context.trace_id, link.context.span_id) == OTHER and dict(link.attributes) == {"why": "batch"}
    assert s.status.status_code is StatusCode.ERROR and s.status.description == "ValueError: bad row"
    assert (s.instrumentation_scope.name, s.instrumentation_scope.version) == ("evlog.futures", __version__)
    assert s.resource is RES


def test_a_task_span_nothing_was_written_to_is_plain(monkeypatch):
    rec = recorded(monkeypatch, lambda span: None)
    [s] = PoolSpans(lambda: RES).feed([rec], 50.0)
    assert list(s.events) == [] and list(s.links) == [] and s.status.status_code is StatusCode.UNSET
    assert dict(s.attributes) == {"code.function.name": "app.square", "evlog.pool.kind": "process"}


def test_a_root_task_span_and_an_ok_status():
    rec = ("multiprocessing.task app.work", "evlog.multiprocessing", TRACE, SPAN, 1, "", None, 10, 20,
           {"code.function.name": "app.work", "evlog.pool.kind": "mp.pool"}, None, None, (StatusCode.OK.value, None))
    [s] = PoolSpans(lambda: RES).feed([rec], 50.0)
    assert s.parent is None and len(s.context.trace_state) == 0
    assert s.name == "multiprocessing.task app.work" and s.kind is SpanKind.CONSUMER
    assert s.instrumentation_scope.name == "evlog.multiprocessing"
    assert s.status.status_code is StatusCode.OK and (s.start_time, s.end_time) == (10, 20)


def test_a_batch_keeps_its_order_and_the_current_resource():
    current = [RES]
    b = PoolSpans(lambda: current[0])
    recs = [(f"futures.task app.f{i}", "evlog.futures", TRACE, i + 1, 1, "", (TRACE, CALLER, 1, False), i, i + 1,
             {"code.function.name": f"app.f{i}"}, None, None, None) for i in range(3)]
    spans = b.feed(recs, 50.0)
    assert [(s.name, s.context.span_id, s.parent.is_remote) for s in spans] == [
        ("futures.task app.f0", 1, False), ("futures.task app.f1", 2, False), ("futures.task app.f2", 3, False)]
    current[0] = Resource({"service.name": "app", "process.pid": 1})
    assert b.feed(recs[:1], 51.0)[0].resource is current[0]
