"""evlog/builders/dask_executions.py: a worker's execution and transfer records -> ``dask.execute {prefix}`` and
``dask.transfer`` spans, no cluster.

Records are written as WorkerRecorder._convert (evlog/observed/dask/worker.py) writes them:
``(EXECUTE, key, prefix, trace_id, span_id, parent, start, stop, thread, thread name, error, startstops,
address, top)`` and ``(TRANSFER, source, keys, bytes, parent, start, stop, ok, outcome, address)``.
"""
from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind, StatusCode

from evlog.builders.dask_executions import EXECUTE, TRANSFER, Executions

RES = Resource({"service.name": "app", "dask.role": "worker", "dask.worker.address": "tcp://127.0.0.1:40001"})
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CALL = 0xB7AD6B7169203331
SPAN = 0x00F067AA0BA902B7
W1, W2 = "tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"
T0 = 1000.0


def ns(t: float) -> int:
    return int(t * 1e9)


def execute(key="inc-5d1f", prefix="inc", parent=(TRACE, CALL, 1), start=T0 + 0.5, stop=T0 + 1.0, err=None,
            startstops=(), thread=140001, top="inc 90%, json.loads 10%"):
    return (EXECUTE, key, prefix, TRACE, SPAN, parent, start, stop, thread, "Dask-Default-Threads-1-0", err,
            startstops, W1, top)


def one(rec):
    [span] = Executions(lambda: RES).feed([rec], 50.0)
    return span


def test_an_execution_is_a_consumer_span_child_of_the_client_call_with_the_workers_resource():
    span = one(execute())
    assert span.name == "dask.execute inc" and span.kind is SpanKind.CONSUMER
    assert (span.context.trace_id, span.context.span_id) == (TRACE, SPAN) and span.context.trace_flags.sampled
    assert (span.parent.trace_id, span.parent.span_id, span.parent.is_remote) == (TRACE, CALL, True)
    assert span.parent.trace_flags.sampled
    assert (span.start_time, span.end_time) == (ns(T0 + 0.5), ns(T0 + 1.0))
    assert dict(span.attributes) == {"dask.task.key": "inc-5d1f", "dask.task.prefix": "inc", "dask.worker.address": W1,
                                     "thread.id": 140001, "thread.name": "Dask-Default-Threads-1-0",
                                     "evlog.profile.top": "inc 90%, json.loads 10%"}
    assert list(span.events) == []
    assert span.status.status_code is StatusCode.UNSET
    assert span.resource is RES and span.instrumentation_scope.name == "evlog.dask"


def test_other_startstops_are_events_in_time_order_and_widen_the_span():
    ss = (("disk-read", T0 + 0.25, T0 + 0.5, None), ("transfer", T0, T0 + 0.25, W2), ("disk-write", T0 + 1.0, T0 + 1.5, None))
    span = one(execute(startstops=ss))
    assert [(e.name, dict(e.attributes), e.timestamp) for e in span.events] == [
        ("transfer", {"dask.startstop.duration": 0.25, "dask.transfer.source": W2}, ns(T0)),
        ("disk-read", {"dask.startstop.duration": 0.25}, ns(T0 + 0.25)),
        ("disk-write", {"dask.startstop.duration": 0.5}, ns(T0 + 1.0))]
    assert (span.start_time, span.end_time) == (ns(T0), ns(T0 + 1.5))


def test_a_task_that_raised_has_status_error_and_an_exception_event_at_its_end():
    err = ("ValueError: bad input", 'Traceback (most recent call last):\n  File "app.py", line 9, in f\n')
    span = one(execute(err=err, startstops=(("transfer", T0, T0 + 0.25, W2),)))
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "ValueError: bad input"
    assert [e.name for e in span.events] == ["transfer", "exception"]
    exc = span.events[-1]
    assert exc.timestamp == ns(T0 + 1.0)
    assert dict(exc.attributes) == {"exception.message": "ValueError: bad input", "exception.stacktrace": err[1]}
    rescheduled = one(execute(err=("rescheduled", "")))  # what the worker side writes for Reschedule
    assert rescheduled.status.description == "rescheduled"
    assert dict(rescheduled.events[0].attributes) == {"exception.message": "rescheduled"}


def test_no_parent_no_thread_no_profile_and_a_record_without_top():
    span = one(execute(parent=None, thread=None, top=None))
    assert span.parent is None and span.context.trace_id == TRACE
    assert dict(span.attributes) == {"dask.task.key": "inc-5d1f", "dask.task.prefix": "inc", "dask.worker.address": W1}
    older = one(execute()[:13])  # a record of 13 fields (before evlog.profile.top)
    assert "evlog.profile.top" not in older.attributes and older.name == "dask.execute inc"


def test_a_key_that_is_not_a_string_is_named_by_its_str():
    span = one(execute(key=("getitem-ab12", 0, 3), prefix="getitem"))
    assert span.attributes["dask.task.key"] == "('getitem-ab12', 0, 3)" and span.name == "dask.execute getitem"


def test_a_transfer_is_a_client_span_in_the_trace_of_the_task_that_needs_it():
    rec = (TRANSFER, W2, ("a-1", "b-2"), 4096, (TRACE, CALL, 1), T0, T0 + 0.5, True, "GatherDepSuccessEvent", W1)
    span = one(rec)
    assert span.name == "dask.transfer" and span.kind is SpanKind.CLIENT
    assert span.context.trace_id == TRACE and span.context.span_id not in (0, CALL)
    assert (span.parent.trace_id, span.parent.span_id) == (TRACE, CALL)
    assert dict(span.attributes) == {"dask.transfer.source": W2, "dask.transfer.bytes": 4096, "dask.task.key": "a-1",
                                     "dask.worker.address": W1}
    assert (span.start_time, span.end_time) == (ns(T0), ns(T0 + 0.5))
    assert span.status.status_code is StatusCode.UNSET and span.resource is RES


def test_a_failed_transfer_is_an_error_named_by_its_outcome():
    rec = (TRANSFER, W2, ("a-1",), 0, None, T0, T0 + 3.0, False, "GatherDepNetworkFailureEvent", W1)
    span = one(rec)
    assert span.status.status_code is StatusCode.ERROR and span.status.description == "GatherDepNetworkFailureEvent"
    assert span.parent is None and span.context.trace_id != 0  # no task needing it known: a trace of its own


def test_a_transfer_of_no_keys_has_an_empty_key():
    span = one((TRANSFER, W2, (), 0, None, T0, T0 + 0.1, True, "GatherDepSuccessEvent", W1))
    assert span.attributes["dask.task.key"] == ""


def test_a_batch_comes_out_in_order_with_the_current_resource():
    current = [RES]
    b = Executions(lambda: current[0])
    recs = [execute(key="inc-1"), (TRANSFER, W2, ("inc-1",), 8, None, T0, T0 + 0.1, True, "GatherDepSuccessEvent", W1),
            execute(key="inc-2", prefix="inc")]
    spans = b.feed(recs, 50.0)
    assert [s.name for s in spans] == ["dask.execute inc", "dask.transfer", "dask.execute inc"]
    current[0] = Resource({"service.name": "app", "dask.role": "worker", "process.pid": 9})
    [later] = b.feed([execute(key="inc-3")], 51.0)
    assert later.resource is current[0] and b.feed([], 52.0, final=True) == []
