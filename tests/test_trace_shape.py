"""Trace shaping (evlog/builders/dask_shape.py): a small graph stays one trace; a 6,000-task map is split
by task group into bounded traces linked to the client call's trace, with nothing lost, judged by a plain
OTLP receiver; the run folder written beside it shows the map as one computation. (At the default of 2,000
tasks a trace the map makes three batches; unshaped, it would be one trace of 12,001 spans and about 9 MB,
over the backend limits checked below.)"""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented
from plain_receiver import PlainReceiver, attrs

N = 6000
FAILING = {1499, 2999, 4499, 5999}

APP = r'''
import json
from dask import delayed
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

def total(*xs):
    return sum(xs)

def maybe_fail(x):
    if x %% 1500 == 1499:
        raise ValueError(f"bad {x}")
    return x

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        xs = [delayed(inc)(i) for i in range(160)]
        parts = [delayed(total)(*xs[i:i + 20]) for i in range(0, 160, 20)]
        small = delayed(total)(*parts).compute()  # 169 tasks
        done = client.gather(client.map(maybe_fail, range(%d)), errors="skip")
        print(json.dumps({"small": small, "done": len(done)}), flush=True)
''' % N


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shape")
    (tmp / "app.py").write_text(APP)
    with PlainReceiver() as r:
        env = evlog_env({**r.env(), "OTEL_TRACES_EXPORTER": "otlp,file", "EVLOG_RUN_DIR": str(tmp / "run"),
                         "EVLOG_SUMMARY": "false"})
        proc = run_instrumented([PYTHON, str(tmp / "app.py")], env=env, timeout=400, cwd=str(tmp))
        assert proc.returncode == 0, proc.stderr.decode()[-3000:]
        r.wait_for(lambda: sum(1 for _res, s in r.spans() if s.name.startswith("dask.execute")) >= N + 169,
                   timeout=60)
        out = json.loads(proc.stdout.decode().splitlines()[-1])
        assert out == {"small": sum(range(1, 161)), "done": N - len(FAILING)}
        yield r, tmp / "run"


def _computes(spans):
    return {s.trace_id: s for _res, s in spans if s.name == "dask.compute"}


@pytest.mark.slow  # the 6,000-task map
def test_a_small_graph_is_one_trace_with_all_its_execute_spans(shaped):
    r, _run = shaped
    spans = r.spans()
    [graph] = [s for s in _computes(spans).values() if attrs(s.attributes)["dask.client.method"] == "get"]
    mine = [s for _res, s in spans if s.trace_id == graph.trace_id]
    names = Counter(s.name.split(" ")[0] for s in mine)
    assert names["dask.execute"] == 169 and names["dask.task"] == 169, names
    assert not names["dask.batch"] and not names["dask.group"]
    assert all(s.parent_span_id == graph.span_id for s in mine if s.name.startswith(("dask.task", "dask.execute")))


@pytest.mark.slow  # the 6,000-task map
def test_every_task_of_the_big_map_arrives_in_traces_within_backend_limits(shaped):
    r, _run = shaped
    spans = r.spans()
    [big] = [s for s in _computes(spans).values() if attrs(s.attributes)["dask.client.method"] == "map"]
    keys = Counter(attrs(s.attributes)["dask.task.key"] for _res, s in spans
                   if s.name == "dask.execute maybe_fail")
    assert len(keys) == N and set(keys.values()) == {1}
    per_trace: dict = defaultdict(lambda: [0, 0])
    for _res, s in spans:
        t = per_trace[s.trace_id]
        t[0] += 1
        t[1] += s.ByteSize()
    assert len(per_trace) > N // 2000
    worst = max(per_trace.values())
    assert all(n <= 10_000 and size <= 5_000_000 for n, size in per_trace.values()), worst
    # every task span is in, or linked to, the client call's trace: its batch's root links to a group
    # span there, a child of the client call's span
    groups = {s.span_id: s for _res, s in spans if s.name == "dask.group maybe_fail"}
    assert len(groups) == 1
    [group] = groups.values()
    assert group.trace_id == big.trace_id and group.parent_span_id == big.span_id
    batches = {s.trace_id: s for _res, s in spans if s.name == "dask.batch maybe_fail"}
    for b in batches.values():
        assert not b.parent_span_id and [(l.trace_id, l.span_id) for l in b.links] == [(big.trace_id, group.span_id)]
    for _res, s in spans:
        if s.name in ("dask.task maybe_fail", "dask.execute maybe_fail"):
            assert s.trace_id in batches and s.parent_span_id == batches[s.trace_id].span_id, s.name
    # the group span counts its tasks exactly and links to every batch
    a = attrs(group.attributes)
    assert a["dask.group.tasks"] == N and a["dask.group.memory"] == N - len(FAILING)
    assert a["dask.group.erred"] == len(FAILING) and a["dask.group.batches"] == len(batches)
    assert a["dask.group.compute.count"] == N  # every task ran (the erred ones too)
    assert 0 <= a["dask.group.compute.min"] <= a["dask.group.compute.p50"] <= a["dask.group.compute.max"]
    assert sum(attrs(b.attributes)["dask.batch.tasks"] for b in batches.values()) == N
    assert {l.span_id for l in group.links} >= {b.span_id for b in batches.values()}


@pytest.mark.slow  # the 6,000-task map
def test_erred_tasks_of_the_big_map_are_links_on_its_group_span(shaped):
    r, _run = shaped
    spans = r.spans()
    [group] = [s for _res, s in spans if s.name == "dask.group maybe_fail"]
    assert group.status.code == 2 and f"{len(FAILING)} of {N}" in group.status.message
    erred = {s.span_id: s for _res, s in spans if s.name == "dask.task maybe_fail" and s.status.code == 2}
    assert len(erred) == len(FAILING)
    linked = {l.span_id: attrs(l.attributes) for l in group.links if "dask.task.key" in attrs(l.attributes)}
    assert set(linked) == set(erred)
    assert all(a["dask.task.key"].startswith("maybe_fail-") for a in linked.values())
    assert all("ValueError" in a["exception.message"] for a in linked.values())


@pytest.mark.slow  # the 6,000-task map
def test_evlog_view_shows_the_big_map_as_one_computation_with_all_its_tasks(shaped, capsys):
    from evlog import cli
    from evlog.data.panels import gantt as gantt_panel
    from evlog.data.run_reader import RunFolder
    from evlog.data.store import Store
    from evlog.report.model import build

    _r, run = shaped
    store = Store(None)
    RunFolder(str(run)).load_into(store)
    summary = store.summary()
    assert summary["computations"] == 2 and summary["traces"] > N // 2000
    gantt = gantt_panel.gantt(store)
    assert gantt["total"] == N + 169
    rows = read_run_folder(str(run))["spans"]
    comps = {c.method: c for c in build(rows)}
    assert set(comps) == {"get", "map"}
    assert len(comps["map"].tasks) == N and len(comps["get"].tasks) == 169
    assert sum(1 for t in comps["map"].tasks.values() if t.executions) == N
    key = next(iter(comps["map"].tasks))
    story = [(e["start"], e["finish"]) for e in store.story(key) if e["start"] is not None]
    assert story[0] == ("released", "waiting") and {("processing", "memory"), ("processing", "erred")} & set(story)
    assert cli.main(["summary", str(run)]) == 0
    assert "(2 Dask computations)" in capsys.readouterr().out


GROUPS_APP = r'''
from dask import delayed
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

def total(*xs):
    return sum(xs)

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        xs = [delayed(inc)(i) for i in range(120)]
        parts = [delayed(total)(*xs[i:i + 10]) for i in range(0, 120, 10)]
        assert delayed(total)(*parts).compute() == sum(range(1, 121))  # 133 tasks
'''


def test_a_graph_over_the_limit_is_split_per_task_group_into_batches_of_at_most_the_limit(tmp_path):
    (tmp_path / "app.py").write_text(GROUPS_APP)
    with PlainReceiver() as r:
        env = evlog_env({**r.env(), "EVLOG_SUMMARY": "false", "EVLOG_DASK_TRACE_TASKS": "50"})
        proc = run_instrumented([PYTHON, str(tmp_path / "app.py")], env=env, timeout=120, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr.decode()[-3000:]
        r.wait_for(lambda: sum(1 for _res, s in r.spans() if s.name.startswith("dask.group")) >= 2, timeout=60)
        spans = [s for _res, s in r.spans()]
    [compute] = [s for s in spans if s.name == "dask.compute"]
    groups = {s.span_id: s for s in spans if s.name.startswith("dask.group")}
    assert sorted(s.name for s in groups.values()) == ["dask.group inc", "dask.group total"]
    assert all(g.trace_id == compute.trace_id and g.parent_span_id == compute.span_id for g in groups.values())
    assert {attrs(g.attributes)["dask.task.prefix"]: attrs(g.attributes)["dask.group.tasks"]
            for g in groups.values()} == {"inc": 120, "total": 13}
    batches = {s.trace_id: s for s in spans if s.name.startswith("dask.batch")}
    sizes = Counter()
    for b in batches.values():
        [link] = b.links
        g = groups[link.span_id]
        assert b.name.split(" ")[1] == attrs(g.attributes)["dask.task.prefix"] and link.trace_id == compute.trace_id
        sizes[b.name] += 1
        assert attrs(b.attributes)["dask.batch.tasks"] <= 50
    assert sizes == {"dask.batch inc": 3, "dask.batch total": 1}
    tasks = [s for s in spans if s.name.startswith(("dask.task ", "dask.execute "))]
    assert len(tasks) == 2 * 133
    for s in tasks:  # each in its group's batch trace, under the batch span
        b = batches[s.trace_id]
        assert s.parent_span_id == b.span_id and s.name.split(" ")[1] == b.name.split(" ")[1]
    for s in spans:  # dependencies fetched from the other worker: in the trace of the task that needed them
        if s.name == "dask.transfer":
            assert s.trace_id in batches
