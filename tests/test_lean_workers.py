"""Lean observed processes: a Dask worker, the Dask scheduler and a pool worker whose tasks make no telemetry
of their own import no ``opentelemetry.sdk`` module, and the run still exports evlog's spans and metrics
(evlog/observed/own_metrics.py, own_logs.py, own_spans.py); a task that asks for a tracer gets the SDK
and its span arrives. Real processes under evlog-instrument, a real OTLP receiver."""
from __future__ import annotations

import json

import pytest
from helpers import PYTHON, evlog_env, run_instrumented


def _result(proc) -> dict:
    for line in proc.stdout.decode().splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise AssertionError(f"no RESULT line (exit {proc.returncode})\nstdout:\n{proc.stdout.decode()[-3000:]}\n"
                         f"stderr:\n{proc.stderr.decode()[-3000:]}")


DASK_APP = r'''
import json, os, sys
from distributed import Client, LocalCluster

def sdk():
    return sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))

def inc(x):
    return x + 1

def traced(x):
    from opentelemetry import trace
    with trace.get_tracer("lean").start_as_current_span("lean.inside"):
        return sdk()

if __name__ == "__main__":
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        a, b = sorted(client.scheduler_info()["workers"])
        total = sum(client.gather(client.map(inc, range(200))))
        lean = {"workers": client.run(sdk), "scheduler": client.run_on_scheduler(sdk)}
        inside = client.submit(traced, 1, workers=[a], pure=False).result()
        after = client.run(sdk)
        pids = client.run(os.getpid)
    print("RESULT " + json.dumps({"total": total, "lean": lean, "inside": inside, "after": after, "a": a, "b": b,
                                  "pids": pids, "pid": os.getpid()}))
'''


def test_dask_workers_and_scheduler_load_no_sdk_until_a_task_asks_for_a_tracer(otlp_receiver):
    pytest.importorskip("distributed")
    proc = run_instrumented(DASK_APP, env=evlog_env(otlp_receiver.env("grpc"), EVLOG_SUMMARY="false"), timeout=240)
    res = _result(proc)
    assert proc.returncode == 0 and res["total"] == 20100, proc.stderr.decode()[-3000:]
    assert res["lean"] == {"workers": {res["a"]: [], res["b"]: []}, "scheduler": []}, res["lean"]
    assert "opentelemetry.sdk.trace" in res["inside"], res["inside"]  # the task asked: it gets the SDK
    assert res["after"][res["b"]] == [], "the other worker ran no such task"
    # its span arrives, inside the task's execute span, from the worker that ran it
    inside = otlp_receiver.wait_for(lambda: [s for s in otlp_receiver.spans() if s["name"] == "lean.inside"], 60)[0]
    executes = {s["span_id"]: s for s in otlp_receiver.spans() if s["name"].startswith("dask.execute ")}
    assert executes[inside["parent_span_id"]]["name"] == "dask.execute traced"
    assert inside["resource"]["process.pid"] == res["pids"][res["a"]]
    # evlog's own metrics still arrive, from the processes that made them, with their names and units
    wanted = {("dask.task.duration", "s", "worker"), ("evlog.worker.saturation", "{task}", "worker"),
              ("dask.scheduler.transitions", "{transition}", "scheduler"), ("dask.scheduler.workers", "{worker}", "scheduler"),
              ("system.cpu.load_average.1m", "{thread}", "scheduler")}

    def arrived():
        return {(m["name"], m["unit"], m["resource"].get("dask.role")) for m in otlp_receiver.metrics()}

    otlp_receiver.wait_for(lambda: wanted <= arrived(), 60)

    def inc_durations():  # the latest (cumulative) count of each worker's dask.task.duration for prefix inc
        latest = {}
        for m in otlp_receiver.metrics():
            if m["name"] == "dask.task.duration" and m["attributes"].get("dask.task.prefix") == "inc":
                pid = m["resource"]["process.pid"]
                latest[pid] = max(latest.get(pid, (0, 0)), (m["time"], m["count"]))
        return sum(count for _t, count in latest.values())

    otlp_receiver.wait_for(lambda: inc_durations() == 200, 60)


POOL_APP = r'''
import json, os, sys
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor

def sdk(_=None):
    return sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))

def square(x):
    return x * x

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    with ProcessPoolExecutor(2, mp_context=ctx) as ex:
        ok = list(ex.map(square, range(40))) == [x * x for x in range(40)]
        futures_worker = ex.submit(sdk).result()
    with ctx.Pool(2) as pool:
        ok = ok and pool.map(square, range(40)) == [x * x for x in range(40)]
        pool_worker = pool.apply(sdk)
    print("RESULT " + json.dumps({"ok": ok, "futures": futures_worker, "pool": pool_worker, "program": sdk(),
                                  "pid": os.getpid()}))
'''


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_pool_workers_load_no_sdk(method, otlp_receiver, tmp_path):
    app = tmp_path / "app.py"  # a file: spawn children import the program's functions from it
    app.write_text(POOL_APP)
    proc = run_instrumented([PYTHON, str(app), method], env=evlog_env(otlp_receiver.env("grpc"), EVLOG_SUMMARY="false"),
                            timeout=180)
    res = _result(proc)
    assert proc.returncode == 0 and res["ok"], proc.stderr.decode()[-3000:]
    assert (res["futures"], res["pool"], res["program"]) == ([], [], []), res
    # the tasks' spans and the pool workers' gauges arrive
    otlp_receiver.wait_for(lambda: {"futures.task square", "multiprocessing.chunk square"}
                           <= {s["name"] for s in otlp_receiver.spans()}, 60)
    otlp_receiver.wait_for(lambda: {m["resource"]["process.pid"] for m in otlp_receiver.metrics()
                                    if m["name"] == "evlog.worker.saturation"} - {res["pid"]}, 60)



TRACKER_APP = r'''
import json, os, time
import multiprocessing as mp
import psutil
from opentelemetry import trace

def tracker():
    for child in psutil.Process().children():
        if "multiprocessing.resource_tracker" in " ".join(child.cmdline()):
            return child.pid
    return None

if __name__ == "__main__":
    with trace.get_tracer("app").start_as_current_span("app.work"):
        lock = mp.get_context("spawn").Lock()  # a semaphore: multiprocessing starts its resource tracker
        deadline = time.monotonic() + 60
        while tracker() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        # a program that runs a while: long enough for every process of the run to send its consumers'
        # first readings (once a second), as the tracker did when evlog was set up in it
        time.sleep(2.5)
    print("RESULT " + json.dumps({"pid": os.getpid(), "tracker": tracker()}))
'''


def test_multiprocessing_resource_tracker_runs_without_evlog(otlp_receiver):
    """The tracker runs none of the program's code: evlog stays out of it (its memory, its records)."""
    proc = run_instrumented(TRACKER_APP, env=evlog_env(otlp_receiver.env("grpc"), EVLOG_SUMMARY="false"), timeout=120)
    res = _result(proc)
    assert proc.returncode == 0 and res["tracker"], (res, proc.stderr.decode()[-3000:])
    assert proc.stderr.decode() == "", proc.stderr.decode()

    def pids():
        rows = otlp_receiver.spans() + otlp_receiver.logs() + otlp_receiver.metrics()
        return {r["resource"].get("process.pid") for r in rows}

    [work] = otlp_receiver.wait_for(lambda: [s for s in otlp_receiver.spans() if s["name"] == "app.work"], 60)
    assert work["resource"]["process.pid"] == res["pid"]
    # the run has ended (run_instrumented waits for its exporter): the tracker, gone too, sent nothing
    assert res["tracker"] not in pids(), otlp_receiver.describe()


SCRIPT_APP = r'''
import json, logging, os, sys
logging.getLogger("app").warning("disk almost full")  # the logging instrumentation takes it
print("RESULT " + json.dumps({"pid": os.getpid(), "loaded": sorted(m for m in ("wrapt", "asyncio", "concurrent.futures")
                                                                   if m in sys.modules)}))
'''


def test_a_plain_script_loads_neither_wrapt_nor_asyncio_and_its_logging_is_exported(otlp_receiver):
    """Python logging is instrumented in nearly every process (OpenTelemetry's API imports logging): its
    wrapper costs a script nothing it does not use itself (wrapt imports asyncio, which imports
    concurrent.futures, whose instrumentation would follow)."""
    proc = run_instrumented(SCRIPT_APP, env=evlog_env(otlp_receiver.env("grpc"), EVLOG_SUMMARY="false"), timeout=60)
    res = _result(proc)
    assert proc.returncode == 0 and res["loaded"] == [], (res, proc.stderr.decode()[-3000:])
    [log] = otlp_receiver.wait_for(lambda: [r for r in otlp_receiver.logs() if r["body"] == "disk almost full"], 60)
    assert log["resource"]["process.pid"] == res["pid"] and log["severity_text"] == "WARN", log
    assert "disk almost full" in proc.stderr.decode()  # the program's own output, as without evlog
