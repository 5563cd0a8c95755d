"""The run's exporter process: what it sends, judged by a plain OTLP receiver; what survives a crash."""
from __future__ import annotations

import json

from helpers import PYTHON, evlog_env, run_instrumented
from plain_receiver import PlainReceiver, attrs

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
        print(json.dumps({"result": total, "pid": os.getpid()}), flush=True)
        if sys.argv[1:] == ["kill"]:
            time.sleep(1.5)  # three shipping intervals: everything recorded has left the process
            os.kill(os.getpid(), signal.SIGKILL)
'''


def _run(tmp_path, receiver, *args):
    app = tmp_path / "app.py"
    app.write_text(APP)
    env = evlog_env({**receiver.env(), "EVLOG_SUMMARY": "false", "OTEL_BSP_SCHEDULE_DELAY": "60000"})
    proc = run_instrumented([PYTHON, str(app), *args], env=env, timeout=120)
    return proc, json.loads(proc.stdout.decode().splitlines()[0])


def _tasks(receiver, prefix):
    return [(res, s) for res, s in receiver.spans() if s.name == f"dask.task {prefix}"]


def test_dask_task_spans_reach_a_plain_receiver_in_the_client_calls_trace(tmp_path):
    with PlainReceiver() as r:
        proc, out = _run(tmp_path, r)
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


def test_a_scheduler_killed_with_sigkill_loses_nothing_it_recorded_before_its_last_shipment(tmp_path):
    """The scheduler's process dies by SIGKILL 1.5 s after its tasks: its transitions had been shipped,
    so the exporter process builds every task's span (the export delay is 60 s: none was out before)."""
    with PlainReceiver() as r:
        proc, out = _run(tmp_path, r, "kill")
        assert proc.returncode == -9 or proc.returncode == 137, proc.returncode
        r.wait_for(lambda: len(_tasks(r, "inc")) >= 40 and _tasks(r, "fail"), timeout=30)
        keys = {attrs(s.attributes)["dask.task.key"] for _res, s in _tasks(r, "inc")}
        assert len(keys) == 40
