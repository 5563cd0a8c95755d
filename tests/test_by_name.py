"""A module-level tracer and meter counter, the OpenTelemetry docs' own pattern, used inside functions that
Dask, a process pool or a fork Pool runs (evlog/observed/by_name.py): the program runs as without evlog,
and its spans nest under the task spans."""
from __future__ import annotations

import json
import subprocess

import pytest
from helpers import PYTHON, evlog_env, read_run_folder, run_instrumented

PROGRAM = r"""
import os, subprocess, sys, tempfile, time
from opentelemetry import metrics, trace

tracer = trace.get_tracer(__name__)
counter = metrics.get_meter(__name__).create_counter("inc.calls")

def inc(x):
    with tracer.start_as_current_span("inner"):
        counter.add(1)
        return x + 1

def dask_separate():
    from distributed import Client
    folder = tempfile.mkdtemp()
    sched_file = os.path.join(folder, "scheduler.json")
    dask = os.path.join(os.path.dirname(sys.executable), "dask")
    procs = [subprocess.Popen([dask, "scheduler", "--scheduler-file", sched_file, "--port", "0", "--no-dashboard"],
                              stderr=subprocess.DEVNULL)]
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(sched_file):
            assert time.monotonic() < deadline and procs[0].poll() is None, "the scheduler did not start"
            time.sleep(0.1)
        procs.append(subprocess.Popen([dask, "worker", "--scheduler-file", sched_file, "--nthreads", "1",
                                       "--no-dashboard"], stderr=subprocess.DEVNULL))
        with Client(scheduler_file=sched_file) as client:
            client.wait_for_workers(1, timeout=60)
            print(client.gather(client.map(inc, range(6))))
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(60)

if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "local":
        from distributed import Client, LocalCluster
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
                Client(c) as client:
            print(client.gather(client.map(inc, range(6))))
    elif mode == "separate":
        dask_separate()
    elif mode == "spawn":
        import concurrent.futures as cf, multiprocessing as mp
        with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
            print(list(pool.map(inc, range(6))))
    elif mode == "fork":
        import multiprocessing as mp
        with mp.get_context("fork").Pool(2) as pool:
            print(pool.map(inc, range(6), chunksize=1))
"""

TASKS = ("dask.execute", "futures.task", "multiprocessing.task", "futures.chunk", "multiprocessing.chunk")


@pytest.mark.parametrize("mode", ["local", "separate", "spawn", "fork"])
def test_module_level_tracers_and_meters_work_in_tasks(tmp_path, mode):
    if mode in ("local", "separate"):
        pytest.importorskip("distributed")
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    env = evlog_env()
    plain = subprocess.run([PYTHON, str(prog), mode], env=env, cwd=tmp_path, capture_output=True, timeout=240)
    assert plain.returncode == 0, plain.stderr.decode()[-3000:]
    run = tmp_path / "run"
    proc = run_instrumented([PYTHON, str(prog), mode], env=evlog_env(EVLOG_RUN_DIR=run, EVLOG_SUMMARY="false"),
                            cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    assert proc.stdout == plain.stdout == b"[1, 2, 3, 4, 5, 6]\n"
    data = read_run_folder(str(run))
    by_id = {s["span_id"]: s for s in data["spans"]}
    inner = [s for s in data["spans"] if s["name"] == "inner"]
    assert len(inner) == 6
    parents = {by_id[s["parent_span_id"]]["name"].split(" ")[0] for s in inner}
    assert parents <= set(TASKS), parents
    calls = [m for m in data["metrics"] if m["name"] == "inc.calls"]
    assert calls, "the counter made in the task counted there"


def test_a_tracer_meter_and_counter_pickle_by_name_and_come_back_as_this_processs_own(tmp_path):
    code = """
    import json, pickle
    from opentelemetry import metrics, trace, _logs
    tracer = trace.get_tracer("mod", "1.0")
    meter = metrics.get_meter("mod")
    counter = meter.create_counter("c", unit="1", description="d")
    hist = meter.create_histogram("h", explicit_bucket_boundaries_advisory=[1.0, 2.0])
    logger = _logs.get_logger("mod")
    kind = lambda obj: type(obj.__wrapped__).__module__ + "." + type(obj.__wrapped__).__qualname__
    found = {}  # what each wraps, here and back from a pickle
    for name, obj in (("tracer", tracer), ("meter", meter), ("counter", counter), ("histogram", hist),
                      ("logger", logger)):
        found[name] = [kind(obj), kind(pickle.loads(pickle.dumps(obj)))]
    found["the same counter"] = pickle.loads(pickle.dumps(counter)).__wrapped__ is counter.__wrapped__
    with pickle.loads(pickle.dumps(tracer)).start_as_current_span("after") as span:
        found["recording"] = span.is_recording()
    print(json.dumps(found))
    """
    proc = run_instrumented(code, env=evlog_env(EVLOG_RUN_DIR=tmp_path / "run", EVLOG_SUMMARY="false"))
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    found = json.loads(proc.stdout)
    for name in ("tracer", "meter", "counter", "histogram", "logger"):
        here, back = found[name]
        assert back == here, (name, found)
    assert found["the same counter"], found  # the SDK's own, as registered
    assert found["recording"], found
