"""evlog/builders/dask_readings.py: a scheduler's readings of Dask's spans and fine performance metrics ->
``dask.span`` spans and ``dask.worker.*`` metric points, no cluster.

Records are written as evlog/observed/dask/readings.py writes them (evlog/wire/dask.py): SpanSeen, SpanCall,
SpanTimes, Figures, CLOSED. ``now`` is the exporter process's clock, apart from the records' times.
"""
from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind

from evlog.builders.dask_lives import GRACE, Lives
from evlog.builders.dask_readings import QUIET, Readings, point_of
from evlog.wire import dask as wire

RES = Resource({"service.name": "app", "dask.role": "scheduler"})
ETL, LOAD, CLEAN, REDUCE = "etl-id", "load-id", "clean-id", "reduce-id"
TRACE, CALL = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331
CARRIER = {"traceparent": f"00-{TRACE:032x}-{CALL:016x}-01"}
T0 = 1000.0


class Pipeline:
    """The metrics pipeline: what the builder adds."""

    def __init__(self):
        self.added = []

    def add(self, items):
        self.added.extend(items)

    def points(self) -> list:
        """(metric name, unit, attributes, value, start ns, time ns) of every point added."""
        return [(m.name, m.unit, dict(p.attributes), p.value, p.start_time_unix_nano, p.time_unix_nano)
                for md, _n in self.added for rm in md.resource_metrics for sm in rm.scope_metrics
                for m in sm.metrics for p in m.data.data_points]


def seen(t=T0):
    return [(wire.SEEN, t, ETL, ("etl",), None), (wire.SEEN, t, LOAD, ("etl", "load"), ETL)]


def done(sid, start, stop, t=T0 + 5):
    return (wire.TIMES, t, sid, start, stop, True)


def test_nested_dask_spans_are_one_trace_parent_and_child_with_dasks_times_and_a_link_to_the_call():
    b = Readings({"start": T0}, lambda: RES)
    assert b.feed(seen() + [(wire.CALL, T0, LOAD, CARRIER)], 1.0) == []
    # both done, but nothing says the program left them yet
    assert b.feed([done(LOAD, T0 + 1, T0 + 3), done(ETL, T0 + 1, T0 + 4)], 2.0) == []
    spans = b.feed([(wire.SEEN, T0 + 6, REDUCE, ("reduce",), None)], 3.0)  # the program went on: both are over
    by = {s.name: s for s in spans}
    assert set(by) == {"dask.span etl", "dask.span load"}
    etl, load = by["dask.span etl"], by["dask.span load"]
    assert dict(load.attributes) == {"dask.span.id": LOAD, "dask.span.name": ("etl", "load")}
    assert dict(etl.attributes) == {"dask.span.id": ETL, "dask.span.name": ("etl",)}
    assert etl.parent is None and load.parent.span_id == etl.context.span_id
    assert load.context.trace_id == etl.context.trace_id != TRACE
    assert (load.start_time, load.end_time) == (int((T0 + 1) * 1e9), int((T0 + 3) * 1e9))
    assert (etl.start_time, etl.end_time) == (int((T0 + 1) * 1e9), int((T0 + 4) * 1e9))
    assert [(link.context.trace_id, link.context.span_id) for link in load.links] == [(TRACE, CALL)]
    assert not etl.links and load.kind is SpanKind.INTERNAL
    [reduce] = b.feed([], 4.0, final=True)  # each Dask span is one span; reduce's ends with the run
    assert reduce.name == "dask.span reduce" and reduce.context.trace_id != etl.context.trace_id


def test_a_done_span_still_open_on_the_client_waits_for_more_tasks_until_quiet():
    b = Readings({"start": T0}, lambda: RES)
    b.feed(seen(), 1.0)
    assert b.feed([done(LOAD, T0 + 1, T0 + 3)], 2.0) == []  # load is the newest span: more may come
    assert b.feed([(wire.TIMES, T0 + 7, LOAD, T0 + 1, None, False)], 3.0) == []  # more came
    assert b.feed([done(LOAD, T0 + 1, T0 + 9)], 4.0) == []
    assert b.feed([], 4.0 + QUIET - 1) == []
    [load] = b.feed([], 4.0 + QUIET)
    assert load.end_time == int((T0 + 9) * 1e9)


def test_spans_still_running_when_the_scheduler_closes_end_at_its_close():
    b = Readings({"start": T0}, lambda: RES)
    b.feed(seen() + [(wire.TIMES, T0 + 2, LOAD, T0 + 1, None, False)], 1.0)
    spans = b.feed([(wire.CLOSED, T0 + 8)], 2.0)
    assert sorted(s.name for s in spans) == ["dask.span etl", "dask.span load"]
    assert {s.end_time for s in spans} == {int((T0 + 8) * 1e9)}
    assert [s.start_time for s in spans if s.name == "dask.span load"] == [int((T0 + 1) * 1e9)]
    # no task finished in etl itself: it starts when the scheduler saw it
    assert [s.start_time for s in spans if s.name == "dask.span etl"] == [int(T0 * 1e9)]


def test_figures_are_cumulative_sums_by_dask_unit_with_the_keys_parts_as_attributes():
    metrics = Pipeline()
    b = Readings({"start": T0}, lambda: RES, metrics)
    b.feed(seen() + [(wire.FIGURES, T0 + 2, None, (
        (("execute", "nap", "thread-noncpu", "seconds"), 1.5),
        (("execute", "nap", "thread-cpu", "seconds"), 0.01),
        (("gather-dep", "network", "seconds"), 0.2),
        (("get-data", "memory-read", "bytes"), 4096),
        (("get-data", "memory-read", "count"), 3),
        (("p2p", "foreground", "shard-partition-cpu", "seconds"), 0.5),
        (("execute", "nap", "mine", "widgets"), 7),
        ("latency", 0.25),
    )), (wire.FIGURES, T0 + 2, LOAD, ((("execute", "nap", "thread-noncpu", "seconds"), 1.5),))], 1.0)
    got = {(name, unit, tuple(sorted(a.items()))): (v, s, t) for name, unit, a, v, s, t in metrics.points()}
    start, at = int(T0 * 1e9), int((T0 + 2) * 1e9)

    def one(name, unit, value, **attrs):
        key = (name, unit, tuple(sorted({k.replace("_", "."): v for k, v in attrs.items()}.items())))
        assert got.pop(key) == (value, start, at), key

    one("dask.worker.time", "s", 1.5, dask_context="execute", dask_task_prefix="nap", dask_activity="thread-noncpu")
    one("dask.worker.time", "s", 0.01, dask_context="execute", dask_task_prefix="nap", dask_activity="thread-cpu")
    one("dask.worker.time", "s", 0.2, dask_context="gather-dep", dask_activity="network")
    one("dask.worker.bytes", "By", 4096, dask_context="get-data", dask_activity="memory-read")
    one("dask.worker.count", "1", 3, dask_context="get-data", dask_activity="memory-read")
    one("dask.worker.time", "s", 0.5, dask_context="p2p", dask_activity="foreground/shard-partition-cpu")
    one("dask.worker.value", None, 7.0, dask_context="execute", dask_task_prefix="nap", dask_activity="mine",
        dask_unit="widgets")
    one("dask.worker.digest", None, 0.25, dask_digest="latency")
    one("dask.worker.time", "s", 1.5, dask_context="execute", dask_task_prefix="nap", dask_activity="thread-noncpu",
        dask_span_id=LOAD, dask_span_name=("etl", "load"))
    assert not got
    md = metrics.added[0][0]
    [sum_metric] = [m for rm in md.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
                    if m.name == "dask.worker.bytes"]
    assert sum_metric.data.is_monotonic and sum_metric.data.aggregation_temporality.name == "CUMULATIVE"
    assert md.resource_metrics[0].resource is RES


def test_only_changed_figures_go_out_again():
    metrics = Pipeline()
    b = Readings({"start": T0}, lambda: RES, metrics)
    key = ("execute", "nap", "thread-cpu", "seconds")
    b.feed([(wire.FIGURES, T0 + 1, None, ((key, 1.0), ("latency", 0.1)))], 1.0)
    b.feed([(wire.FIGURES, T0 + 2, None, ((key, 2.0),))], 2.0)
    b.feed([], 3.0)
    pts = [(name, v, t) for name, _u, _a, v, _s, t in metrics.points()]
    assert pts == [("dask.worker.time", 1.0, int((T0 + 1) * 1e9)), ("dask.worker.digest", 0.1, int((T0 + 1) * 1e9)),
                   ("dask.worker.time", 2.0, int((T0 + 2) * 1e9))]


def test_point_of_names_dasks_key_shapes():
    assert point_of(("execute", "x", "serialize", "seconds")) == (
        "dask.worker.time", "s", {"dask.context": "execute", "dask.task.prefix": "x", "dask.activity": "serialize"})
    assert point_of(("memory-monitor", "spill", "disk-write", "bytes"))[2] == {
        "dask.context": "memory-monitor", "dask.activity": "spill/disk-write"}
    assert point_of("tick-duration") == ("dask.worker.digest", "", {"dask.digest": "tick-duration"})


def test_a_task_of_a_named_dask_span_carries_its_id_and_one_of_the_default_span_none():
    lives = Lives(lambda: RES)
    named, default = "5d1f6a0e-3c2b-4d5e-8f90-123456789abc", "6e2a7b1f-4d3c-4e6f-9a01-23456789abcd"

    def life(key, span):
        return [(key, "released", "waiting", "g", T0, None, ("inc", "inc-1", span, CARRIER, None)),
                (key, "waiting", "processing", "g", T0 + 1, "w", None),
                (key, "processing", "memory", "f", T0 + 2, ("w", None, None, 8, 0, 0.1), None)]

    batch = [(None, wire.NAMED, None, None, T0, named, None)] + life("inc-a", named) + life("inc-b", default)
    lives.feed(batch, 1.0)
    spans = {s.attributes["dask.task.key"]: s for s in lives.feed([], 1.0 + GRACE) if s.name.startswith("dask.task")}
    assert spans["inc-a"].attributes["dask.span.id"] == named
    assert "dask.span.id" not in spans["inc-b"].attributes
