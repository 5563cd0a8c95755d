"""The run's exporter process: what it sends, judged by a plain OTLP receiver; what survives a crash."""
from __future__ import annotations

import json

import pytest
from helpers import PYTHON, evlog_env, run_instrumented
from plain_receiver import PlainReceiver, attrs, value

APP = r'''
import json, os, signal, sys, time
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

def fail(x):
    raise ValueError(f"bad {x}")

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        total = sum(client.gather(client.map(inc, range(40))))
        bad = client.submit(fail, 1)
        try:
            bad.result()
        except ValueError:
            pass
        if sys.argv[1:] == ["kill"]:
            # killed once the shipping thread has taken every task's last transition (it counts what it
            # ships) and has written that shipment out (flush waits for a shipment under way)
            from evlog.observed import records
            counts = cluster.scheduler.plugins["evlog-telemetry"].counts
            deadline = time.monotonic() + 30
            while (counts["processing", "memory"] < 40 or counts["processing", "erred"] < 1) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            records.flush()
            print(json.dumps({"result": total, "pid": os.getpid(), "shipped": counts["processing", "memory"]}),
                  flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        print(json.dumps({"result": total, "pid": os.getpid()}), flush=True)
'''


def _run(tmp_path, receiver, *args):
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = evlog_env({**receiver.env(), "EVLOG_SUMMARY": "false", "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    proc = run_instrumented([PYTHON, str(app), *args], env=env, timeout=120)
    return proc, json.loads(proc.stdout.decode().splitlines()[0])


@pytest.fixture(scope="module")
def dask_run(tmp_path_factory):
    """APP run once to a plain receiver, which stays up for the module's tests that only read what arrived:
    (the receiver, the process, its output)."""
    with PlainReceiver() as r:
        proc, out = _run(tmp_path_factory.mktemp("exporter-process"), r)
        yield r, proc, out


def _tasks(receiver, prefix):
    return [(res, s) for res, s in receiver.spans() if s.name == f"dask.task {prefix}"]


def test_dask_task_spans_reach_a_plain_receiver_in_the_client_calls_trace(dask_run):
    r, proc, out = dask_run
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    r.wait_for(lambda: len(_tasks(r, "inc")) >= 40 and _tasks(r, "fail"), timeout=60)
    computes = {s.span_id: s for _res, s in r.spans() if s.name == "dask.compute"}
    for res, s in _tasks(r, "inc"):
        a = attrs(s.attributes)
        assert a["dask.task.prefix"] == "inc" and a["dask.task.state"] == "memory"
        assert a["dask.task.key"].startswith("inc-") and a["dask.worker.address"].startswith(("tcp://", "inproc://"))
        assert res["process.pid"] == out["pid"] and res["dask.role"] == "scheduler"
        assert s.parent_span_id in computes and s.trace_id == computes[s.parent_span_id].trace_id
        assert s.start_time_unix_nano < s.end_time_unix_nano
        story = [(attrs(e.attributes)["dask.transition.start"], attrs(e.attributes)["dask.transition.finish"])
                 for e in s.events if e.name == "transition"]
        assert story[0] == ("released", "waiting") and ("processing", "memory") in story, story
        assert s.status.code == 0
    (_res, bad), = _tasks(r, "fail")
    assert bad.status.code == 2 and "ValueError" in bad.status.message and "bad 1" in bad.status.message
    exc = [attrs(e.attributes) for e in bad.events if e.name == "exception"]
    assert exc and "ValueError" in exc[0]["exception.message"] and "fail" in exc[0]["exception.stacktrace"]
    # the workers' executions: one dask.execute span per task, in the same trace, CONSUMER
    r.wait_for(lambda: len([1 for _r, s in r.spans() if s.name == "dask.execute inc"]) >= 40, timeout=60)
    executes = {attrs(s.attributes)["dask.task.key"]: (res, s) for res, s in r.spans()
                if s.name.startswith("dask.execute ")}
    for res, s in (executes[a] for a in executes if a.startswith("inc-")):
        a = attrs(s.attributes)
        assert s.kind == 5 and a["dask.task.prefix"] == "inc" and a["thread.name"] and a["thread.id"] > 0
        assert s.parent_span_id in computes and s.trace_id == computes[s.parent_span_id].trace_id
        assert res["process.pid"] == out["pid"] and s.start_time_unix_nano <= s.end_time_unix_nano
    [failed] = [s for k, (_res, s) in executes.items() if k.startswith("fail-")]
    assert failed.status.code == 2 and "bad 1" in failed.status.message
    exc = [attrs(e.attributes) for e in failed.events if e.name == "exception"]
    assert exc and "fail" in exc[0]["exception.stacktrace"]


def test_held_bytes_and_the_runs_host_samples_reach_a_plain_receiver(dask_run):
    r, proc, out = dask_run
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    # dask.worker.memory: the 40 inc results (ints) stored, then released when the client let go
    held = r.wait_for(lambda: [s for _res, s in r.spans() if s.name == "dask.worker.memory"]
                      if len(_tasks(r, "inc")) >= 40 else None, timeout=60)
    events = sorted((e.time_unix_nano, attrs(e.attributes)["dask.worker.nbytes"]) for s in held for e in s.events)
    assert all(e.name == "dask.worker.memory" for s in held for e in s.events)
    assert max(n for _t, n in events) >= 40 * 28 and events[-1][1] == 0  # sizeof(int) is 28
    # the exporter process's host samples: one at the program's start, one after it ended
    samples = r.wait_for(lambda: [(res, m) for res, m in r.metrics() if res.get("evlog.process.role") == "exporter"
                                  and m.name == "system.cpu.load_average.1m"], timeout=30)
    times = sorted(p.time_unix_nano for _res, m in samples for p in m.gauge.data_points)
    assert len(times) == 2
    tasks = [s for _res, s in r.spans() if s.name.startswith("dask.task ")]
    assert times[0] < min(s.start_time_unix_nano for s in tasks) and times[1] > max(s.end_time_unix_nano for s in tasks)
    res = samples[0][0]
    assert res["service.name"] == "app" and "dask.role" not in res and res["process.pid"] != out["pid"]


def test_the_launchers_host_reading_is_read_back_and_a_malformed_one_is_refused():
    from evlog.exporter.host_samples import encode, now, parse

    t, values = parse(encode(now()))
    assert t > 0 and set(values) == {"loadavg", "mem"} and 0 < values["mem"] <= 1
    assert parse("5,,0.5") == (5, {"mem": 0.5})  # a value that could not be read is left out
    assert parse(encode((5, {"loadavg": float("nan"), "mem": 0.5}))) == (5, {"mem": 0.5})
    for bad in (None, "", "x,1,2", "1,2", "1,2,3,4", "1,load,0.5"):
        assert parse(bad) is None  # then the exporter process reads the host itself


POOL_APP = r'''
import concurrent.futures as cf, json, os
from opentelemetry import trace

def work(x):
    span = trace.get_current_span()
    span.set_attribute("user.key", x)
    span.add_event("user.event", {"n": x})
    if x == 3:
        raise ValueError("three")
    return os.getpid()

if __name__ == "__main__":
    with trace.get_tracer("app").start_as_current_span("submit") as root:
        with cf.ProcessPoolExecutor(2) as ex:
            fs = [ex.submit(work, i) for i in range(6)]
            pids = sorted({f.result() for f in fs if not f.exception()})
    print(json.dumps({"pids": pids, "root": format(root.get_span_context().span_id, "016x"),
                      "trace": format(root.get_span_context().trace_id, "032x")}), flush=True)
'''


def test_pool_task_spans_reach_a_plain_receiver_as_the_sdk_would_send_them(tmp_path):
    """A pool task's span, recorded in its worker and built by the exporter process: every field a
    user can set or see, as the SDK's own span would carry it."""
    app = tmp_path / "pool.py"
    app.write_text(POOL_APP)
    with PlainReceiver() as r:
        proc = run_instrumented([PYTHON, str(app)], env=evlog_env({**r.env(), "EVLOG_SUMMARY": "false"}), timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        out = json.loads(proc.stdout.decode().splitlines()[-1])
        r.wait_for(lambda: len([1 for _r, s in r.spans() if s.name == "futures.task work"]) == 6, timeout=60)
        tasks = {attrs(s.attributes)["user.key"]: (res, s) for res, s in r.spans() if s.name == "futures.task work"}
        assert sorted(tasks) == list(range(6))
        for x, (res, s) in tasks.items():
            a = attrs(s.attributes)
            assert a["code.function.name"] == "__main__.work" and a["evlog.pool.kind"] == "process"
            assert s.kind == 5 and s.trace_id.hex() == out["trace"] and s.parent_span_id.hex() == out["root"]
            assert res["process.pid"] != 0 and res["evlog.run.id"]
            assert [(e.name, attrs(e.attributes).get("n")) for e in s.events][:1] == [("user.event", x)]
            assert s.start_time_unix_nano < s.end_time_unix_nano
        assert {tasks[x][0]["process.pid"] for x in tasks if x != 3} <= set(out["pids"])
        _res, bad = tasks[3]
        assert bad.status.code == 2 and bad.status.message == "ValueError: three"
        [exc] = [attrs(e.attributes) for e in bad.events if e.name == "exception"]
        assert exc["exception.type"] == "ValueError" and exc["exception.message"] == "three"
        assert "raise ValueError" in exc["exception.stacktrace"] and exc["exception.escaped"] == "True"
        assert all(tasks[x][1].status.code == 0 for x in tasks if x != 3)


def test_a_scheduler_killed_with_sigkill_loses_nothing_it_recorded_before_its_last_shipment(tmp_path):
    """The scheduler's process dies by SIGKILL once its transitions have been shipped, so the exporter
    process builds every task's span (the export delay is 60 s: none was out before)."""
    with PlainReceiver() as r:
        proc, out = _run(tmp_path, r, "kill")
        assert proc.returncode == -9 or proc.returncode == 137, proc.returncode
        assert out["shipped"] == 40, out
        r.wait_for(lambda: len(_tasks(r, "inc")) >= 40 and _tasks(r, "fail"), timeout=30)
        keys = {attrs(s.attributes)["dask.task.key"] for _res, s in _tasks(r, "inc")}
        assert len(keys) == 40


ROUNDS_APP = r'''
import json, time
from distributed import Client, LocalCluster

def slow(x):
    time.sleep(0.1)
    return x

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        n = len(client.gather(client.map(slow, range(180), key=[f"slow-{i}" for i in range(180)])))
        time.sleep(9)  # the collector comes back meanwhile
    print(json.dumps({"tasks": n}), flush=True)
'''


def test_a_collector_down_for_ten_seconds_loses_no_task_span_once_it_is_back(tmp_path):
    """The exporter process keeps a batch that failed and tries it again until the collector answers.
    (The program's own spans and the workers' execute spans still go through the in-process SDK, whose
    batch processor drops what fails: not checked here.)"""
    import subprocess
    import time

    app = tmp_path / "app.py"
    app.write_text(ROUNDS_APP)
    first = PlainReceiver().__enter__()
    port = first.port
    # task spans only (the exporter process's path); the program's own signals have no retry of evlog's
    env = evlog_env({**first.env(), "OTEL_EXPORTER_OTLP_TIMEOUT": "2", "OTEL_METRICS_EXPORTER": "none",
                     "OTEL_LOGS_EXPORTER": "none"})
    proc = subprocess.Popen([PYTHON, "-m", "evlog.launcher", PYTHON, str(app)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        first.wait_for(lambda: any(s.name == "dask.task slow" for _r, s in first.spans()), timeout=60)
        first.server.stop(None)  # the collector goes down ...
        time.sleep(10)  # the outage the test is about, not a wait for a result
        with PlainReceiver(port) as second:  # ... and comes back on the same address
            out, err = proc.communicate(timeout=120)
            keys = {attrs(s.attributes)["dask.task.key"] for _r, s in first.spans() + second.spans()
                    if s.name == "dask.task slow"}
            assert keys == {f"slow-{i}" for i in range(180)}, sorted(keys)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err.decode()[-2000:]


TWO_ROUNDS_APP = r'''
import json, sys, time
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        first = sum(client.gather(client.map(inc, range(20))))
        print("first", flush=True)
        sys.stdin.readline()  # the test kills the exporter process meanwhile
        second = sum(client.gather(client.map(inc, range(100, 120))))
    print(json.dumps({"first": first, "second": second}), flush=True)
'''


def test_the_program_goes_on_when_the_exporter_process_dies_and_the_drop_is_counted(tmp_path):
    import subprocess

    import psutil

    app = tmp_path / "app.py"
    app.write_text(TWO_ROUNDS_APP)
    with PlainReceiver() as r:
        proc = subprocess.Popen([PYTHON, "-m", "evlog.launcher", PYTHON, str(app)], env=evlog_env(r.env()),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
        try:
            assert proc.stdout.readline().strip() == b"first"
            # the program's first round exported: it is connected to the exporter process (which the launcher
            # starts with it; killed before that, the program would start one of its own)
            r.wait_for(lambda: any(s.name == "dask.task inc" for _r, s in r.spans()), timeout=60)
            exporters = [c for c in psutil.Process(proc.pid).children() if "evlog.exporter.process" in " ".join(c.cmdline())]
            assert len(exporters) == 1
            exporters[0].kill()  # a zombie until the launcher reaps it at the end
            out, err = proc.communicate(b"\n", timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0
    assert json.loads(out.decode().splitlines()[-1]) == {"first": 210, "second": 2210}
    err = err.decode()
    assert err.count("evlog: the exporter process cannot be reached") == 1, err
    assert "Traceback" not in err
    summary = [line for line in err.splitlines() if line.startswith("evlog: ") and " spans, " in line]
    assert len(summary) == 1 and "dropped (could not be exported)" in summary[0], err


CONFIGURED_APP = r'''
import sys
import evlog
evlog.configure(run_dir=sys.argv[1], consumers="none")
from distributed import Client, LocalCluster

def inc(x):
    return x + 1

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        print(sum(client.gather(client.map(inc, range(10)))))
'''


def test_a_process_without_the_launcher_starts_its_own_exporter_even_with_a_stale_address(tmp_path):
    """evlog.configure() with no launcher, and EVLOG_EXPORTER left over from a run that is over: the
    process starts its own exporter process, and waits for it at exit, so the spans are in the folder."""
    import subprocess

    from helpers import read_run_folder, without_run_folder_notice

    app = tmp_path / "app.py"
    app.write_text(CONFIGURED_APP)
    run_dir = tmp_path / "run"
    proc = subprocess.run([PYTHON, str(app), str(run_dir)], env=evlog_env({"EVLOG_EXPORTER": "evlog-gone-1234"}),
                          capture_output=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.split() == [b"55"], proc.stderr.decode()[-2000:]
    assert "evlog:" not in without_run_folder_notice(proc.stderr.decode()), proc.stderr.decode()
    spans = read_run_folder(str(run_dir))["spans"]
    assert len([s for s in spans if s["name"] == "dask.task inc"]) == 10


CONSOLE_APP = r'''
import json, os, sys
from opentelemetry import trace

with trace.get_tracer("app").start_as_current_span("step") as span:
    print("plain line", flush=True)
    print(json.dumps({"loss": 0.25, "epoch": 3}), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    ctx = span.get_span_context()
print(json.dumps({"pid": os.getpid(), "trace": format(ctx.trace_id, "032x"), "span": format(ctx.span_id, "016x")}),
      flush=True)
'''


def test_console_records_reach_a_plain_receiver_as_the_sdk_would_send_them(tmp_path):
    """The program's console lines, parsed and built in the exporter process: each a log record with the
    program's resource, its stream, the span current when it was written, metadata as an event."""
    app = tmp_path / "console.py"
    app.write_text(CONSOLE_APP)
    with PlainReceiver() as r:
        proc = run_instrumented([PYTHON, str(app)], env=evlog_env({**r.env(), "EVLOG_SUMMARY": "false",
                                                                   "EVLOG_CAPTURE": "enabled"}), timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        out = json.loads(proc.stdout.decode().splitlines()[-1])
        r.wait_for(lambda: len(r.logs()) >= 4, timeout=60)
        recs = {}
        for res, rec in r.logs():
            body = value(rec.body)
            recs[json.dumps(body, sort_keys=True) if isinstance(body, dict) else body] = (res, rec)
        res, plain = recs["plain line"]
        assert res["process.pid"] == out["pid"] and res["evlog.run.id"]
        assert attrs(plain.attributes) == {"log.iostream": "stdout"} and not plain.event_name
        assert plain.trace_id.hex() == out["trace"] and plain.span_id.hex() == out["span"]
        assert plain.time_unix_nano > 0 and plain.observed_time_unix_nano >= plain.time_unix_nano
        _res, meta = recs[json.dumps({"epoch": 3, "loss": 0.25})]
        assert meta.event_name == "evlog.metadata" and attrs(meta.attributes) == {"log.iostream": "stdout"}
        _res, err = recs["to stderr"]
        assert attrs(err.attributes) == {"log.iostream": "stderr"} and err.span_id.hex() == out["span"]
        last = recs[json.dumps(out, sort_keys=True)][1]
        assert not any(last.span_id)  # written after the span ended: no span
