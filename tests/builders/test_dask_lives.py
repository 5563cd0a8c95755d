"""evlog/builders/dask_lives.py: a scheduler's transition records -> ``dask.task {prefix}`` spans, no cluster.

Records are written as evlog/observed/dask/scheduler.py's SchedulerRecorder writes them:
``(key, start, finish, stimulus_id, time, extra, info)``, a worker removal ``(None, None, None, stimulus_id,
time, worker, None)``. ``now`` is the exporter process's clock (time.monotonic), apart from the records' times.
"""
from __future__ import annotations

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind, StatusCode

from evlog.builders.dask_lives import GRACE, Lives

RES = Resource({"service.name": "app", "dask.role": "scheduler", "process.pid": 4242})
TRACE = 0x0AF7651916CD43DD8448EB211C80319C
CALL = 0xB7AD6B7169203331  # the client call's dask.compute span
TP = f"00-{TRACE:032x}-{CALL:016x}-01"
GROUP_SPAN = "5d1f6a0e-3c2b-4d5e-8f90-123456789abc"  # Dask's own span id of the task group (a uuid)
W1, W2 = "tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"
KEY = "inc-5d1f"
T0 = 1000.0


def info(prefix="inc", group="inc-5d1f", tp=TP, span=GROUP_SPAN, priority=(0, 1, 7)):
    """A life's info, its carrier as the default propagators (tracecontext) write it on the scheduler."""
    return (prefix, group, span, {"traceparent": tp} if tp is not None else None, priority)


def ran(key=KEY, t=T0, worker=W1, tp=TP, deps=None, nbytes=28, suspicious=0, compute=0.25, group_span=GROUP_SPAN):
    """A task's transitions from released to memory (at t, t+1, t+3) as the scheduler records them."""
    return [(key, "released", "waiting", "update-graph-1", t, None, info(tp=tp, span=group_span)),
            (key, "waiting", "processing", "update-graph-1", t + 1, worker, None),
            (key, "processing", "memory", "task-finished-1", t + 3, (worker, deps, None, nbytes, suspicious, compute),
             None)]


def tasks(spans) -> list:
    return [s for s in spans if s.name.startswith("dask.task ")]


def transitions(span) -> list:
    return [(e.name, dict(e.attributes), e.timestamp) for e in span.events]


def ns(t: float) -> int:
    return int(t * 1e9)


def test_a_task_life_is_one_span_child_of_the_client_call_once_its_grace_is_over():
    lives = Lives(lambda: RES)
    assert tasks(lives.feed(ran(deps=("a-1", ("b", 2))), 50.0)) == []
    assert tasks(lives.feed([], 50.0 + GRACE - 0.01)) == []  # its release may yet come
    [span] = tasks(lives.feed([], 50.0 + GRACE))
    assert span.name == "dask.task inc" and span.kind is SpanKind.INTERNAL
    assert (span.parent.trace_id, span.parent.span_id, span.parent.is_remote) == (TRACE, CALL, True)
    assert span.context.trace_id == TRACE and span.context.span_id not in (0, CALL)
    assert span.context.trace_flags.sampled and not span.context.is_remote
    assert (span.start_time, span.end_time) == (ns(T0), ns(T0 + 3))
    assert dict(span.attributes) == {"dask.task.key": KEY, "dask.task.prefix": "inc", "dask.task.group": "inc-5d1f",
                                     "dask.task.state": "memory", "dask.worker.address": W1, "dask.task.nbytes": 28,
                                     "dask.task.dependencies": ("a-1", "('b', 2)"), "dask.task.priority": (0, 1, 7)}
    assert transitions(span) == [
        ("transition", {"dask.transition.start": "released", "dask.transition.finish": "waiting",
                        "dask.stimulus_id": "update-graph-1"}, ns(T0)),
        ("transition", {"dask.transition.start": "waiting", "dask.transition.finish": "processing",
                        "dask.worker.address": W1, "dask.stimulus_id": "update-graph-1"}, ns(T0 + 1)),
        ("transition", {"dask.transition.start": "processing", "dask.transition.finish": "memory",
                        "dask.worker.address": W1, "dask.stimulus_id": "task-finished-1"}, ns(T0 + 3))]
    assert span.status.status_code is StatusCode.UNSET and span.links == ()
    assert span.resource is RES
    assert span.instrumentation_scope.name == "evlog.dask"
    assert tasks(lives.feed([], 60.0, final=True)) == []  # out once


@pytest.mark.parametrize("priority, attribute", [
    ((0, 1, 7), (0, 1, 7)),
    ((0, 0.99, 3), (0.0, 0.99, 3.0)),  # a task submitted from a task: its generation less 0.01
    ((-2, 4, 5), (-2, 4, 5)),  # priority=2 given by the program
    (None, None),  # Dask gives none to some tasks (data scattered in)
    ((0, "1", 2), None),  # not numbers: not an attribute array of one type
    ([0, 1, 2], None),
])
def test_dask_priority_is_an_attribute_array_of_one_type(priority, attribute):
    lives = Lives(lambda: RES)
    recs = ran()
    recs[0] = recs[0][:6] + (info(priority=priority),)
    assert tasks(lives.feed(recs, 50.0)) == []
    [span] = tasks(lives.feed([], 50.0 + GRACE))
    assert span.attributes.get("dask.task.priority") == attribute
    if attribute is not None:
        assert {type(x) for x in span.attributes["dask.task.priority"]} == {type(attribute[0])}


def test_its_release_and_forget_join_the_span_which_goes_out_when_forgotten():
    lives = Lives(lambda: RES)
    batch = ran() + [(KEY, "memory", "released", "client-releases-keys-1", T0 + 4, None, None),
                     (KEY, "released", "forgotten", "client-releases-keys-1", T0 + 4.5, None, None)]
    [span] = tasks(lives.feed(batch, 50.0))  # forgotten: out at once, no grace to wait
    assert span.end_time == ns(T0 + 3) and span.attributes["dask.task.state"] == "memory"
    assert [(e.attributes["dask.transition.start"], e.attributes["dask.transition.finish"],
             e.attributes.get("dask.worker.address")) for e in span.events][3:] == [
        ("memory", "released", W1), ("released", "forgotten", None)]  # the worker it left; none after
    assert tasks(lives.feed([], 60.0, final=True)) == []


def test_a_tasks_span_never_goes_out_before_its_dependencies_spans():
    """A chain a <- b <- c: c ends and is forgotten (out at once) while a and b still wait out their grace:
    they go out first, a before b before c, each once; their later release and forget (a's release came
    before) make no second span."""
    lives = Lives(lambda: RES)
    batch = ran("a", T0) + ran("b", T0 + 3, deps=("a",)) + ran("c", T0 + 6, deps=("b",))
    batch += [("a", "memory", "released", "update-graph-1", T0 + 6.5, None, None),  # b no longer needs it
              ("c", "memory", "released", "client-releases-keys-1", T0 + 9.5, None, None),
              ("c", "released", "forgotten", "client-releases-keys-1", T0 + 9.6, None, None)]
    out = tasks(lives.feed(batch, 50.0))
    assert [s.attributes["dask.task.key"] for s in out] == ["a", "b", "c"]
    later = [("a", "released", "forgotten", "client-releases-keys-1", T0 + 9.7, None, None)]
    later += [("b", a, b, "client-releases-keys-1", T0 + 9.7, None, None)
              for a, b in (("memory", "released"), ("released", "forgotten"))]
    assert tasks(lives.feed(later, 50.5)) == []
    assert tasks(lives.feed([], 50.0 + GRACE)) == [] and tasks(lives.feed([], 60.0, final=True)) == []


def test_the_final_flush_sends_each_life_once_dependencies_first():
    lives = Lives(lambda: RES)
    batch = ran("c", T0 + 6, deps=("b",)) + ran("a", T0) + ran("b", T0 + 3, deps=("a",))
    assert tasks(lives.feed(batch, 50.0)) == []
    assert [s.attributes["dask.task.key"] for s in tasks(lives.feed([], 50.1, final=True))] == ["a", "b", "c"]


def test_a_result_released_after_its_span_went_out_costs_no_second_span():
    lives = Lives(lambda: RES)
    lives.feed(ran(), 50.0)
    assert len(tasks(lives.feed([], 50.0 + GRACE))) == 1
    later = [(KEY, "memory", "released", "client-releases-keys-2", T0 + 30, None, None),
             (KEY, "released", "forgotten", "client-releases-keys-2", T0 + 31, None, None)]
    assert tasks(lives.feed(later, 80.0)) == []
    assert tasks(lives.feed([], 90.0, final=True)) == []


def test_a_worker_lost_after_the_span_starts_a_new_life_that_names_it():
    lives = Lives(lambda: RES)
    lives.feed(ran(), 50.0)
    [first] = tasks(lives.feed([], 50.0 + GRACE))
    again = [(None, None, None, "handle-worker-cleanup-1", T0 + 10, W1, None),  # the scheduler removes W1
             (KEY, "memory", "released", "handle-worker-cleanup-1", T0 + 10, None, None),
             (KEY, "released", "waiting", "handle-worker-cleanup-1", T0 + 10.5, None, info()),
             (KEY, "waiting", "processing", "update-1", T0 + 11, W2, None),
             (KEY, "processing", "memory", "task-finished-2", T0 + 12, (W2, None, None, 28, 0, 0.5), None)]
    assert tasks(lives.feed(again, 60.0)) == []
    [second] = tasks(lives.feed([], 60.0 + GRACE))
    assert second.name == "dask.task inc" and second.context.span_id != first.context.span_id
    assert second.parent.span_id == CALL and second.context.trace_id == TRACE
    assert (second.start_time, second.end_time) == (ns(T0 + 10), ns(T0 + 12))
    assert list(second.attributes["dask.task.workers_lost"]) == [W1]
    assert second.attributes["dask.worker.address"] == W2
    assert [(e.attributes["dask.transition.start"], e.attributes.get("dask.worker.address"))
            for e in second.events] == [("memory", W1), ("released", None), ("waiting", W2), ("processing", W2)]
    assert "dask.task.workers_lost" not in first.attributes


def test_a_task_that_runs_again_within_the_grace_gets_a_span_per_run():
    lives = Lives(lambda: RES)
    batch = ran() + [(KEY, "memory", "released", "worker-lost-1", T0 + 4, None, None),
                     (KEY, "released", "waiting", "worker-lost-1", T0 + 5, None, info()),
                     (KEY, "waiting", "processing", "update-2", T0 + 6, W2, None),
                     (KEY, "processing", "memory", "task-finished-2", T0 + 8, (W2, None, None, 30, 1, 0.25), None)]
    [first] = tasks(lives.feed(batch, 50.0))  # it ran again: the first life goes out at once
    assert (first.start_time, first.end_time) == (ns(T0), ns(T0 + 3))
    assert [e.attributes["dask.transition.finish"] for e in first.events] == ["waiting", "processing", "memory",
                                                                              "released"]
    [second] = tasks(lives.feed([], 50.0 + GRACE))
    assert (second.start_time, second.end_time) == (ns(T0 + 5), ns(T0 + 8))
    assert second.attributes["dask.worker.address"] == W2 and second.attributes["dask.task.nbytes"] == 30
    assert second.attributes["dask.task.suspicious"] == 1 and "dask.task.suspicious" not in first.attributes


def test_an_erred_task_has_status_error_and_an_exception_event():
    lives = Lives(lambda: RES)
    err = ("ZeroDivisionError: division by zero", 'Traceback (most recent call last):\n  File "app.py", line 3\n')
    batch = ran()[:2] + [(KEY, "processing", "erred", "task-erred-1", T0 + 2, (W1, ("a-1",), err, None, 0, None),
                          None)]
    [span] = tasks(lives.feed(batch, 50.0, final=True))
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ZeroDivisionError: division by zero"
    assert span.attributes["dask.task.state"] == "erred" and "dask.task.nbytes" not in span.attributes
    assert span.attributes["dask.task.dependencies"] == ("a-1",) and span.attributes["dask.worker.address"] == W1
    exc = span.events[-1]
    assert (exc.name, exc.timestamp) == ("exception", ns(T0 + 2)) and span.end_time == ns(T0 + 2)
    assert dict(exc.attributes) == {"exception.message": err[0], "exception.stacktrace": err[1]}


def test_an_erred_task_whose_error_text_is_unknown_says_erred():
    lives = Lives(lambda: RES)
    batch = ran()[:2] + [(KEY, "processing", "erred", "x", T0 + 2, (W1, None, None, None, 0, None), None)]
    [span] = tasks(lives.feed(batch, 50.0, final=True))
    assert span.status.description == "erred"
    assert dict(span.events[-1].attributes) == {"exception.message": "erred"}


def test_a_life_that_began_before_the_first_record_has_no_span_and_breaks_nothing():
    """The recorder was added to a running scheduler: the task's released -> waiting (which carries its
    names) was never seen, so no span can be named; the next task is built as usual."""
    lives = Lives(lambda: RES)
    late = [(KEY, "waiting", "processing", "s1", T0 + 1, W1, None),
            (KEY, "processing", "memory", "s2", T0 + 3, (W1, None, None, 28, 0, 0.1), None)]
    assert tasks(lives.feed(late, 50.0)) == []
    assert tasks(lives.feed([], 60.0)) == []
    [span] = tasks(lives.feed(ran(key="dec-1", t=T0 + 5), 70.0, final=True))
    assert span.attributes["dask.task.key"] == "dec-1"


def test_a_task_still_running_at_the_final_flush_goes_out_where_it_was():
    lives = Lives(lambda: RES)
    assert tasks(lives.feed(ran()[:2], 50.0)) == []
    assert tasks(lives.feed([], 500.0)) == []  # not ended: no grace runs out
    [span] = tasks(lives.feed([], 500.0, final=True))
    assert span.attributes["dask.task.state"] == "processing"
    assert (span.start_time, span.end_time) == (ns(T0), ns(T0 + 1))  # its last transition
    assert span.status.status_code is StatusCode.UNSET


def test_without_a_carrier_tasks_of_one_dask_span_share_its_trace_and_have_no_parent():
    lives = Lives(lambda: RES)
    spans = tasks(lives.feed(ran(key="a-1", tp=None) + ran(key="a-2", tp=None), 50.0, final=True))
    assert len(spans) == 2
    assert {s.context.trace_id for s in spans} == {int(GROUP_SPAN.replace("-", ""), 16)}
    assert all(s.parent is None for s in spans)
    for group_span in (None, "not-hex"):  # a random trace, never an invalid one
        [span] = tasks(Lives(lambda: RES).feed(ran(tp=None, group_span=group_span), 50.0, final=True))
        assert span.context.trace_id != 0 and span.parent is None


def test_a_malformed_carrier_is_no_parent_and_an_unsampled_one_no_span():
    lives = Lives(lambda: RES)
    [span] = tasks(lives.feed(ran(key="a-1", tp="00-zz-1-01"), 50.0, final=True))
    assert span.parent is None and span.context.trace_id == int(GROUP_SPAN.replace("-", ""), 16)
    unsampled = f"00-{TRACE:032x}-{CALL:016x}-00"
    assert tasks(Lives(lambda: RES).feed(ran(key="a-2", tp=unsampled), 50.0, final=True)) == []
    [span] = tasks(Lives(lambda: RES).feed(ran(key="a-3", tp=f"00-{0:032x}-{CALL:016x}-01"), 50.0, final=True))
    assert span.parent is None and span.context.trace_id != 0  # an all-zero trace id is no parent


def test_without_transition_events_a_span_keeps_its_exception_event_only():
    lives = Lives(lambda: RES, transitions=False)
    batch = ran(key="a-1") + ran(key="a-2")[:2] + [
        ("a-2", "processing", "erred", "x", T0 + 2, (W1, None, ("E", ""), None, 0, None), None)]
    spans = {s.attributes["dask.task.key"]: s for s in tasks(lives.feed(batch, 50.0, final=True))}
    assert list(spans["a-1"].events) == []
    assert [(e.name, dict(e.attributes)) for e in spans["a-2"].events] == [("exception", {"exception.message": "E"})]


def test_a_key_that_is_not_a_string_is_named_by_its_str():
    lives = Lives(lambda: RES)
    [span] = tasks(lives.feed(ran(key=("inc-5d1f", 3)), 50.0, final=True))
    assert span.attributes["dask.task.key"] == "('inc-5d1f', 3)" and span.name == "dask.task inc"


def test_the_resource_is_the_processes_current_one_when_the_span_is_built():
    current = [RES]
    lives = Lives(lambda: current[0])
    lives.feed(ran(key="a-1"), 50.0)
    current[0] = Resource({"service.name": "app", "dask.role": "scheduler", "process.pid": 7})
    [span] = tasks(lives.feed([], 50.0 + GRACE))
    assert span.resource is current[0]


def test_a_task_that_only_waited_is_a_span_at_the_final_flush_and_a_waiting_task_goes_on_as_any():
    """A submitted graph's tasks all wait at once: each is held as its first record until its next one
    (what the exporter process holds per task of a big graph); nothing of its span changes."""
    lives = Lives(lambda: RES)
    first = ran()
    waiting = [("waits-1", "released", "waiting", "update-graph-1", T0, None, info())]
    assert lives.feed(first[:1] + waiting, 50.0) == []
    held = list(lives._open.values())
    assert len(held) == 2 and held[0][0] is held[1][0]  # one head for the graph's waiting tasks
    lives.feed(first[1:], 50.5)
    [done] = tasks(lives.feed([], 50.5 + GRACE))
    assert done.attributes["dask.task.state"] == "memory" and done.attributes["dask.worker.address"] == W1
    assert [(a["dask.transition.start"], a["dask.transition.finish"]) for _n, a, _t in transitions(done)] == [
        ("released", "waiting"), ("waiting", "processing"), ("processing", "memory")]
    [left] = tasks(lives.feed([], 60.0, final=True))
    assert left.attributes["dask.task.key"] == "waits-1" and left.attributes["dask.task.state"] == "waiting"
    assert (left.start_time, left.end_time) == (ns(T0), ns(T0))
    assert transitions(left) == [("transition", {"dask.transition.start": "released", "dask.transition.finish": "waiting",
                                                 "dask.stimulus_id": "update-graph-1"}, ns(T0))]


def test_a_task_that_waits_and_queues_again_and_again_keeps_every_transition_in_order():
    """Held in its head while it waits, then a Life past HELD_TRANSITIONS or once it runs: either way its span
    has every transition at its time, and its priority."""
    lives = Lives(lambda: RES)
    first, *rest = ran(t=T0 + 10)
    back = [("waiting", "queued"), ("queued", "waiting"), ("waiting", "waiting"), ("waiting", "queued"),
            ("queued", "waiting"), ("waiting", "queued")]
    for n in (1, 3, 6):  # the head holds 2 and 4 transitions; 7 is past HELD_TRANSITIONS
        key = f"k-{n}"
        recs = [(key, *first[1:])] + [(key, a, b, f"s-{i}", T0 + 10 + 0.1 * (i + 1), None, None)
                                      for i, (a, b) in enumerate(back[:n])]
        recs += [(key, "queued" if back[n - 1][1] == "queued" else "waiting", "processing", "s-run", T0 + 12, W1, None),
                 (key, *rest[1][1:])]
        lives.feed(recs, 50.0)
    out = {s.attributes["dask.task.key"]: s for s in tasks(lives.feed([], 60.0, final=True))}
    for n in (1, 3, 6):
        span = out[f"k-{n}"]
        assert [(a["dask.transition.start"], a["dask.transition.finish"], a["dask.stimulus_id"], t)
                for _n, a, t in transitions(span)] == (
            [("released", "waiting", "update-graph-1", ns(T0 + 10))]
            + [(a, b, f"s-{i}", ns(T0 + 10 + 0.1 * (i + 1))) for i, (a, b) in enumerate(back[:n])]
            + [(back[n - 1][1], "processing", "s-run", ns(T0 + 12)), ("processing", "memory", "task-finished-1", ns(T0 + 13))])
        assert span.attributes["dask.task.priority"] == (0, 1, 7) and span.attributes["dask.worker.address"] == W1


def test_a_big_graphs_tasks_are_held_in_little_after_their_spans_until_forgotten_and_can_run_again():
    """Dask keeps every task of a graph until its result is let go: once a task's span is out, the exporter
    holds its worker and names in under 300 bytes (372 as (worker, info)), and a life after it (the
    worker holding its result died) has the same names and priority."""
    import marshal
    import tracemalloc

    n = 20_000
    carrier = {"traceparent": TP}
    key = lambda i: ("ones-2f8e", i)  # noqa: E731
    records = [(key(i), "released", "waiting", "update-graph-1", T0, None,
                ("ones", "ones-2f8e", GROUP_SPAN, carrier, (0, 1, 1000 + i))) for i in range(n)]
    records += [(key(i), "waiting", "queued", "update-graph-1", T0, None, None) for i in range(n)]
    records += [(key(i), "queued", "processing", "s-run", T0 + 1, W1, None) for i in range(n)]
    records += [(key(i), "processing", "memory", f"task-finished-{i}", T0 + 2, (W1, None, None, 8, 0, 0.001), None)
                for i in range(n)]
    lives = Lives(lambda: RES)
    frames = [marshal.dumps(records[i:i + 1000]) for i in range(0, len(records), 1000)]
    tracemalloc.start()
    try:
        for f in frames:
            lives.feed(marshal.loads(f), 50.0)
        assert len(tasks(lives.feed([], 50.0 + GRACE))) == n
        lives._held = None  # the worker's stored results (dask_memory): not what is measured here
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / n < 300, f"{held / n:.0f} bytes held per task whose span is out"
    lives = Lives(lambda: RES)
    lives.feed([r for r in records if r[0] == key(7)], 50.0)
    assert len(tasks(lives.feed([], 50.0 + GRACE))) == 1
    again = [(key(7), "memory", "released", "worker-died", T0 + 5, None, None),
             (key(7), "released", "waiting", "worker-died", T0 + 5, None, None),
             (key(7), "waiting", "processing", "s-again", T0 + 6, W2, None)]
    [span] = tasks(lives.feed(again, 60.0, final=True))
    assert span.attributes["dask.task.priority"] == (0, 1, 1007) and span.attributes["dask.task.group"] == "ones-2f8e"
    assert span.name == "dask.task ones" and span.parent.span_id == CALL and span.attributes["dask.worker.address"] == W2


def test_a_waiting_task_is_held_in_little_and_goes_on_with_what_it_came_with():
    """A whole graph waits at once: the exporter holds each task's transitions until it runs in under 400 bytes
    as Dask's root tasks come (released -> waiting -> waiting -> queued; 845 as a Life), whatever its priority
    and carrier, and its life is the one the records would have made."""
    import marshal
    import tracemalloc

    n = 20_000
    carrier = {"traceparent": TP}
    records = [(("ones-2f8e", i), "released", "waiting", "update-graph-1", T0 + i * 1e-6, None,
                ("ones", "ones-2f8e", GROUP_SPAN, carrier, (0, 1, 1000 + i))) for i in range(n)]
    for start, finish, dt in (("waiting", "waiting", 0.1), ("waiting", "queued", 0.2)):
        records += [(("ones-2f8e", i), start, finish, "update-graph-1", T0 + i * 1e-6 + dt, None, None)
                    for i in range(n)]
    lives = Lives(lambda: RES)
    frames = [marshal.dumps(records[i:i + 1000]) for i in range(0, len(records), 1000)]  # as the scheduler's frames come
    tracemalloc.start()
    try:
        for f in frames:
            lives.feed(marshal.loads(f), 50.0)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held / n < 400, f"{held / n:.0f} bytes held per waiting task"
    odd = [("p-float", (1, 2.5)), ("p-none", None), ("p-empty", ()), ("p-list", [3, 4]), ("c-none", (0, 1, 2))]
    recs = [(key, "released", "queued" if key == "p-none" else "waiting", f"update-graph-{key}", T0, None,
             ("odd", "odd-1", GROUP_SPAN, None if key == "c-none" else {"traceparent": TP, "x": [1]} if key == "p-list"
              else carrier, p)) for key, p in odd]
    lives.feed(recs, 50.0)
    out = {s.attributes["dask.task.key"]: s for s in tasks(lives.feed([], 60.0, final=True))}
    assert out[str(("ones-2f8e", 7))].attributes["dask.task.priority"] == (0, 1, 1007)
    assert [(a["dask.transition.finish"], t) for _n, a, t in transitions(out[str(("ones-2f8e", 7))])] == [
        ("waiting", ns(T0 + 7e-6)), ("waiting", ns(T0 + 7e-6 + 0.1)), ("queued", ns(T0 + 7e-6 + 0.2))]
    assert out["p-float"].attributes["dask.task.priority"] == (1.0, 2.5)
    assert "dask.task.priority" not in out["p-none"].attributes and "dask.task.priority" not in out["p-empty"].attributes
    assert "dask.task.priority" not in out["p-list"].attributes  # not a tuple: left out, as ever
    assert transitions(out["p-none"]) == [("transition", {"dask.transition.start": "released",
                                                          "dask.transition.finish": "queued",
                                                          "dask.stimulus_id": "update-graph-p-none"}, ns(T0))]
    assert out["c-none"].parent is None and out["p-float"].parent.span_id == CALL
