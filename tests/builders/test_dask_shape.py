"""evlog/builders/dask_shape.py: a big computation split into batch traces (``split``, on the scheduler, with
real distributed TaskState objects and no scheduler), and the ``dask.batch`` / ``dask.group`` spans built from
its shape records and the tasks' transition records (dask_lives.Lives, in the exporter process)."""
from __future__ import annotations

import inspect

from distributed.scheduler import TaskGroup, TaskPrefix, TaskState
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from evlog.builders.dask_lives import GRACE, Lives
from evlog.observed.dask.shape import split
from evlog.wire.dask import SHAPE

RES = Resource({"service.name": "app", "dask.role": "scheduler"})
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CALL = 0xB7AD6B7169203331
TP = {"traceparent": f"00-{TRACE:032x}-{CALL:016x}-01"}  # the client call's carrier (tracecontext)
W1 = "tcp://127.0.0.1:40001"
T0 = 1000.0


def parse_traceparent(carrier):
    """A carrier's (or a W3C traceparent's) SpanContext, read by OpenTelemetry's own propagator."""
    carrier = carrier if isinstance(carrier, dict) else {"traceparent": carrier}
    return trace.get_current_span(TraceContextTextMapPropagator().extract(carrier)).get_span_context()


# distributed 2024.11 (the lowest pyproject allows) has no ``validate`` argument; 2026.8 requires it
_VALIDATE = (False,) if "validate" in inspect.signature(TaskState.__init__).parameters else ()


def ns(t: float) -> int:
    return int(t * 1e9)


def graph(prefix: str, n: int, group: str | None = None) -> list:
    """``n`` new tasks of one task group, the last with the highest priority (Dask's lowest tuple)."""
    tg = TaskGroup(group or f"{prefix}-abc", TaskPrefix(prefix))
    tasks = []
    for i in range(n):
        ts = TaskState(f"{prefix}-abc-{i}", None, "released", tg, *_VALIDATE)
        ts.priority = (0, n - i)
        tasks.append(ts)
    return tasks


def run(ts, tp: str, t: float, compute: float | None = 0.25, erred: bool = False) -> list:
    """Its transitions from released to memory (or erred), as the scheduler records them."""
    key, tg = ts.key, ts.group
    end = (W1, None, ("ValueError: no", "tb") if erred else None, None if erred else 8, 0, compute)
    return [(key, "released", "waiting", "g", t, None, (tg.prefix.name, tg.name, None, tp, None)),
            (key, "waiting", "processing", "g", t + 0.25, W1, None),
            (key, "processing", "erred" if erred else "memory", "f", t + 0.5, end, None)]


def test_a_graph_over_the_limit_is_cut_into_batches_in_priority_order():
    tasks = graph("inc", 5)
    carriers, records = split(tasks, TP, 2, T0)
    assert len(records) == 3  # ceil(5 / 2), sizes as even as they come
    shapes = [r[5] for r in records]
    assert all(r[:5] == (None, SHAPE, None, None, T0) and r[6] is None for r in records)
    assert [(s[1], s[3], s[4], s[5], s[6], s[7], s[8]) for s in shapes] == [
        (TP, "inc", "inc-abc", 0, 3, 5, 1), (TP, "inc", "inc-abc", 1, 3, 5, 2), (TP, "inc", "inc-abc", 2, 3, 5, 2)]
    assert len({s[2] for s in shapes}) == 1  # one group span
    btps = [s[0] for s in shapes]
    contexts = [parse_traceparent(b) for b in btps]
    assert all(c.is_valid and c.trace_flags.sampled for c in contexts)
    assert len({c.trace_id for c in contexts} | {TRACE}) == 4  # a trace of its own each
    # priority order: the last task (lowest priority tuple) runs first, so it is batch 0
    assert [carriers[ts] for ts in reversed(tasks)] == [btps[0], btps[1], btps[1], btps[2], btps[2]]


def test_each_task_group_is_cut_on_its_own():
    tasks = graph("inc", 3) + graph("sum", 1)
    carriers, records = split(tasks, TP, 3, T0)
    shapes = {r[5][3]: r[5] for r in records}
    assert len(records) == 2 and set(shapes) == {"inc", "sum"}
    assert shapes["inc"][2] != shapes["sum"][2]
    assert (shapes["inc"][6:], shapes["sum"][6:]) == ((1, 3, 3), (1, 1, 1))
    assert set(carriers) == set(tasks)


def test_small_unsampled_or_carrierless_graphs_stay_as_they_are():
    tasks = graph("inc", 3)
    assert split(tasks, TP, 3, T0) is None
    assert split(tasks, TP, 0, T0) is None  # EVLOG_DASK_TRACE_TASKS=0: never split
    assert split(tasks, f"00-{TRACE:032x}-{CALL:016x}-00", 2, T0) is None
    assert split(tasks, "garbage", 2, T0) is None


def test_priorities_that_do_not_compare_keep_the_graphs_order():
    tasks = graph("inc", 2)
    tasks[0].priority, tasks[1].priority = (0, "a"), (0, 1)
    carriers, records = split(tasks, TP, 1, T0)
    assert [carriers[ts] for ts in tasks] == [r[5][0] for r in records]


def test_batch_and_group_spans_go_out_once_all_their_tasks_spans_are_out():
    tasks = graph("inc", 5)
    carriers, records = split(tasks, TP, 2, T0)
    btps = [r[5][0] for r in records]
    group_span = records[0][5][2]
    computes = {ts: 0.25 * (i + 1) for i, ts in enumerate(tasks)}
    lives = Lives(lambda: RES)
    first = records[:]  # the shape records come before the tasks' transitions
    bad = tasks[2]  # in batch 1
    for i, ts in enumerate(reversed(tasks[2:])):  # batches 0 and 1
        first += run(ts, carriers[ts], T0 + i, computes[ts], erred=ts is bad)
    lives.feed(first, 50.0)
    out = lives.feed([], 50.0 + GRACE)
    names = [s.name for s in out if not s.name.startswith("dask.worker.memory")]
    assert names.count("dask.task inc") == 3 and names.count("dask.batch inc") == 2 and "dask.group inc" not in names
    rest = []
    for i, ts in enumerate(reversed(tasks[:2])):
        rest += run(ts, carriers[ts], T0 + 3 + i, computes[ts])
    lives.feed(rest, 60.0)
    out += lives.feed([], 60.0 + GRACE)

    task_spans = {s.attributes["dask.task.key"]: s for s in out if s.name == "dask.task inc"}
    batches = {s.attributes["dask.batch.index"]: s for s in out if s.name == "dask.batch inc"}
    [group] = [s for s in out if s.name == "dask.group inc"]
    assert len(task_spans) == 5 and sorted(batches) == [0, 1, 2]
    for ts in tasks:  # each task span is a child of its batch's root span, in the batch's trace
        span, batch = task_spans[ts.key], parse_traceparent(carriers[ts])
        assert (span.parent.trace_id, span.parent.span_id) == (batch.trace_id, batch.span_id)
        assert span.context.trace_id == batch.trace_id
    for index, b in batches.items():
        ctx = parse_traceparent(btps[index])
        assert (b.context.trace_id, b.context.span_id) == (ctx.trace_id, ctx.span_id) and b.parent is None
        assert b.kind is SpanKind.INTERNAL and b.resource is RES
        members = [task_spans[ts.key] for ts in tasks if carriers[ts] == btps[index]]
        assert (b.start_time, b.end_time) == (min(s.start_time for s in members), max(s.end_time for s in members))
        assert dict(b.attributes) == {"dask.task.prefix": "inc", "dask.task.group": "inc-abc", "dask.batch.index": index,
                                      "dask.batch.tasks": len(members), "dask.group.batches": 3}
        [link] = b.links
        assert (link.context.trace_id, link.context.span_id) == (TRACE, group_span)

    assert (group.context.trace_id, group.context.span_id) == (TRACE, group_span)
    assert (group.parent.trace_id, group.parent.span_id) == (TRACE, CALL)
    assert (group.start_time, group.end_time) == (ns(T0), ns(T0 + 4.5))
    assert dict(group.attributes) == {
        "dask.task.prefix": "inc", "dask.task.group": "inc-abc", "dask.group.tasks": 5, "dask.group.batches": 3,
        "dask.group.memory": 4, "dask.group.erred": 1, "dask.group.compute.count": 5, "dask.group.compute.sum": 3.75,
        "dask.group.compute.min": 0.25, "dask.group.compute.max": 1.25, "dask.group.compute.mean": 0.75,
        "dask.group.compute.p50": 0.75, "dask.group.compute.p95": 1.25}  # the erred task ran too
    assert group.status.status_code is StatusCode.ERROR and group.status.description == "1 of 5 tasks erred"
    batch_links = [ln for ln in group.links if "dask.batch.index" in ln.attributes]
    assert sorted((ln.attributes["dask.batch.index"], ln.context.span_id) for ln in batch_links) == sorted(
        (i, parse_traceparent(b).span_id) for i, b in enumerate(btps))
    [erred] = [ln for ln in group.links if "dask.task.key" in ln.attributes]
    assert erred.context.span_id == task_spans[bad.key].context.span_id
    assert dict(erred.attributes) == {"dask.task.key": bad.key, "exception.message": "ValueError: no"}


def test_the_final_flush_closes_batches_with_what_they_have_and_counts_how_tasks_ended():
    tasks = graph("inc", 4)
    carriers, records = split(tasks, TP, 3, T0)  # two batches of two
    a, b, c, d = tasks
    recs = records + run(a, carriers[a], T0) + run(b, carriers[b], T0 + 1, compute=None)
    recs += [(c.key, "released", "waiting", "g", T0 + 2, None, ("inc", "inc-abc", None, carriers[c], None)),
             (c.key, "waiting", "released", "cancel", T0 + 2.5, None, None),
             (c.key, "released", "forgotten", "cancel", T0 + 2.5, None, None),  # cancelled
             (d.key, "released", "waiting", "g", T0 + 3, None, ("inc", "inc-abc", None, carriers[d], None))]  # never ran
    out = Lives(lambda: RES).feed(recs, 50.0, final=True)
    [group] = [s for s in out if s.name == "dask.group inc"]
    assert len([s for s in out if s.name == "dask.batch inc"]) == 2
    assert {k: v for k, v in group.attributes.items() if k.startswith("dask.group.") and "compute" not in k} == {
        "dask.group.tasks": 4, "dask.group.batches": 2, "dask.group.memory": 2, "dask.group.forgotten": 1,
        "dask.group.unfinished": 1}
    assert group.attributes["dask.group.compute.count"] == 1  # b's compute time was not known
    assert group.status.status_code is StatusCode.UNSET and len(group.links) == 2


def test_batches_whose_tasks_never_got_a_span_make_no_span():
    tasks = graph("inc", 4)
    _carriers, records = split(tasks, TP, 3, T0)
    assert Lives(lambda: RES).feed(records, 50.0, final=True) == []
    bad = [(None, SHAPE, None, None, T0, ("garbage", TP, 1, "inc", "inc-abc", 0, 1, 4, 4), None)]
    assert Lives(lambda: RES).feed(bad, 50.0, final=True) == []  # a malformed batch carrier is left out


def test_compute_percentiles_are_by_nearest_rank():
    tasks = graph("inc", 4)
    carriers, records = split(tasks, TP, 3, T0)
    recs = list(records)
    for i, ts in enumerate(tasks):
        recs += run(ts, carriers[ts], T0 + i, compute=0.25 * (i + 1))
    [group] = [s for s in Lives(lambda: RES).feed(recs, 50.0, final=True) if s.name == "dask.group inc"]
    compute = {k.rpartition(".")[2]: v for k, v in group.attributes.items() if k.startswith("dask.group.compute.")}
    assert compute == {"count": 4, "sum": 2.5, "min": 0.25, "mean": 0.625, "p50": 0.5, "p95": 1.0, "max": 1.0}
