"""Dask distributed under evlog: real clusters with worker processes, checked at the OTLP receiver
and in a run folder.

- A LocalCluster(processes=True) app runs once (module fixture ``local``) and exports over OTLP/gRPC
  to a receiver; the tests below it each check one behaviour on what arrived.
- A `dask scheduler` and two `dask worker` processes started through the dask CLI under
  evlog-instrument write to one run folder, with an evlog client (whose worker is SIGKILLed under a
  task) and a client without evlog (``cli`` fixture).
- EVLOG_DASK_TRANSITIONS=false and failures inside evlog's hooks.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented, wait_for_scheduler_file
from helpers import start_instrumented as _start
from helpers import stop_processes as _stop
from receiver import CollectingReceiver

DASK = os.path.join(os.path.dirname(sys.executable), "dask")

LOCAL_APP = r'''
import json, os
import dask
from distributed import Client, LocalCluster, get_worker, wait
from opentelemetry import trace
import evlog

def inc(x):
    with trace.get_tracer("app").start_as_current_span("user.inside"):
        get_worker().log_event("app.topic", {"x": x})
    return x + 1

def add(*xs):
    return sum(xs)

def boom(x):
    raise ValueError(f"boom {x}")

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        a, b = sorted(client.scheduler_info()["workers"])
        with trace.get_tracer("app").start_as_current_span("app.root") as root:
            with dask.annotate(workers=[a]):
                xs = [dask.delayed(inc)(i, dask_key_name=f"inc-{i}") for i in (0, 1)]
            with dask.annotate(workers=[b]):
                xs += [dask.delayed(inc)(i, dask_key_name=f"inc-{i}") for i in (2, 3)]
            total = dask.delayed(add)(*xs, dask_key_name="total")
            result = total.compute()
        failed = client.submit(boom, 1, key="boom-1")
        wait(failed)
        client.log_event("client.topic", {"hello": 1})
        dask_story = [(t[1], t[2]) for t in cluster.scheduler.story("total") if t[0] == "total"]
        from evlog.observed import lifecycle
        lifecycle.flush(10)  # one metric collection while the workers are still there
        print(json.dumps({
            "result": result,
            "pid": os.getpid(),
            "workers": [a, b],
            "trace_id": format(root.get_span_context().trace_id, "032x"),
            "root_span_id": format(root.get_span_context().span_id, "016x"),
            "evlog_story": [[t.start, t.finish] for t in evlog.story("total")],
            "dask_story": dask_story,
            "client_events": [m for _, m in evlog.get_events("client.topic")],
            "dask_events": len(client.get_events("app.topic")),
            "failed": failed.status,
        }))
'''

KEYS = ["inc-0", "inc-1", "inc-2", "inc-3", "total"]


def _write(tmp, name, text):
    path = os.path.join(str(tmp), name)
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(text))
    return path


def _output(proc) -> dict:
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr.decode(errors='replace')[-3000:]}"
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def _named(spans, name, key=None):
    return [s for s in spans if s["name"] == name and (key is None or s["attributes"].get("dask.task.key") == key)]


def _story(span):
    return [(e["attributes"]["dask.transition.start"], e["attributes"]["dask.transition.finish"])
            for e in sorted(span["events"], key=lambda e: e["time"]) if e["name"] == "transition"]


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    """The LocalCluster app run once under evlog-instrument, exporting to a receiver over gRPC."""
    tmp = tmp_path_factory.mktemp("dask-local")
    receiver = CollectingReceiver().start()
    try:
        env = evlog_env({**receiver.env("grpc"), "EVLOG_SUMMARY": "false"})
        out = _output(run_instrumented([PYTHON, _write(tmp, "app.py", LOCAL_APP)], env=env, timeout=240))

        def arrived():
            spans = receiver.spans()
            names = {s["name"] for s in spans}
            metrics = {m["name"] for m in receiver.metrics()}
            return (len([s for s in spans if s["name"].startswith("dask.execute")]) >= 6
                    and {"dask.task total", "dask.task boom", "dask.transfer"} <= names
                    and {"dask.scheduler.transitions", "dask.task.duration", "dask.transfer.bytes"} <= metrics)

        receiver.wait_for(arrived, timeout=60)
        yield {"out": out, "spans": receiver.spans(), "logs": receiver.logs(), "metrics": receiver.metrics()}
    finally:
        receiver.stop()


def test_graph_keys_each_get_one_execute_span_in_the_client_trace_from_worker_processes(local):
    out, spans = local["out"], local["spans"]
    assert out["result"] == sum(i + 1 for i in range(4))
    [compute] = [s for s in spans if s["name"] == "dask.compute" and s["attributes"].get("dask.client.method") == "get"]
    assert compute["kind"] == "PRODUCER"
    assert compute["trace_id"] == out["trace_id"] and compute["parent_span_id"] == out["root_span_id"]
    for key in KEYS:
        [ex] = [s for s in spans if s["name"].startswith("dask.execute ") and s["attributes"]["dask.task.key"] == key]
        assert ex["kind"] == "CONSUMER"
        assert ex["trace_id"] == out["trace_id"] and ex["parent_span_id"] == compute["span_id"]
        assert ex["resource"]["dask.role"] == "worker"
        assert ex["resource"]["process.pid"] != out["pid"]
        assert ex["resource"]["dask.worker.address"] == ex["attributes"]["dask.worker.address"]
        assert ex["name"] == f"dask.execute {ex['attributes']['dask.task.prefix']}"
        assert ex["attributes"]["dask.task.prefix"] == ("total" if key == "total" else "inc")
        assert ex["attributes"]["thread.name"] and ex["attributes"]["thread.id"]
    workers = {s["resource"]["dask.worker.address"] for s in spans if s["name"].startswith("dask.execute ")}
    assert workers == set(out["workers"])


def test_scheduler_task_span_tells_the_story_with_dask_attributes(local):
    out, spans = local["out"], local["spans"]
    [task] = _named(spans, "dask.task total", "total")
    assert task["trace_id"] == out["trace_id"]
    assert task["resource"]["dask.role"] == "scheduler" and task["resource"]["process.pid"] == out["pid"]
    story = _story(task)
    assert story[0] == ("released", "waiting")
    assert story.index(("waiting", "processing")) < story.index(("processing", "memory"))
    assert [list(t) for t in story] == out["evlog_story"] == [list(t) for t in out["dask_story"]]
    for e in task["events"]:
        assert e["attributes"]["dask.stimulus_id"]
    assert [e["attributes"].get("dask.worker.address") for e in task["events"]
            if e["attributes"]["dask.transition.finish"] == "processing"] == [task["attributes"]["dask.worker.address"]]
    attrs = task["attributes"]
    assert attrs["dask.task.prefix"] == "total" and attrs["dask.task.group"] == "total"
    assert attrs["dask.task.state"] == "memory" and attrs["dask.task.nbytes"] > 0
    assert sorted(attrs["dask.task.dependencies"]) == ["inc-0", "inc-1", "inc-2", "inc-3"]
    assert attrs["dask.worker.address"] in out["workers"]
    # Dask's priority (user priority negated, generation, dask.order position): one graph's tasks share the
    # first two, and dask.order puts a task after its dependencies
    incs = [s["attributes"]["dask.task.priority"] for s in spans if s["attributes"].get("dask.task.key") in
            ("inc-0", "inc-1", "inc-2", "inc-3") and s["name"] == "dask.task inc"]
    assert len(incs) == 4 and all(len(p) == 3 and all(type(x) is int for x in p) for p in incs + [attrs["dask.task.priority"]])
    assert {tuple(p[:2]) for p in incs} == {tuple(attrs["dask.task.priority"][:2])} and attrs["dask.task.priority"][0] == 0
    assert attrs["dask.task.priority"][2] > max(p[2] for p in incs)
    ends = {e["attributes"]["dask.transition.finish"]: e["time"] for e in task["events"]}
    assert task["end"] == ends["memory"] and task["start"] == min(ends.values())


def test_user_spans_inside_a_task_nest_under_its_execute_span(local):
    spans = local["spans"]
    executes = {s["span_id"]: s for s in spans if s["name"] == "dask.execute inc"}
    inner = _named(spans, "user.inside")
    assert len(inner) == 4
    for s in inner:
        parent = executes[s["parent_span_id"]]
        assert s["trace_id"] == parent["trace_id"]
        assert parent["start"] <= s["start"] <= s["end"] <= parent["end"]


def test_failing_task_is_error_with_its_exception_on_scheduler_and_worker(local):
    spans = local["spans"]
    assert local["out"]["failed"] == "error"
    [task] = _named(spans, "dask.task boom", "boom-1")
    [ex] = _named(spans, "dask.execute boom", "boom-1")
    for s in (task, ex):
        assert s["status_code"] == "ERROR" and "boom 1" in s["status_message"]
        [exc] = [e for e in s["events"] if e["name"] == "exception"]
        assert "boom 1" in exc["attributes"]["exception.message"]
    assert _story(task)[-1][1] in ("erred", "forgotten") and ("processing", "erred") in _story(task)
    assert "ValueError" in [e for e in ex["events"] if e["name"] == "exception"][0]["attributes"]["exception.stacktrace"] \
        or "boom" in ex["status_message"]


def test_transfer_between_workers_is_a_span_with_source_and_bytes(local):
    out, spans = local["out"], local["spans"]
    transfers = _named(spans, "dask.transfer")
    assert transfers
    for t in transfers:
        assert t["attributes"]["dask.transfer.source"] in out["workers"]
        assert t["attributes"]["dask.transfer.source"] != t["resource"]["dask.worker.address"]
        assert t["attributes"]["dask.transfer.bytes"] > 0
        assert t["trace_id"] == out["trace_id"]


def test_log_events_arrive_where_they_were_published(local):
    out, logs = local["out"], local["logs"]
    events = [r for r in logs if r["event_name"] == "dask.log_event"]
    app = [r for r in events if r["attributes"]["dask.topic"] == "app.topic"]
    assert sorted(r["body"]["x"] for r in app) == [0, 1, 2, 3]
    inside = {s["span_id"]: s for s in local["spans"] if s["name"] == "user.inside"}
    for r in app:  # emitted in the worker, inside the span that was current in the task
        assert r["resource"]["dask.role"] == "worker" and r["span_id"] in inside
        assert r["trace_id"] == out["trace_id"]
    [client] = [r for r in events if r["attributes"]["dask.topic"] == "client.topic"]
    assert client["body"] == {"hello": 1} and client["resource"]["process.pid"] == out["pid"]
    actions = {(r["attributes"]["dask.topic"], r["body"].get("action")) for r in events if isinstance(r["body"], dict)}
    assert ("all", "add-worker") in actions and ("all", "add-client") in actions
    assert out["client_events"] == [{"hello": 1}] and out["dask_events"] == 4  # Dask's own ledger is unchanged


def test_metrics_count_transitions_durations_tasks_workers_and_transfer_bytes(local):
    metrics = local["metrics"]

    def points(name):
        return [m for m in metrics if m["name"] == name]

    transitions = points("dask.scheduler.transitions")
    pairs = {(p["attributes"]["dask.transition.start"], p["attributes"]["dask.transition.finish"]) for p in transitions}
    assert ("processing", "memory") in pairs and ("processing", "erred") in pairs
    assert max(p["value"] for p in transitions if p["attributes"]["dask.transition.finish"] == "memory") >= 5
    durations = points("dask.task.duration")
    assert {p["attributes"]["dask.task.prefix"] for p in durations} >= {"inc", "total", "boom"}
    assert all(p["kind"] == "histogram" and p["unit"] == "s" for p in durations)
    assert sum(p["count"] for p in durations if p["attributes"]["dask.task.prefix"] == "inc") >= 4
    assert {p["attributes"]["dask.task.state"] for p in points("dask.scheduler.tasks")} >= {"memory"}
    assert {p["attributes"]["dask.worker.status"] for p in points("dask.scheduler.workers")} >= {"running"}
    assert max(p["value"] for p in points("dask.transfer.bytes")) > 0
    assert all(p["unit"] == "By" for p in points("dask.transfer.bytes"))


# ---- dask CLI cluster, run folder -----------------------------------------------------------------

CLI_CLIENT = r'''
import json, os, signal, sys, time
import dask
from distributed import Client
from opentelemetry import trace

def inc(x):
    return x + 1

def add(*xs):
    return sum(xs)

def slow(marker):
    if not os.path.exists(marker):
        with open(marker + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.rename(marker + ".tmp", marker)
        time.sleep(300)  # killed here
    return 42

if __name__ == "__main__":
    sched_file, marker = sys.argv[1], sys.argv[2]
    with Client(scheduler_file=sched_file, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
        xs = [dask.delayed(inc)(i, dask_key_name=f"cinc-{i}") for i in range(3)]
        result = dask.delayed(add)(*xs, dask_key_name="csum").compute()
        client.run(lambda: trace.get_tracer_provider().force_flush())  # what SIGKILL would lose is out
        f = client.submit(slow, marker, key="slow-1")
        deadline = time.monotonic() + 90
        while not os.path.exists(marker):
            assert time.monotonic() < deadline, "the slow task never started"
            time.sleep(0.05)
        with open(marker) as fh:
            victim = int(fh.read())
        os.kill(victim, signal.SIGKILL)
        print(json.dumps({"result": result, "slow": f.result(timeout=120), "victim": victim, "pid": os.getpid()}))
'''

PLAIN_CLIENT = r'''
import json, sys
import dask
from distributed import Client

def inc(x):
    return x + 1

if __name__ == "__main__":
    with Client(scheduler_file=sys.argv[1], timeout=60) as client:
        xs = [dask.delayed(inc)(i, dask_key_name=f"pinc-{i}") for i in range(2)]
        print(json.dumps({"result": dask.delayed(sum)(xs, dask_key_name="psum").compute()}))
'''


@pytest.fixture(scope="module")
def cli(tmp_path_factory):
    """`dask scheduler` + 2 `dask worker` (with nannies) under evlog-instrument, one run folder; an evlog
    client that kills a worker under a task, then a client without evlog."""
    tmp = tmp_path_factory.mktemp("dask-cli")
    run_dir, sched_file = tmp / "run", str(tmp / "scheduler.json")
    env = evlog_env({"EVLOG_RUN_DIR": str(run_dir), "EVLOG_SUMMARY": "false"})
    log = open(tmp / "cluster.log", "wb")
    common = ["--scheduler-file", sched_file, "--host", "127.0.0.1", "--dashboard-address", ":0"]
    procs = [_start([DASK, "scheduler", "--port", "0"] + common, env, log)]
    try:
        wait_for_scheduler_file(sched_file, procs[0], tmp / "cluster.log")
        for name in ("w1", "w2"):
            procs.append(_start([DASK, "worker", "--nthreads", "1", "--name", name] + common, env, log))
        out = _output(run_instrumented([PYTHON, _write(tmp, "client.py", CLI_CLIENT), sched_file, str(tmp / "marker")],
                                       env=env, timeout=240))
        plain = subprocess.run([PYTHON, _write(tmp, "plain.py", PLAIN_CLIENT), sched_file], env=evlog_env(),
                               capture_output=True, timeout=120)
        out["plain"] = _output(plain)
    finally:
        _stop(procs[1:])  # workers first, then the scheduler
        _stop(procs[:1])
        log.close()
    return {"out": out, **read_run_folder(str(run_dir)), "log": (tmp / "cluster.log").read_text(errors="replace")}


def _by_role(rows, role):
    return [r for r in rows if r["resource"].get("dask.role") == role]


@pytest.mark.slow
def test_cli_cluster_graph_runs_in_the_client_trace_across_processes(cli):
    out, spans = cli["out"], cli["spans"]
    assert out["result"] == 6
    [compute] = [s for s in spans if s["name"] == "dask.compute" and s["resource"]["process.pid"] == out["pid"]
                 and s["attributes"]["dask.client.method"] == "get"]
    assert compute["resource"]["dask.role"] == "client"
    executes = [s for s in spans if s["name"].startswith("dask.execute ")
                and s["attributes"]["dask.task.key"] in ("cinc-0", "cinc-1", "cinc-2", "csum")]
    assert sorted(s["attributes"]["dask.task.key"] for s in executes) == ["cinc-0", "cinc-1", "cinc-2", "csum"]
    tasks = [s for s in spans if s["name"].startswith("dask.task ") and s["attributes"]["dask.task.key"].startswith("c")]
    assert len(tasks) == 4
    for s in executes + tasks:
        assert s["trace_id"] == compute["trace_id"] and s["parent_span_id"] == compute["span_id"]
    assert {s["resource"]["dask.role"] for s in executes} == {"worker"}
    assert {s["resource"]["dask.worker.name"] for s in _by_role(spans, "worker")} <= {"w1", "w2"}
    assert {s["resource"]["dask.role"] for s in tasks} == {"scheduler"}
    pids = {s["resource"]["process.pid"] for s in executes} | {s["resource"]["process.pid"] for s in tasks}
    assert out["pid"] not in pids and len(pids) >= 2
    roles = {r["resource"].get("dask.role") for r in cli["spans"] + cli["metrics"] + cli["logs"]}
    assert {"client", "scheduler", "worker", "nanny"} <= roles


@pytest.mark.slow
def test_worker_killed_with_sigkill_mid_task_leaves_the_story_of_rescheduling(cli):
    assert cli["out"]["slow"] == 42
    lives = sorted(_named(cli["spans"], "dask.task slow", "slow-1"), key=lambda s: s["start"])
    story = [t for s in lives for t in _story(s)]
    assert story[:2] == [("released", "waiting"), ("waiting", "processing")]
    assert story.count(("waiting", "processing")) == 2 and story[-1][1] in ("memory", "forgotten")
    assert story.index(("processing", "released")) < story.index(("processing", "memory"))
    # the transition away from the dead worker names it, and the span says it was lost under the task
    events = [e for s in lives for e in s["events"] if e["name"] == "transition"]
    [left] = [e for e in events if e["attributes"]["dask.transition.start"] == "processing"
              and e["attributes"]["dask.transition.finish"] == "released"]
    dead = left["attributes"]["dask.worker.address"]
    assert dead in lives[0]["attributes"]["dask.task.workers_lost"]
    assert lives[0]["attributes"]["dask.task.suspicious"] == 1
    [removed] = [r for r in cli["logs"] if r["event_name"] == "dask.log_event" and r["attributes"]["dask.topic"] == "all"
                 and isinstance(r["body"], dict) and r["body"].get("action") == "remove-worker"
                 and r["body"].get("worker") == dead]
    assert "slow-1" in removed["body"]["processing-tasks"]
    assert left["attributes"]["dask.stimulus_id"] == removed["body"]["stimulus_id"]


@pytest.mark.slow
def test_graph_from_a_client_without_evlog_still_groups_under_one_span(cli):
    spans = cli["spans"]
    assert cli["out"]["plain"]["result"] == 3
    keys = ("pinc-0", "pinc-1", "psum")
    tasks = [s for s in spans if s["name"].startswith("dask.task ") and s["attributes"]["dask.task.key"] in keys]
    executes = [s for s in spans if s["name"].startswith("dask.execute ") and s["attributes"]["dask.task.key"] in keys]
    assert len(tasks) == 3 and len(executes) == 3
    [group] = [s for s in spans if s["name"] == "dask.compute" and s["span_id"] == tasks[0]["parent_span_id"]]
    assert group["kind"] == "PRODUCER" and group["resource"]["dask.role"] == "scheduler"
    assert group["attributes"]["dask.task.count"] == 3 and group["attributes"]["dask.client.id"].startswith("Client-")
    for s in tasks + executes:
        assert s["trace_id"] == group["trace_id"] and s["parent_span_id"] == group["span_id"]


# ---- settings and failures ------------------------------------------------------------------------

SMALL_APP = r'''
import json
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        print(json.dumps({"result": sum(client.gather(client.map(inc, range(20))))}))
'''


def test_transition_events_can_be_switched_off_and_everything_else_stays(tmp_path, otlp_receiver):
    env = evlog_env({**otlp_receiver.env("grpc"), "EVLOG_DASK_TRANSITIONS": "false", "EVLOG_SUMMARY": "false"})
    assert _output(run_instrumented([PYTHON, _write(tmp_path, "app.py", SMALL_APP)], env=env, timeout=120))["result"] == 210
    otlp_receiver.wait_for(lambda: len(_named(otlp_receiver.spans(), "dask.task inc")) >= 20
                           and len(_named(otlp_receiver.spans(), "dask.execute inc")) >= 20, timeout=60)
    tasks = _named(otlp_receiver.spans(), "dask.task inc")
    assert all(s["events"] == [] and s["attributes"]["dask.task.state"] == "memory" for s in tasks)
    assert all(s["end"] > s["start"] for s in tasks)
    otlp_receiver.wait_for(lambda: any(m["name"] == "dask.scheduler.transitions" for m in otlp_receiver.metrics()))



HELD_APP = r"""
import json, os, time
from distributed import Client, LocalCluster, wait

def inc(x):
    return x + 1

if __name__ == "__main__":
    from evlog.observed.dask.context import carriers as carriers_of
    from evlog.observed.dask.scheduler import _live
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        held = client.map(inc, range(300))
        wait(held)
        # until the shipping thread has taken the tasks' last transitions: it counts what it ships
        counts = cluster.scheduler.plugins["evlog-telemetry"].counts
        deadline = time.monotonic() + 60
        while counts["processing", "memory"] < len(held) and time.monotonic() < deadline:
            time.sleep(0.05)
        waiting = sum(len(rec._log) for rec in _live)
        carriers = carriers_of(cluster.scheduler).by_key
        while_held = len(carriers)
        del held
        while cluster.scheduler.tasks and time.monotonic() < deadline:  # until Dask has forgotten them
            time.sleep(0.05)
        print(json.dumps({"held": 300, "shipped": counts["processing", "memory"], "waiting": waiting,
                          "pid": os.getpid(), "carriers_held": while_held, "carriers_forgotten": len(carriers),
                          "tasks_left": len(cluster.scheduler.tasks)}))
"""


def test_the_scheduler_keeps_no_task_records_its_spans_are_built_by_the_exporter_process(tmp_path, otlp_receiver):
    """A persisted collection can hold millions of results for hours: the scheduler's process keeps
    nothing of evlog's per task once its transitions are shipped (every half second) but the task's trace
    context, until Dask forgets the task; the exporter process builds the spans, with the scheduler
    process's resource."""
    env = evlog_env({**otlp_receiver.env("grpc"), "EVLOG_SUMMARY": "false"})
    out = _output(run_instrumented([PYTHON, _write(tmp_path, "app.py", HELD_APP)], env=env, timeout=120))
    assert out["held"] == out["shipped"] == 300 and out["waiting"] == 0, out
    assert out["carriers_held"] == 300 and out["tasks_left"] == 0 and out["carriers_forgotten"] == 0, out
    otlp_receiver.wait_for(lambda: len(_named(otlp_receiver.spans(), "dask.task inc")) >= 300, timeout=60)
    pids = {s["resource"].get("process.pid") for s in _named(otlp_receiver.spans(), "dask.task inc")}
    assert pids == {out["pid"]}, pids


BREAK_HOOKS = r'''
import wrapt

def _break(module):
    from evlog.observed.dask import scheduler as dask_scheduler
    from evlog.observed.dask import worker as dask_worker

    def fail(*args, **kwargs):
        raise RuntimeError("injected")

    dask_scheduler._info = fail
    dask_worker.WorkerRecorder.begin = fail

wrapt.register_post_import_hook(_break, "evlog.observed.dask.instrumentor")
'''


def test_an_error_inside_evlogs_hooks_is_reported_once_and_the_cluster_carries_on(tmp_path, otlp_receiver):
    site = tmp_path / "site"
    site.mkdir()
    _write(site, "sitecustomize.py", BREAK_HOOKS)  # chained after evlog's own sitecustomize
    env = evlog_env({**otlp_receiver.env("grpc"), "PYTHONPATH": str(site), "EVLOG_SUMMARY": "false"})
    proc = run_instrumented([PYTHON, _write(tmp_path, "app.py", SMALL_APP)], env=env, timeout=120)
    assert _output(proc)["result"] == 210
    err = proc.stderr.decode(errors="replace")
    assert err.count("evlog: a Dask transition could not be recorded: RuntimeError('injected')") == 1, err
    assert err.count("evlog: a Dask task runs without its span: RuntimeError('injected')") == 1, err
    assert "Traceback" not in err
    # the rest still works: client spans and events arrive
    otlp_receiver.wait_for(lambda: _named(otlp_receiver.spans(), "dask.compute")
                           and any(r["event_name"] == "dask.log_event" for r in otlp_receiver.logs()))


SWITCH_APP = r'''
import json, sys
import evlog
evlog.configure(run_dir=sys.argv[1], consumers="none")
import distributed, distributed.worker
from distributed import Client, LocalCluster
from evlog.observed import boot

def inc(x):
    return x + 1

def run(tag):
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        return client.gather(client.map(inc, range(5), key=[f"{tag}-{i}" for i in range(5)]))

def patched():
    return [hasattr(f, "__wrapped__") for f in (distributed.Client.submit, distributed.scheduler.Scheduler.__init__,
                                                 distributed.worker._run_task)]

dask_inst = boot.active_instrumentors()["dask"]
out = {"on": run("on"), "patched_on": patched()}
dask_inst.uninstrument(); dask_inst.uninstrument()
out.update(off=run("off"), patched_off=patched())
dask_inst.instrument(); dask_inst.instrument()
out.update(again=run("again"), patched_again=patched())
print(json.dumps(out))
'''


def test_uninstrument_restores_dask_and_instrument_again_resumes(tmp_path):
    run_dir = tmp_path / "run"
    proc = subprocess.run([PYTHON, _write(tmp_path, "app.py", SWITCH_APP), str(run_dir)], env=evlog_env(),
                          capture_output=True, timeout=120)
    out = _output(proc)
    assert out["on"] == out["off"] == out["again"] == [1, 2, 3, 4, 5]
    assert out["patched_on"] == out["patched_again"] == [True, True, True] and out["patched_off"] == [False] * 3
    spans = read_run_folder(str(run_dir))["spans"]
    keys = {(s["name"].split(" ")[0], s["attributes"].get("dask.task.key", "").split("-")[0]) for s in spans}
    for phase in ("on", "again"):
        assert ("dask.task", phase) in keys and ("dask.execute", phase) in keys
    assert not {k for k in keys if k[1] == "off"}


DETACH_APP = r'''
import json, sys
import evlog
evlog.configure(run_dir=sys.argv[1], consumers="none", summary=False)
from distributed import Client, LocalCluster
from evlog.observed import boot

def inc(x):
    return x + 1

with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
        Client(cluster) as client:
    before = sorted(cluster.scheduler.plugins)
    boot.active_instrumentors()["dask"].uninstrument()
    after = sorted(cluster.scheduler.plugins)
    result = client.gather(client.map(inc, range(3)))
print(json.dumps({"before": before, "after": after, "result": result}))
'''


def test_uninstrument_takes_evlogs_plugin_off_a_running_scheduler(tmp_path):
    proc = subprocess.run([PYTHON, _write(tmp_path, "app.py", DETACH_APP), str(tmp_path / "run")], env=evlog_env(),
                          capture_output=True, timeout=120)
    out = _output(proc)
    assert "evlog-telemetry" in out["before"] and out["after"] == [p for p in out["before"] if p != "evlog-telemetry"]
    assert out["result"] == [1, 2, 3]
    assert not [line for line in proc.stderr.decode().splitlines() if line.startswith("evlog:")], proc.stderr


FORK_APP = r'''
import json, multiprocessing as mp
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

def child():
    pass

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        result = client.gather(client.map(inc, range(10), key=[f"f-{i}" for i in range(10)]))
        p = mp.get_context("fork").Process(target=child)  # a copy of this scheduler process exits
        p.start()
        p.join()
        print(json.dumps({"result": result, "exitcode": p.exitcode}))
'''


def test_a_forked_child_of_the_scheduler_process_does_not_send_its_spans_again(tmp_path):
    run_dir = tmp_path / "run"
    env = evlog_env({"EVLOG_RUN_DIR": str(run_dir), "EVLOG_SUMMARY": "false"})
    out = _output(run_instrumented([PYTHON, _write(tmp_path, "app.py", FORK_APP)], env=env, timeout=120))
    assert out["exitcode"] == 0 and out["result"] == list(range(1, 11))
    tasks = [s for s in read_run_folder(str(run_dir))["spans"] if s["name"] == "dask.task f"]
    assert sorted(s["attributes"]["dask.task.key"] for s in tasks) == sorted(f"f-{i}" for i in range(10))


SEEN_APP = r'''
import json
import dask
from distributed import Client, LocalCluster, get_worker, span
from distributed.diagnostics.plugin import SchedulerPlugin
from opentelemetry import trace

class Hook(SchedulerPlugin):
    name = "hook"
    def __init__(self):
        self.graphs = []
    def update_graph(self, scheduler, *, annotations=None, **kw):
        self.graphs.append({a: {str(k): v for k, v in by_key.items()} for a, by_key in (annotations or {}).items()
                            if a != "span"})

def norm(ann):
    """Annotations without Dask's span ids (random uuids): the rest must be the same with and without evlog."""
    ann = dict(ann or {})
    if isinstance(ann.get("span"), dict):
        ann["span"] = ann["span"].get("name")
    return ann

def seen(x):
    w = get_worker()
    return x, norm(w.state.tasks[w.get_current_task()].annotations), sorted(w.plugins)

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        s = cluster.scheduler
        hook = Hook()
        s.add_plugin(hook)
        with trace.get_tracer("app").start_as_current_span("app.root") as root:
            with span("user-span"), dask.annotate(retries=2, mine="x"):
                xs = [dask.delayed(seen)(i, dask_key_name=f"seen-{i}") for i in range(3)]
            held = client.compute(xs) + [client.submit(seen, 9, key="seen-9", priority=1)]
            on_worker = client.gather(held)
        tasks = {str(k): norm(ts.annotations) for k, ts in s.tasks.items()}
        spans = sorted(sp.name for sp in s.extensions["spans"].spans.values())
        plugins = sorted(p for p in s.plugins if not p.startswith("WorkStealing") and p != "evlog-telemetry")
        print(json.dumps({"on_worker": on_worker, "scheduler_tasks": tasks, "update_graph": hook.graphs,
                          "spans": spans, "scheduler_plugins": plugins,
                          "worker_plugins": client.run(lambda dask_worker: sorted(dask_worker.plugins)),
                          "trace_id": format(root.get_span_context().trace_id, "032x")}, sort_keys=True, default=str))
'''


def test_dask_sees_the_same_annotations_plugins_and_spans_with_and_without_evlog(tmp_path, otlp_receiver):
    """What the tasks, the worker, the scheduler, its update_graph hook and distributed.spans show is what
    they show without evlog (the trace context travels without a task annotation), while the scheduler's
    and the worker's spans still join the client call's trace."""
    app = _write(tmp_path, "seen.py", SEEN_APP)
    plain = subprocess.run([PYTHON, app], env=evlog_env(), capture_output=True, timeout=240)
    want = _output(plain)
    env = evlog_env({**otlp_receiver.env("grpc"), "EVLOG_SUMMARY": "false"})
    got = _output(run_instrumented([PYTHON, app], env=env, timeout=240))
    assert len(want["scheduler_tasks"]) == 4 and want["scheduler_tasks"]["seen-0"]["mine"] == "x"
    want.pop("trace_id")
    got_trace = got.pop("trace_id")
    want["worker_plugins"] = sorted(want["worker_plugins"].values())
    got["worker_plugins"] = sorted(got["worker_plugins"].values())
    assert got == want

    def executes():
        ex = [s for s in otlp_receiver.spans() if s["name"] == "dask.execute seen"]
        tasks = [s for s in otlp_receiver.spans() if s["name"] == "dask.task seen"]
        return len(ex) >= 4 and len(tasks) >= 4 and (ex, tasks)

    ex, tasks = otlp_receiver.wait_for(executes, timeout=60)
    assert {s["trace_id"] for s in ex + tasks} == {got_trace}


DELAY_APP = r'''
import json, time
from distributed import Client, LocalCluster, get_worker

def shifted(x):
    w = get_worker()
    started = time.time()
    w.scheduler_delay += 0.5  # as a heartbeat that measures a new clock offset while the task runs
    time.sleep(0.05)
    return started

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        print(json.dumps(client.gather(client.map(shifted, range(3)))))
'''


def test_a_clock_offset_measured_while_a_task_runs_does_not_shift_its_execute_span(tmp_path):
    """Dask adds the worker's scheduler_delay as it was when the task started to the task's times; the
    execute span takes off that same value, so it starts when the task started (on the worker's clock),
    not 0.5 s off after a heartbeat changed the delay mid-task."""
    run = tmp_path / "run"
    proc = run_instrumented(DELAY_APP, env=evlog_env({"EVLOG_RUN_DIR": str(run), "EVLOG_SUMMARY": "false"}), timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    started = sorted(json.loads(proc.stdout.decode().splitlines()[-1]))
    spans = sorted(s["start"] for s in read_run_folder(str(run))["spans"] if s["name"] == "dask.execute shifted")
    assert len(spans) == 3
    for t, ns in zip(started, spans):
        assert abs(ns / 1e9 - t) < 0.2, (ns / 1e9 - t)
