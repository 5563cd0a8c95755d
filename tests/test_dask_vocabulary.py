"""Dask's own vocabulary under evlog: the spans a program names with ``distributed.span`` and Dask's fine
performance metrics, on real clusters with 2 worker processes under evlog-instrument, judged by a plain
OTLP receiver (grpcio and the opentelemetry-proto services, nothing of evlog).

The program nests ``span("etl")`` > ``span("load")`` (a prefix that sleeps) and ``span("clean")`` (a
CPU-bound prefix), then ``span("reduce")``, and prints what Dask itself says at the end: its spans' ids,
names, times and ``Span.cumulative_worker_metrics``, and ``Scheduler.cumulative_worker_metrics`` read with
``client.run_on_scheduler`` once the workers' heartbeats have brought every task's figures. The same
figures must arrive as OTel data; a cluster whose program names no span gets no span telemetry; a
``dask scheduler`` + ``dask worker`` cluster (the CLI) gives the same.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import (
    CHROMIUM,
    PYTHON,
    Browser,
    evlog_env,
    run_instrumented,
    start_instrumented,
    start_view,
    stop_processes,
    stop_view,
    wait_for_scheduler_file,
)
from plain_receiver import PlainReceiver, attrs

DASK = os.path.join(os.path.dirname(sys.executable), "dask")
MARK = "DASK-SAYS "  # the program's line with Dask's own figures (not JSON at the start: no console metadata)

WORK = r'''
import json, time
from distributed import span

def nap(x):
    time.sleep(0.25)
    return x

def crunch(x):
    t = time.thread_time()
    while time.thread_time() - t < 0.25:
        pass
    return x

def dasks_own(dask_scheduler):
    """What Dask says: its figures, as JSON can carry them."""
    ext = dask_scheduler.extensions["spans"]
    return {"wide": [[list(k) if isinstance(k, tuple) else k, v]
                     for k, v in dask_scheduler.cumulative_worker_metrics.items()],
            "spans": {sid: {"name": list(sp.name), "start": sp.start, "stop": sp.stop, "done": sp.done,
                            "figures": [[list(k), v] for k, v in sp.cumulative_worker_metrics.items()]}
                      for sid, sp in ext.spans.items()}}

def settled(client):
    """Dask's figures once the workers' heartbeats have brought them all: the execute entries unchanged
    over 2 s (4 heartbeats of a small cluster), 60 s at most."""
    last, since, deadline = None, time.monotonic(), time.monotonic() + 60
    while time.monotonic() < deadline:
        now = client.run_on_scheduler(dasks_own)
        execute = sorted((str(k), v) for k, v in now["wide"] if isinstance(k, list) and k[0] == "execute")
        if execute != last:
            last, since = execute, time.monotonic()
        elif time.monotonic() - since >= 2:
            return now
        time.sleep(0.25)
    raise SystemExit("Dask's figures never settled: " + repr(last))

def run(client, named=True):
    if named:
        with span("etl") as etl:
            with span("load") as load:
                client.gather(client.map(nap, range(6)))
            with span("clean") as clean:
                b = client.gather(client.map(crunch, range(6)))
        with span("reduce") as red:
            client.submit(sum, b).result()
        ids = {"etl": etl, "load": load, "clean": clean, "reduce": red}
    else:
        b = client.gather(client.map(nap, range(4)))
        client.submit(sum, b).result()
        ids = {}
    out = settled(client)
    out["ids"] = ids
    print("''' + MARK + r'''" + json.dumps(out), flush=True)
'''

LOCAL_APP = WORK + r'''
import sys
from distributed import Client, LocalCluster

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        run(client, named=sys.argv[1] == "named")
'''

CLI_CLIENT = WORK + r'''
import sys
from distributed import Client

if __name__ == "__main__":
    with Client(scheduler_file=sys.argv[1], timeout=60) as client:
        run(client)
'''


def said(proc) -> dict:
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-2000:]}\n{proc.stderr.decode(errors='replace')[-3000:]}"
    return json.loads([line for line in out.splitlines() if line.startswith(MARK)][-1][len(MARK):])


def dask_spans(r) -> list:
    return [(res, s) for res, s in r.spans() if s.name.startswith("dask.span ")]


def last_points(r) -> dict:
    """(metric name, attributes as sorted items) -> the latest value received, of the dask.worker.* sums."""
    out: dict = {}
    for _res, m in r.metrics():
        if m.name not in ("dask.worker.time", "dask.worker.bytes", "dask.worker.count", "dask.worker.value",
                          "dask.worker.digest"):
            continue
        assert m.sum.is_monotonic and m.sum.aggregation_temporality == 2  # CUMULATIVE
        for p in m.sum.data_points:
            k = (m.name, tuple(sorted(attrs(p.attributes).items())))
            v = p.as_double if p.HasField("as_double") else p.as_int
            if k not in out or p.time_unix_nano >= out[k][0]:
                out[k] = (p.time_unix_nano, v)
    return {k: v for k, (_t, v) in out.items()}


def expected_point(key, span=None) -> tuple:
    """The (metric, attributes) a key of Dask's cumulative_worker_metrics must arrive as (docs/conventions.md)."""
    if not isinstance(key, list):
        return "dask.worker.digest", (("dask.digest", key),)
    context, *middle, activity, unit = key
    a = {"dask.context": context}
    if context == "execute":
        a["dask.task.prefix"] = middle.pop(0)
    a["dask.activity"] = "/".join(middle + [activity])
    metric = {"seconds": "dask.worker.time", "bytes": "dask.worker.bytes", "count": "dask.worker.count"}.get(unit)
    if metric is None:
        metric, a["dask.unit"] = "dask.worker.value", unit
    if span is not None:
        a["dask.span.id"], a["dask.span.name"] = span
    return metric, tuple(sorted(a.items()))


def close_enough(got, want) -> bool:
    return got is not None and abs(got - want) <= max(0.05, 0.1 * abs(want))


def _run_local(tmp, r, named: bool) -> dict:
    (tmp / "app.py").write_text(LOCAL_APP)
    env = evlog_env({**r.env(), "EVLOG_SUMMARY": "false", "EVLOG_RUN_DIR": str(tmp / "run"),
                     "OTEL_TRACES_EXPORTER": "otlp,file", "OTEL_METRICS_EXPORTER": "otlp,file",
                     "OTEL_LOGS_EXPORTER": "otlp,file"})
    return said(run_instrumented([PYTHON, str(tmp / "app.py"), "named" if named else "plain"], env=env, cwd=str(tmp),
                                 timeout=240))


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("vocabulary")
    with PlainReceiver() as r:
        dask_says = _run_local(tmp, r, named=True)
        # the launcher returns once its exporter process has flushed: everything has arrived
        yield r, dask_says, tmp / "run"


@pytest.mark.slow
def test_each_dask_span_is_a_span_nested_as_dask_nests_them_with_dasks_own_times(local):
    r, dask_says, _run = local
    ids = dask_says["ids"]
    got = {attrs(s.attributes)["dask.span.id"]: (res, s) for res, s in dask_spans(r)}
    assert set(got) == set(ids.values()), (sorted(s.name for _r, s in dask_spans(r)), ids)
    by = {name: got[sid][1] for name, sid in ids.items()}
    for name, s in by.items():
        want = dask_says["spans"][ids[name]]
        assert s.name == f"dask.span {name}"
        assert attrs(s.attributes) == {"dask.span.id": ids[name], "dask.span.name": tuple(want["name"])}
        assert abs(s.start_time_unix_nano / 1e9 - want["start"]) <= 0.25, (name, s.start_time_unix_nano, want)
        assert abs(s.end_time_unix_nano / 1e9 - want["stop"]) <= 0.25, (name, s.end_time_unix_nano, want)
        assert got[ids[name]][0]["dask.role"] == "scheduler"
    etl, load, clean, reduce = by["etl"], by["load"], by["clean"], by["reduce"]
    assert load.parent_span_id == clean.parent_span_id == etl.span_id and not etl.parent_span_id
    assert load.trace_id == clean.trace_id == etl.trace_id != reduce.trace_id and not reduce.parent_span_id
    # each links to the client call that put tasks in it; etl's own tasks: none
    computes = {(s.trace_id, s.span_id): s for _res, s in r.spans() if s.name == "dask.compute"}
    for s, method in ((load, "map"), (clean, "map"), (reduce, "submit")):
        [link] = s.links
        assert attrs(computes[(link.trace_id, link.span_id)].attributes)["dask.client.method"] == method
    assert not etl.links


@pytest.mark.slow
def test_each_task_span_names_its_innermost_dask_span(local):
    r, dask_says, _run = local
    ids = dask_says["ids"]
    tasks = [s for _res, s in r.spans() if s.name.startswith("dask.task ")]
    by_prefix: dict = {}
    for s in tasks:
        a = attrs(s.attributes)
        by_prefix.setdefault(a["dask.task.prefix"], set()).add(a.get("dask.span.id"))
    assert by_prefix == {"nap": {ids["load"]}, "crunch": {ids["clean"]}, "sum": {ids["reduce"]}}
    assert sum(1 for s in tasks if s.name in ("dask.task nap", "dask.task crunch")) == 12


@pytest.mark.slow
def test_fine_performance_metrics_agree_with_dasks_own_figures(local):
    r, dask_says, _run = local
    got = last_points(r)
    wrong = []
    for key, value in dask_says["wide"]:
        metric, a = expected_point(key)
        have = got.get((metric, a))
        if isinstance(key, list) and not close_enough(have, value):
            wrong.append((key, value, have))
        elif not isinstance(key, list) and (have is None or have < value - 1e-9):  # still growing after the read
            wrong.append((key, value, have))
    assert not wrong, wrong
    assert got[expected_point(["execute", "nap", "thread-noncpu", "seconds"])] > 1.0  # 6 x 0.25 s asleep
    assert got[expected_point(["execute", "crunch", "thread-cpu", "seconds"])] > 1.0  # 6 x 0.25 s of CPU
    names = {name: sid for name, sid in dask_says["ids"].items()}
    per_span = 0
    for name, sid in names.items():
        want = dask_says["spans"][sid]
        for key, value in want["figures"]:
            if key == ["execute", "N/A", "idle or other spans", "seconds"]:
                assert not any(dict(a).get("dask.activity") == "idle or other spans" for _m, a in got)
                continue
            have = got.get(expected_point(key, (sid, tuple(want["name"]))))
            assert close_enough(have, value), (name, key, value, have)
            per_span += 1
    assert per_span >= 8
    # the default span Dask made for evlog-free calls (none here) would have no figures of its own
    span_ids = {dict(a).get("dask.span.id") for _m, a in got} - {None}
    assert span_ids == set(names.values())


# A span that gets tasks again after a reading saw it done, and finishes them before the next reading,
# before the program goes on: readings every 5 s from the first graph (load's), one at 5 s sees etl done with
# load's stop, then clean (0.6 s of tasks) and reduce come at 6.5-7.5 s, before the next one.
LATE_STOP_APP = WORK + r'''
from distributed import Client, LocalCluster

def doze(x, s):
    time.sleep(s)
    return x

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        t0 = time.monotonic()
        with span("etl") as etl:
            with span("load") as load:
                client.gather(client.map(doze, range(2), s=0.1))
            time.sleep(max(0.0, t0 + 6.5 - time.monotonic()))
            with span("clean") as clean:
                client.gather(client.map(doze, range(2), s=0.6))
        with span("reduce") as red:
            client.submit(sum, [1, 2]).result()
        out = client.run_on_scheduler(dasks_own)
        out["ids"] = {"etl": etl, "load": load, "clean": clean, "reduce": red}
        print("''' + MARK + r'''" + json.dumps(out), flush=True)
'''


@pytest.mark.slow
def test_a_span_that_finishes_more_tasks_between_two_readings_ends_when_its_last_task_did(tmp_path):
    (tmp_path / "app.py").write_text(LATE_STOP_APP)
    with PlainReceiver() as r:
        env = evlog_env({**r.env(), "EVLOG_SUMMARY": "false", "OTEL_METRIC_EXPORT_INTERVAL": "5000"})
        dask_says = said(run_instrumented([PYTHON, str(tmp_path / "app.py")], env=env, cwd=str(tmp_path),
                                          timeout=240))
        got = {attrs(s.attributes)["dask.span.id"]: s for _res, s in dask_spans(r)}
    ids = dask_says["ids"]
    assert set(got) == set(ids.values())
    for name, sid in ids.items():
        want = dask_says["spans"][sid]
        assert abs(got[sid].end_time_unix_nano / 1e9 - want["stop"]) <= 0.25, (name, got[sid].end_time_unix_nano, want)


@pytest.mark.slow
def test_a_cluster_whose_program_names_no_span_gets_no_span_telemetry(tmp_path):
    with PlainReceiver() as r:
        dask_says = _run_local(tmp_path, r, named=False)
        spans = r.spans()
        got = last_points(r)
    assert [s for s in dask_says["spans"].values() if s["name"] == ["default"]]  # Dask made its default span
    assert not [s for _res, s in spans if s.name.startswith("dask.span")]
    tasks = [s for _res, s in spans if s.name.startswith("dask.task ")]
    assert len(tasks) == 5 and not [s for s in tasks if "dask.span.id" in attrs(s.attributes)]
    assert not [a for _m, a in got if "dask.span.id" in dict(a)]
    assert got[expected_point(["execute", "nap", "thread-noncpu", "seconds"])] > 0.5  # the figures are there


@pytest.mark.slow
def test_dask_scheduler_and_worker_processes_of_the_cli_give_the_same(tmp_path):
    """`dask scheduler` + 2 `dask worker` under evlog-instrument, each its own launcher, and a client."""
    sched_file = str(tmp_path / "scheduler.json")
    (tmp_path / "client.py").write_text(CLI_CLIENT)
    common = ["--scheduler-file", sched_file, "--host", "127.0.0.1", "--dashboard-address", ":0"]
    with PlainReceiver() as r, open(tmp_path / "cluster.log", "wb") as log:
        env = evlog_env({**r.env(), "EVLOG_SUMMARY": "false"})
        procs = [start_instrumented([DASK, "scheduler", "--port", "0"] + common, env, log)]
        try:
            wait_for_scheduler_file(sched_file, procs[0], tmp_path / "cluster.log")
            for name in ("w1", "w2"):
                procs.append(start_instrumented([DASK, "worker", "--nthreads", "1", "--name", name] + common, env, log))
            dask_says = said(run_instrumented([PYTHON, str(tmp_path / "client.py"), sched_file], env=env, timeout=240))
        finally:
            stop_processes(procs[1:])  # workers first, then the scheduler: its close sends its last readings
            stop_processes(procs[:1])
        ids = dask_says["ids"]
        r.wait_for(lambda: len(dask_spans(r)) >= 4, timeout=30)
        got = {attrs(s.attributes)["dask.span.id"]: s for _res, s in dask_spans(r)}
        assert set(got) == set(ids.values())
        assert got[ids["load"]].parent_span_id == got[ids["etl"]].span_id
        for name, sid in ids.items():
            want = dask_says["spans"][sid]
            assert abs(got[sid].end_time_unix_nano / 1e9 - want["stop"]) <= 0.25, name
        points = last_points(r)
    for key, value in dask_says["wide"]:
        if isinstance(key, list):
            assert close_enough(points.get(expected_point(key)), value), (key, value)
    tasks = [attrs(s.attributes) for _res, s in r.spans() if s.name == "dask.task crunch"]
    assert len(tasks) == 6 and {a["dask.span.id"] for a in tasks} == {ids["clean"]}


@pytest.mark.slow
def test_the_report_says_where_each_prefixs_time_went_and_lists_the_dask_spans(local):
    _r, dask_says, run = local
    proc = subprocess.run([PYTHON, "-m", "evlog.cli", "report", str(run), "--format", "json"], capture_output=True,
                          timeout=120, env=evlog_env())
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    rep = json.loads(proc.stdout)
    prefixes = {p: s for c in rep["computations"] for p, s in c["prefixes"].items()}
    nap, crunch = prefixes["nap"]["activity_s"], prefixes["crunch"]["activity_s"]
    assert nap["thread-noncpu"] > nap["thread-cpu"] and nap["thread-noncpu"] >= 1.0  # 6 x 0.25 s asleep
    assert crunch["thread-cpu"] >= 1.0  # 6 x 0.25 s of CPU (off-CPU too when the host is busy)
    wide = {tuple(k): v for k, v in dask_says["wide"] if isinstance(k, list)}
    assert close_enough(nap["thread-noncpu"], wide[("execute", "nap", "thread-noncpu", "seconds")])
    ids = dask_says["ids"]
    spans = {s["id"]: s for s in rep["dask_spans"]}
    assert set(spans) == set(ids.values())
    for name, sid in ids.items():
        want = dask_says["spans"][sid]
        assert abs(spans[sid]["wall_s"] - (want["stop"] - want["start"])) <= 0.25, name
    assert spans[ids["load"]]["prefixes"].keys() == {"nap"}
    assert spans[ids["etl"]]["prefixes"].keys() == {"nap", "crunch"}  # its tree's figures
    assert any("prefix nap is" in a and "off the CPU" in a for a in rep["advice"])
    # a client call is named with the Dask span its tasks ran in
    names = [c["name"] for c in rep["computations"]]
    assert {"map nap in etl / load (6 tasks)", "map crunch in etl / clean (6 tasks)", "submit sum in reduce"} <= \
        set(names), names
    text = subprocess.run([PYTHON, "-m", "evlog.cli", "report", str(run)], capture_output=True, timeout=120,
                          env=evlog_env()).stdout.decode()
    assert "nap: " in text and "% off the CPU" in text and "etl / clean" in text
    summary = subprocess.run([PYTHON, "-m", "evlog.cli", "summary", str(run)], capture_output=True, timeout=60,
                             env=evlog_env()).stdout.decode()
    assert "Dask spans" in summary and "etl / load" in summary


@pytest.mark.slow
@pytest.mark.browser
def test_the_fine_performance_metrics_panel_and_the_span_bands_draw_in_a_browser(local):
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    _r, dask_says, run = local
    ids = dask_says["ids"]
    proc, url = start_view(str(run), "--no-follow")
    browser = Browser()
    try:
        browser.goto(url)
        browser.wait_js("document.querySelectorAll('#fine .fine-row').length >= 3", what="the panel's bars")
        rows = browser.js("Array.from(document.querySelectorAll('#fine .fine-row')).map(r => r.dataset.name)")
        assert set(rows) == {"crunch", "nap", "sum", "get-data"}, rows
        nap = browser.js("Array.from(document.querySelectorAll('#fine .fine-row[data-name=nap] i[data-activity]'))"
                         ".map(i => [i.dataset.activity, parseFloat(i.style.width)])")
        assert max(nap, key=lambda x: x[1])[0] == "thread-noncpu", nap
        assert browser.wait_js("+document.getElementById('gantt-section').dataset.daskBands", what="the bands") == 4
        # narrowed to Dask's span "load": its tree has nap only, and no gather-dep/get-data figures
        browser.js("(() => { const s = document.getElementById('fine-span'); s.value = %r; "
                   "s.dispatchEvent(new Event('change')); })()" % ids["load"])
        browser.wait_js("document.getElementById('fine').dataset.span === %r" % ids["load"], what="span 'load'")
        rows = browser.js("Array.from(document.querySelectorAll('#fine .fine-row')).map(r => r.dataset.name)")
        assert rows == ["nap"], rows
        listed = browser.js("document.getElementById('fine-spans').textContent")
        assert "etl / clean" in listed and "reduce" in listed
        assert not [m for m in browser.console if m.startswith("EXCEPTION")], browser.console
    finally:
        browser.close()
        stop_view(proc)


HOLDS_APP = r'''
import json, time
from distributed import Client, LocalCluster, span
from distributed.scheduler import TaskGroup, TaskState
from distributed.spans import Span

def inc(x):
    return x + 1

def dask_objects(obj, seen, path, out, depth=0):
    """Dask objects reachable from ``obj`` (not through the scheduler itself, which the plugin is given)."""
    if id(obj) in seen or depth > 12:
        return
    seen.add(id(obj))
    if isinstance(obj, (TaskGroup, TaskState, Span)):
        out.append(path)
        return
    for k, v in (vars(obj).items() if hasattr(obj, "__dict__") else []):
        if k not in ("scheduler", "_handle"):  # the Scheduler it reads; the event loop's timer
            dask_objects(v, seen, path + "." + k, out, depth + 1)
    for k in getattr(type(obj), "__slots__", ()):
        if hasattr(obj, k):
            dask_objects(getattr(obj, k), seen, path + "." + k, out, depth + 1)
    if isinstance(obj, dict):
        for k, v in obj.items():
            dask_objects(k, seen, path + "[key]", out, depth + 1)
            dask_objects(v, seen, path + "[" + repr(k)[:40] + "]", out, depth + 1)
    elif isinstance(obj, (list, tuple, set, frozenset)) or type(obj).__name__ == "deque":
        for v in list(obj):
            dask_objects(v, seen, path + "[]", out, depth + 1)

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        with span("outer"):
            with span("inner"):
                client.gather(client.map(inc, range(20)))
        client.gather(client.map(inc, range(20, 30)))
        readings = cluster.scheduler.plugins["evlog-telemetry"].readings
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(  # the workers' heartbeats brought the figures
                isinstance(k, tuple) and k[0] == "execute" for k in cluster.scheduler.cumulative_worker_metrics):
            time.sleep(0.1)
        cluster.scheduler.loop.add_callback(readings.read)  # one more reading, on the event loop
        client.run_on_scheduler(lambda dask_scheduler: None)
        found = []
        dask_objects(readings, set(), "readings", found)
        print("''' + MARK + r'''" + json.dumps({"found": found, "spans": len(readings._spans),
                                                 "keys": len(readings._keys)}), flush=True)
'''


@pytest.mark.slow
def test_the_readings_keep_no_dask_object(tmp_path):
    """Reading copies ids, names and numbers: nothing of Dask's (TaskGroup, TaskState, Span) is held."""
    (tmp_path / "app.py").write_text(HOLDS_APP)
    out = said(run_instrumented([PYTHON, str(tmp_path / "app.py")], env=evlog_env({"EVLOG_SUMMARY": "false",
                                "EVLOG_RUN_DIR": str(tmp_path / "run")}), cwd=str(tmp_path), timeout=180))
    assert out["spans"] == 2 and out["keys"] > 4, out  # it did read: the two named spans and the figures
    assert out["found"] == [], out["found"]
