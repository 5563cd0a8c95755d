"""Consumers and aggregators: Dagger's MultiEventLog on OTel span processors (evlog/processors).

Real things: programs under evlog-instrument (thread pools, a Dask LocalCluster with worker processes),
the OTLP receiver fixture for the metrics, and real SDK tracer providers for the in-process checks.
"""
from __future__ import annotations

import json
import threading
import time

import pytest
from helpers import PYTHON, evlog_env, run_instrumented
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import SpanKind

import evlog
from evlog import notices
from evlog.processors import install_default
from evlog.processors.builtin import BuiltinLog
from evlog.processors.on_provider import add_span_processor
from evlog.processors.registry import registry

CONSUMER_METRICS = {
    "evlog.worker.saturation", "evlog.processor.saturation", "evlog.event.saturation",
    "system.cpu.load_average.1m", "evlog.memory.free_fraction", "evlog.bytes.allocated",
}


def _json_line(proc) -> dict:
    """The program's last stdout line starting with RESULT, decoded."""
    out = proc.stdout.decode(errors="replace")
    lines = [l for l in out.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\nstdout:\n{out[-3000:]}\nstderr:\n{proc.stderr.decode(errors='replace')[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture
def sdk():
    """A real SDK tracer provider of our own, and a registry without logs before and after."""
    registry.reset()
    tp = TracerProvider(shutdown_on_exit=False)
    yield tp, tp.get_tracer("test")
    registry.reset()


# -- in real processes under evlog-instrument ------------------------------------------------------

POOL_PROGRAM = r"""
import json, os, threading
from concurrent.futures import ThreadPoolExecutor
from opentelemetry import trace
import evlog

seen_lengths = []
ml = evlog.MultiEventLog()
ml["what"] = lambda ev: [ev.kind, ev.category, ev.id, ev.timeline[0], ev.timeline[1], ev.name]
ml["core"] = evlog.consumers.CoreMetrics()
ml.aggregators["lengths"] = lambda logs: seen_lengths.append(sorted({len(s) for s in logs.values()}))
assert evlog.set_log_sink(ml)
tracer = trace.get_tracer("app")

def work(i):
    with tracer.start_as_current_span(f"job {i}", attributes={"dask.task.key": f"job-{i}"}):
        return i * i

with ThreadPoolExecutor(2) as pool:
    assert list(pool.map(work, range(4))) == [0, 1, 4, 9]
logs = evlog.fetch_logs()
print("RESULT " + json.dumps({"pid": os.getpid(), "logs": logs, "lengths": seen_lengths,
                              "again": evlog.fetch_logs()}))
"""


def test_custom_consumer_and_aggregator_see_every_span_start_and_finish(tmp_path):
    proc = run_instrumented(POOL_PROGRAM, env=evlog_env(EVLOG_RUN_DIR=tmp_path / "run"), timeout=120)
    res = _json_line(proc)
    what = res["logs"]["what"]
    jobs = [w for w in what if w[1] == "job"]  # category: the span name without its template part
    assert len(jobs) == 8, what  # 4 calls: a start and a finish each
    assert sorted(w[0] for w in jobs) == ["finish"] * 4 + ["start"] * 4
    assert all(w[5].startswith("job ") and w[3] == res["pid"] for w in jobs)
    for i in range(4):  # each id (the task key) starts once and finishes once, on one thread
        mine = [w for w in jobs if w[2] == f"job-{i}"]
        assert [w[0] for w in mine] == ["start", "finish"] and mine[0][4] == mine[1][4]
    core = res["logs"]["core"]
    assert len(core) == len(what), "streams are index-aligned"
    assert [c["kind"] for c in core] == [w[0] for w in what]
    assert res["lengths"] and all(len(x) == 1 for x in res["lengths"]), "the aggregator always sees aligned streams"
    assert res["lengths"][-1] == [len(what)]
    assert res["again"] == {"what": [], "core": []}, "fetch clears, as get_logs! does"


RAISING_PROGRAM = r"""
import json
from opentelemetry import trace
import evlog

calls = {"bad": 0}
def bad(ev):
    calls["bad"] += 1
    raise ValueError("consumer broke")
def bad_aggregator(logs):
    raise RuntimeError("aggregator broke")

ml = evlog.MultiEventLog()
ml["bad"] = bad
ml["wsat"] = evlog.consumers.WorkerSaturation()
ml.aggregators["boom"] = bad_aggregator
evlog.set_log_sink(ml)
tracer = trace.get_tracer("app")
for i in range(5):
    with tracer.start_as_current_span("dask.execute job"):
        pass
print("RESULT " + json.dumps({"logs": ml.fetch(), "calls": calls["bad"], "errors": ml.errors}))
"""


def test_raising_consumer_and_aggregator_are_reported_once_and_skipped(tmp_path):
    proc = run_instrumented(RAISING_PROGRAM, env=evlog_env(EVLOG_RUN_DIR=tmp_path / "run"), timeout=120)
    res = _json_line(proc)
    assert res["logs"]["bad"] == [None] * 10, "a failed consumer's sub-event is None: streams stay aligned"
    assert res["logs"]["wsat"] == [1, 0] * 5, "the other consumers go on"
    assert res["calls"] == 10
    assert res["errors"] == {"consumer:bad": 10, "aggregator:boom": 10}
    err = proc.stderr.decode(errors="replace")
    bad_lines = [l for l in err.splitlines() if "'bad'" in l]
    boom_lines = [l for l in err.splitlines() if "'boom'" in l]
    assert len(bad_lines) == 1 and "consumer broke" in bad_lines[0] and bad_lines[0].startswith("evlog: "), err
    assert len(boom_lines) == 1 and "aggregator broke" in boom_lines[0], err
    assert "Traceback" not in err


METRICS_PROGRAM = r"""
import json, os
from opentelemetry import trace
import evlog
from evlog.observed import lifecycle

tracer = trace.get_tracer("app")
with tracer.start_as_current_span("dask.execute job"):
    with tracer.start_as_current_span("dask.transfer"):
        assert lifecycle.flush(10), "metrics collected while a task runs"
print("RESULT " + json.dumps({"pid": os.getpid(), "logs": evlog.fetch_logs()}))
"""


def _points(receiver, pid):
    return [m for m in receiver.metrics() if m["name"] in CONSUMER_METRICS and m["resource"].get("process.pid") == pid]


def test_default_consumers_arrive_at_the_receiver_as_metrics(tmp_path, otlp_receiver):
    env = evlog_env(otlp_receiver.env("grpc"), EVLOG_CONSUMERS="wsat,psat,esat,loadavg,mem,bytes")
    res = _json_line(run_instrumented(METRICS_PROGRAM, env=env, timeout=120))
    pid = res["pid"]
    otlp_receiver.wait_for(lambda: {m["name"] for m in _points(otlp_receiver, pid)} == CONSUMER_METRICS, timeout=30)
    pts = _points(otlp_receiver, pid)
    by = lambda name: [p for p in pts if p["name"] == name]  # noqa: E731
    assert {p["kind"] for p in pts} == {"gauge"}
    assert 1 in [p["value"] for p in by("evlog.worker.saturation")], "one task running at the flush inside it"
    main = [p for p in by("evlog.processor.saturation") if p["attributes"].get("evlog.processor") == "MainThread"]
    assert main and max(p["value"] for p in main) == 1
    cats = {(p["attributes"]["evlog.category"], p["value"]) for p in by("evlog.event.saturation")}
    assert ("compute", 1) in cats and ("move", 1) in cats
    assert all(p["value"] >= 0 for p in by("system.cpu.load_average.1m"))
    assert all(0 < p["value"] <= 1 for p in by("evlog.memory.free_fraction"))
    assert all(p["value"] > 1_000_000 for p in by("evlog.bytes.allocated")), "a Python process holds megabytes"
    logs = res["logs"]  # and the same consumers as the process's default log
    assert logs["wsat"] == [1, 1, 1, 0] and logs["esat"][1] == {"compute": 1, "move": 1}


def test_consumers_none_installs_nothing(tmp_path, otlp_receiver):
    env = evlog_env(otlp_receiver.env("grpc"), EVLOG_CONSUMERS="none")
    res = _json_line(run_instrumented(METRICS_PROGRAM, env=env, timeout=120))
    otlp_receiver.wait_for(lambda: {"dask.execute job", "dask.transfer"} <= {s["name"] for s in otlp_receiver.spans()},
                           timeout=30)  # evlog is on: the spans arrive
    assert res["logs"] == {}
    assert not _points(otlp_receiver, res["pid"])


# -- Dask: worker processes, client.run(evlog.fetch_logs) -------------------------------------------

DASK_PROGRAM = r"""
import json, os, time
from distributed import Client, LocalCluster
import evlog

def inc(x):
    return x + 1

def alloc(n):
    return bytes(n)

def noop():
    return None

def held(dask_worker):
    return len(dask_worker.data)

if __name__ == "__main__":
    out = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        out["pids"] = client.run(os.getpid)
        assert client.gather(client.map(inc, range(20))) == list(range(1, 21))
        out["default"] = client.run(evlog.fetch_logs)
        out["default_again"] = client.run(evlog.fetch_logs)

        # the seed: a MultiEventLog with BytesAllocd on every worker, a small graph on one of them
        ml = evlog.MultiEventLog()
        ml["bytes"] = evlog.consumers.BytesAllocd()
        out["installed"] = client.run(evlog.set_log_sink, ml)
        a = sorted(out["pids"])[0]
        t1 = client.submit(alloc, 1_000_000, workers=[a], pure=False)
        t2 = client.submit(len, t1, workers=[a], pure=False)
        out["result"] = t2.result()
        out["worker"] = a
        out["seed"] = client.run(evlog.fetch_logs)  # while the worker holds the 1 MB result
        del t1, t2
        deadline = time.monotonic() + 30  # bounded: until the worker has let the results go
        while client.run(held, workers=[a])[a] and time.monotonic() < deadline:
            time.sleep(0.05)
        client.submit(noop, workers=[a], pure=False).result()  # one more task, after the release
        out["seed_after"] = client.run(evlog.fetch_logs)
        out["seed_again"] = client.run(evlog.fetch_logs)
    print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def dask_run(tmp_path_factory):
    pytest.importorskip("distributed")
    tmp = tmp_path_factory.mktemp("dask")
    proc = run_instrumented(DASK_PROGRAM, env=evlog_env(EVLOG_RUN_DIR=tmp / "run", EVLOG_SUMMARY="false"), timeout=240)
    return _json_line(proc)


def _compute_starts(wsat: list) -> int:
    """How many task executions began, from a WorkerSaturation stream (1 thread: 0 -> 1 steps)."""
    prev, n = 0, 0
    for w in wsat:
        n += w > prev
        prev = w
    return n


def test_fetch_logs_through_client_run_gives_each_worker_process_its_own_logs(dask_run):
    pids = dask_run["pids"]
    logs = dask_run["default"]
    assert set(logs) == set(pids) and len(pids) == 2, "one entry per worker address"
    for addr, log in logs.items():
        assert set(log) == {"wsat", "psat", "loadavg", "mem", "bytes"}, log.keys()
        assert len({len(s) for s in log.values()}) == 1, "streams are index-aligned"
        assert set(log["wsat"]) <= {0, 1}, "one thread per worker: at most one task at a time"
        procs = {tuple(p[0]) for entry in log["psat"] for p in entry}
        assert {pid for pid, _thread in procs} <= {pids[addr]}, "processors are that worker's own threads"
    assert sum(_compute_starts(log["wsat"]) for log in logs.values()) == 20, "every task ran once, on some worker"
    assert all(not any(log.values()) for log in dask_run["default_again"].values()), "fetch_logs clears"


def test_bytesallocd_on_a_small_dask_graph_rises_then_falls_and_fetch_clears(dask_run):
    assert dask_run["result"] == 1_000_000
    assert all(dask_run["installed"].values())
    a = dask_run["worker"]
    held = dask_run["seed"][a]["bytes"]
    assert len(held) == 4 and max(held) >= 1_000_000, held  # alloc and len ran: the 1 MB result is held
    after = dask_run["seed_after"][a]["bytes"]
    assert len(after) == 2, after  # only the task after the first fetch: fetching cleared the log
    assert max(after) < 1_000_000, after  # the result is freed once the client lets it go
    assert dask_run["seed_again"][a]["bytes"] == [], "get_logs! clears"


BYTES_PROGRAM = r"""
import json, os, sys
from distributed import Client, LocalCluster, wait
from evlog.observed import lifecycle

def alloc(i):
    return bytes(200_000)

def flush():
    from evlog.observed import lifecycle
    return lifecycle.flush(10)

if __name__ == "__main__":
    processes = sys.argv[1] == "processes"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        workers = sorted(client.scheduler_info()["workers"])
        futs = [client.submit(alloc, i, workers=[workers[i % 2]]) for i in range(20)]  # 10 results each
        wait(futs)
        pids = client.run(os.getpid)
        if processes:
            assert all(client.run(flush).values()), "a collection in each worker while it holds its results"
        else:
            assert flush(), "a collection while the in-process workers hold the results"
        results = client.gather(futs)
    assert flush(), "the cluster is closed; this process still holds the 20 results"
    print("RESULT " + json.dumps({"pid": os.getpid(), "workers": sorted(set(pids.values())),
                                  "held": sum(map(len, results))}))
"""


@pytest.mark.parametrize("processes", [False, True], ids=["in-process", "worker-processes"])
def test_bytes_allocated_reports_live_bytes_while_results_are_held(processes, otlp_receiver):
    """Each worker's first reading is its Dask-managed bytes (the results it holds); after its workers
    close, a process (the in-process cluster's program, a worker process at exit) reports its resident
    bytes, never the 0 of a closed worker's accounting."""
    pytest.importorskip("distributed")
    env = evlog_env(otlp_receiver.env("grpc"), EVLOG_SUMMARY="false",
                    OTEL_METRIC_EXPORT_INTERVAL="600000")  # only the program's flushes and the exits collect
    mode = "processes" if processes else "threads"
    res = _json_line(run_instrumented([PYTHON, "-c", BYTES_PROGRAM, mode], env=env, timeout=180))
    assert res["held"] == 4_000_000
    observed = res["workers"]
    assert (observed == [res["pid"]]) != processes and len(observed) == (2 if processes else 1)

    def by_pid():
        out = {pid: [] for pid in observed}
        for m in otlp_receiver.metrics():
            if m["name"] == "evlog.bytes.allocated" and m["resource"].get("process.pid") in out:
                out[m["resource"]["process.pid"]].append(m)
        return out

    otlp_receiver.wait_for(lambda: all(len(p) >= 2 for p in by_pid().values()), timeout=30)
    for pid, pts in by_pid().items():
        values = [p["value"] for p in sorted(pts, key=lambda p: p["time"])]
        assert values[0] >= (2_000_000 if processes else 4_000_000), (pid, values)  # the results held
        assert min(values) > 0, (pid, values)  # live bytes at every collection, after the workers closed too


# -- in-process, on a real SDK provider -----------------------------------------------------------

def _span(tracer, name, start, end, **attrs):
    s = tracer.start_span(name, start_time=start, attributes=attrs or None)
    s.end(end_time=end)


def test_logwindow_prunes_old_entries_and_tells_its_handlers(sdk):
    tp, tracer = sdk
    ml = evlog.MultiEventLog()
    ml["core"] = evlog.consumers.CoreMetrics()
    ml["id"] = evlog.consumers.IDMetrics()
    assert evlog.set_log_sink(ml, tp)
    now = time.time_ns()
    old = now - 60 * 10**9  # a minute ago: outside a 10 s window
    _span(tracer, "dask.execute a", old, old + 1000, **{"dask.task.key": "a-1"})
    _span(tracer, "dask.execute b", old + 2000, old + 3000, **{"dask.task.key": "b-1"})
    assert len(ml) == 4

    lw = evlog.aggregators.LogWindow(window_s=10, core="core")
    created, deleted = [], []

    class Renderer:  # as DaggerWebDash's D3Renderer: hook methods, not a plain callable
        def deletion_hook(self, n):
            deleted.append((n, len(ml._streams["core"])))

    lw.creation_handlers.append(created.append)
    lw.deletion_handlers.append(Renderer())
    ml.aggregators["window"] = lw
    _span(tracer, "dask.execute c", now, now + 1000, **{"dask.task.key": "c-1"})
    assert deleted == [(4, 5)], "the 4 old entries go at once; handlers are told before they go"
    assert [c["id"] for c in created] == ["c-1", "c-1"], "each creation gets the latest entry of every stream"
    assert created[-1]["core"] == {"timestamp": now + 1000, "category": "compute", "kind": "finish"}
    _span(tracer, "dask.execute d", old, old + 1, **{"dask.task.key": "d-1"})  # late, already outside
    logs = ml.fetch()
    assert logs["id"] == ["c-1", "c-1", "d-1", "d-1"], "pruning stops at the first entry inside the window"
    assert len(logs["core"]) == 4


def test_fused_default_log_matches_a_multieventlog_with_the_same_consumers(sdk):
    tp, tracer = sdk
    names = ("core", "wsat", "psat", "esat")
    fused = install_default(type("S", (), {"consumers": names})(), tracer_provider=tp,
                            meter_provider=MeterProvider(shutdown_on_exit=False))
    assert isinstance(fused, BuiltinLog)
    ml = evlog.MultiEventLog()
    for n in names:
        ml[n] = evlog.consumers.BUILTIN[n]()
    evlog.set_log_sink(ml, tp)
    s1 = tracer.start_span("dask.execute one", kind=SpanKind.CONSUMER)
    box = {}

    def other_thread():  # a second processor; its task is ended later by the main thread
        box["s2"] = tracer.start_span("dask.execute two", kind=SpanKind.CONSUMER)
        with tracer.start_as_current_span("dask.transfer"):
            pass
        with tracer.start_as_current_span("dask.task two"):
            pass

    t = threading.Thread(target=other_thread)
    t.start()
    t.join(30)
    box["s2"].end()
    s1.end()
    want = ml.fetch()
    got = fused.fetch()
    assert got == want
    assert want["wsat"] == [1, 2, 2, 2, 2, 2, 1, 0]
    assert [len(p) for p in want["psat"]] == [1, 2, 2, 2, 2, 2, 1, 0]
    assert want["esat"][2] == {"compute": 2, "move": 1} and want["esat"][4] == {"compute": 2, "dask.task": 1}
    assert evlog.fetch_logs() == {n: [] for n in names}, "ml is the default log now, already fetched"


def test_spans_handed_over_finished_count_with_their_own_times(sdk):
    """The Dask instrumentation builds its spans after the fact and gives them to on_end only."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext

    tp, tracer = sdk
    fused = install_default(type("S", (), {"consumers": ("core", "wsat", "psat")})(), tracer_provider=tp,
                            meter_provider=MeterProvider(shutdown_on_exit=False))
    ml = evlog.MultiEventLog()
    ml["wsat"] = evlog.consumers.WorkerSaturation()
    ml["psat"] = evlog.consumers.ProcessorSaturation()
    ml["id"] = evlog.consumers.IDMetrics()
    evlog.set_log_sink(ml, tp)
    t0 = time.time_ns()

    def finished(key, thread, start, end):
        return ReadableSpan(f"dask.execute {key}", context=SpanContext(1, thread * 1000 + start, False),
                            attributes={"dask.task.key": key, "thread.id": thread},
                            start_time=t0 + start, end_time=t0 + end)

    deliver = tp._active_span_processor.on_end  # as the Dask assembler delivers a batch
    deliver(finished("a", 1, 0, 10))
    deliver(finished("b", 2, 5, 15))
    deliver(finished("c", 1, 20, 30))
    want_wsat = [1, 2, 1, 0, 1, 0]
    logs = ml.fetch()
    assert logs["wsat"] == want_wsat, "events in time order: the overlap of a and b shows"
    assert logs["id"] == ["a", "b", "a", "b", "c", "c"]
    got = fused.fetch()
    assert got["wsat"] == want_wsat and [c["timestamp"] - t0 for c in got["core"]] == [0, 5, 10, 15, 20, 30]
    pid = got["psat"][1][0][0][0]
    assert got["psat"][1] == [((pid, 1), 1), ((pid, 2), 1)] == logs["psat"][1]
    assert fused.wsat == 0, "nothing runs now"


def test_streams_stay_bounded_in_a_long_run(sdk):
    tp, tracer = sdk
    ml = evlog.MultiEventLog(maxlen=50)
    ml["wsat"] = evlog.consumers.WorkerSaturation()
    ml["id"] = evlog.consumers.IDMetrics()
    evlog.set_log_sink(ml, tp)
    fused = BuiltinLog(("wsat", "psat", "bytes"), maxlen=40)
    add_span_processor(tp, fused)  # not an SDK SpanProcessor itself
    for i in range(500):
        with tracer.start_as_current_span("dask.execute x", attributes={"dask.task.key": f"x-{i}"}):
            pass
    assert 50 <= len(ml) <= 50 + 50 // 16 + 1 and ml.dropped >= 900
    logs = ml.fetch()
    assert len(logs["wsat"]) == len(logs["id"]) and logs["id"][-1] == "x-499"
    assert len(fused) == 40
    got = fused.fetch()
    assert got["wsat"] == [1, 0] * 20 and len(got["psat"]) == len(got["bytes"]) == 40


def test_a_log_pickles_to_another_process_with_fresh_state():
    import pickle

    ml = evlog.MultiEventLog(maxlen=7)
    ml["wsat"] = evlog.consumers.WorkerSaturation()
    ml["wsat"].saturation = 5
    ml.aggregators["window"] = evlog.aggregators.LogWindow(3)
    copy = pickle.loads(pickle.dumps(ml))
    assert copy.maxlen == 7 and list(copy.keys()) == ["wsat"] and copy["wsat"].saturation == 0
    assert isinstance(copy.aggregators["window"], evlog.aggregators.LogWindow)
    ev = evlog.Event("start", "compute", "k", (1, 2, None), 3, {"a": 1}, "dask.execute k", 9)
    assert pickle.loads(pickle.dumps(ev)) == ev


def test_set_log_sink_without_an_sdk_provider_says_so_once(capfd):
    from opentelemetry.trace import NoOpTracerProvider

    notices.reset()
    ml = evlog.MultiEventLog()
    assert evlog.set_log_sink(ml, NoOpTracerProvider()) is False
    assert evlog.set_log_sink(ml, NoOpTracerProvider()) is False
    err = capfd.readouterr().err
    assert err.count("no OpenTelemetry SDK tracer provider") == 1
