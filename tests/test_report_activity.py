"""evlog/report/activity.py: Dask's fine performance metrics in the report, from decoded metric point rows
as otlp_decode makes them (no cluster): each series' last value, summed over schedulers; a prefix's figures
shared out between the computations that ran it; its line and its advice."""
from __future__ import annotations

from evlog.report import activity

SCHED_A = {"service.instance.id": "a", "dask.role": "scheduler"}
SCHED_B = {"service.instance.id": "b", "dask.role": "scheduler"}


def point(value, prefix="clean", act="thread-noncpu", t=2, start=1, resource=SCHED_A, span=None, unit="s"):
    a = {"dask.context": "execute", "dask.task.prefix": prefix, "dask.activity": act}
    if span:
        a["dask.span.id"], a["dask.span.name"] = span, ["etl"]
    return {"name": "dask.worker.time", "unit": unit, "time": t, "start": start, "value": value, "attributes": a,
            "resource": resource}


def comp(name, **prefixes):
    return {"name": name, "advice": [], "prefixes": {p: {"compute_s": c, "count": n} for p, (c, n) in prefixes.items()}}


def test_the_last_value_of_each_series_counts_summed_over_schedulers_and_their_lifetimes():
    values = activity.latest([point(1.0, t=2), point(3.0, t=5), point(2.0, t=3),  # scheduler a: 3.0 last
                              point(0.5, resource=SCHED_B),  # another scheduler
                              point(0.25, start=9, t=10)])  # a later scheduler of process a
    assert activity.figures(values)["execute"] == {"clean": {"thread-noncpu": 3.75}}


def test_a_prefix_of_two_computations_is_shared_out_by_their_compute_time_and_advised_on():
    rep = {"computations": [comp("map a", clean=(3.0, 30), load=(1.0, 10)), comp("map b", clean=(1.0, 10))],
           "advice": ["earlier advice"]}
    points = [point(3.0), point(1.0, act="thread-cpu"), point(0.4, prefix="load", act="serialize"),
              point(0.6, prefix="load", act="thread-cpu"), point(2.0, span="s1")]
    spans = [{"name": "dask.span etl", "start": 1_000_000_000, "end": 3_500_000_000,
              "attributes": {"dask.span.id": "s1", "dask.span.name": ["etl"]}}]
    activity.attach(rep, spans, points)
    a, b = rep["computations"]
    assert a["prefixes"]["clean"]["activity_s"] == {"thread-noncpu": 2.25, "thread-cpu": 0.75}
    assert b["prefixes"]["clean"]["activity_s"] == {"thread-noncpu": 0.75, "thread-cpu": 0.25}
    assert a["prefixes"]["load"]["activity_s"] == {"thread-cpu": 0.6, "serialize": 0.4}  # one computation: exact
    assert activity.line("clean", a["prefixes"]["clean"]["activity_s"]) == \
        "clean: 75% off the CPU (I/O, sleep, or waiting for the GIL or a free core); 25% on the CPU"
    assert [x for x in a["advice"] if "serialize" in x] == [
        "map a: prefix load is 40% serialize: return smaller results or keep them on the workers (persist, and "
        "reduce there before gathering)"]
    assert any("prefix clean is 75% off the CPU" in x for x in a["advice"])
    assert len(b["advice"]) == 1  # its share of clean: 1 s, off the CPU
    assert activity.advice("c", "p", {"thread-noncpu": 0.45}) == []  # below the advice's floor (ADVICE_MIN_S)
    assert rep["advice"] == ["earlier advice"] + a["advice"] + b["advice"]
    [s] = rep["dask_spans"]
    assert (s["name"], s["wall_s"], s["execute_s"], s["prefixes"]) == (["etl"], 2.5, 2.0, {"clean": {"thread-noncpu": 2.0}})


def test_a_run_without_fine_metrics_reports_none():
    rep = {"computations": [comp("map a", clean=(3.0, 30))], "advice": []}
    activity.attach(rep, [], [])
    assert "activity_s" not in rep["computations"][0]["prefixes"]["clean"]
    assert rep["dask_spans"] == [] and rep["advice"] == []
    assert activity.line("x", {}) == ""
