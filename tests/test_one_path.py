"""One path for every signal: the program's own spans, logs, metrics and Python logging go through the run's
exporter process (evlog/observed/sdk_records.py -> evlog/builders/sdk_rebuild.py), judged by a plain
grpcio + opentelemetry-proto receiver."""
from __future__ import annotations

import json
import subprocess
import textwrap
import time

import pytest
from helpers import PYTHON, evlog_env, run_instrumented
from plain_receiver import PlainReceiver, attrs

BURST = 100_000


def _json_line(proc) -> dict:
    for line in proc.stdout.decode().splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise AssertionError(f"no RESULT line\nstdout:\n{proc.stdout.decode()}\nstderr:\n{proc.stderr.decode()}")


def _distinct(receivers, name: str) -> set:
    return {attrs(s.attributes)["i"] for r in receivers for _res, s in r.spans() if s.name == name}


def _all_burst(receivers, timeout: float) -> set:
    """The distinct ``i`` of the burst's spans once all have arrived (polled outside the receivers' locks:
    decoding 100,000 spans takes a while, and the receivers must go on taking requests meanwhile)."""
    deadline = time.monotonic() + timeout
    while True:
        n = sum(len(s.spans) for r in receivers for req in list(r.requests) for rs in req.resource_spans
                for s in rs.scope_spans)
        if n >= BURST:
            got = _distinct(receivers, "burst")
            if len(got) == BURST:
                return got
        assert time.monotonic() < deadline, f"{n} spans arrived"
        time.sleep(0.5)


def test_a_burst_of_user_spans_arrives_whole():
    code = f"""
    from opentelemetry import trace
    tracer = trace.get_tracer("burst")
    for i in range({BURST}):
        with tracer.start_as_current_span("burst") as s:
            s.set_attribute("i", i)
    """
    with PlainReceiver() as r:
        proc = run_instrumented(code, env=evlog_env(r.env(), EVLOG_CONSUMERS="none"), timeout=300)
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        got = _all_burst([r], timeout=120)
    assert got == set(range(BURST))
    assert b"dropped" not in proc.stderr, proc.stderr.decode()


def _line(proc) -> bytes:
    line = proc.stdout.readline()
    assert line, proc.stderr.read().decode()[-3000:]
    return line


def test_a_burst_made_while_the_collector_is_down_arrives_once_it_is_back():
    code = f"""
    import sys
    from opentelemetry import trace
    tracer = trace.get_tracer("burst")
    for i in range({BURST}):
        if i == {BURST // 2}:
            print("half", flush=True)
            sys.stdin.readline()  # the test stops the collector
        with tracer.start_as_current_span("burst") as s:
            s.set_attribute("i", i)
    print("made", flush=True)
    sys.stdin.readline()  # the test lets us go once everything arrived
    """
    first = PlainReceiver().__enter__()
    port = first.port
    env = evlog_env(first.env(), EVLOG_CONSUMERS="none")
    proc = subprocess.Popen([PYTHON, "-m", "evlog.launcher", PYTHON, "-c", textwrap.dedent(code)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    second = None
    try:
        assert _line(proc) == b"half\n"
        first.wait_for(lambda: sum(len(s.spans) for req in first.requests for rs in req.resource_spans
                                   for s in rs.scope_spans) >= BURST // 2, timeout=120)
        first.__exit__(None, None, None)  # the collector is gone for 10 s while the program makes the other half
        down = time.monotonic()
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert _line(proc) == b"made\n"
        time.sleep(max(0.0, 10 - (time.monotonic() - down)))  # the outage the test is about, not a wait for a result
        second = PlainReceiver(port).__enter__()
        got = _all_burst([first, second], timeout=180)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        if second is not None:
            second.__exit__(None, None, None)
    assert got == set(range(BURST))
    assert proc.returncode == 0 and b"Traceback" not in err, err.decode()[-2000:]


IMPORTS_PROGRAM = r"""
import json, logging, sys
from distributed import Client, LocalCluster
from opentelemetry import metrics, trace

HEAVY = ("grpc", "google.protobuf", "opentelemetry.exporter")

def heavy():
    return sorted(m for m in sys.modules if m.startswith(HEAVY))

def work(x):
    with trace.get_tracer("task").start_as_current_span("inside"):
        logging.getLogger("task").warning("task %s", x)
        metrics.get_meter("task").create_counter("task.calls").add(1)
    return x

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.gather(client.map(work, range(4)))
        with trace.get_tracer("app").start_as_current_span("main"):
            logging.getLogger("app").warning("main")
            metrics.get_meter("app").create_counter("app.calls").add(1)
        trace.get_tracer_provider().force_flush()
        metrics.get_meter_provider().force_flush()
        workers = client.run(heavy)
    print("RESULT " + json.dumps({"program": heavy(), "workers": workers}))
"""


def test_no_process_of_the_program_holds_grpc_protobuf_or_an_exporter():
    pytest.importorskip("distributed")
    with PlainReceiver() as r:
        proc = run_instrumented(IMPORTS_PROGRAM, env=evlog_env(r.env(), OTEL_METRIC_EXPORT_INTERVAL="200"), timeout=240)
        res = _json_line(proc)
        # it exported: the user's spans, logs and metrics of both processes reached the receiver
        r.wait_for(lambda: {"inside", "main"} <= {s.name for _res, s in r.spans()}, timeout=60)
        r.wait_for(lambda: {"task 0", "main"} <= {rec.body.string_value for _res, rec in r.logs()}, timeout=60)
        r.wait_for(lambda: {"task.calls", "app.calls"} <= {m.name for _res, m in r.metrics()}, timeout=60)
    assert res["program"] == [], res
    assert list(res["workers"].values()) == [[]], res


def test_importing_asyncio_loads_no_sdk_grpc_or_protobuf():
    code = "import asyncio, sys; print('RESULT ' + __import__('json').dumps(sorted(m for m in sys.modules " \
           "if m.startswith(('opentelemetry.sdk', 'grpc', 'google.protobuf')))))"
    proc = run_instrumented([PYTHON, "-c", code], env=evlog_env(EVLOG_SUMMARY="false"), timeout=60)
    assert _json_line(proc) == [], proc.stdout.decode()


LOGGING_PROGRAM = r"""
import json, logging
from distributed import Client, LocalCluster
from opentelemetry import trace

def warn(x):
    logging.getLogger("task").warning("in task %s", x)
    return x

def fail(x):
    raise ValueError("broken %s" % x)

if __name__ == "__main__":
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s")
    with trace.get_tracer("app").start_as_current_span("main") as span:
        logging.getLogger("app").warning("in main")
        main = "%032x/%016x" % (span.get_span_context().trace_id, span.get_span_context().span_id)
    logging.getLogger("app").info("below the level")
    print("a plain line", flush=True)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.submit(warn, 7, key="warn-7").result()
        try:
            client.submit(fail, 8, key="fail-8").result()
        except ValueError:
            pass
    print("RESULT " + json.dumps({"main": main}))
"""


def _records(r):
    return [(res, rec) for res, rec in r.logs()]


def _execute(r, key: str):
    return r.wait_for(lambda: [s for _res, s in r.spans() if s.name.startswith("dask.execute")
                               and attrs(s.attributes).get("dask.task.key") == key], timeout=60)[0]


@pytest.mark.parametrize("capture", ["metadata", "enabled"])
def test_python_logging_arrives_with_its_trace_context_and_once(capture):
    pytest.importorskip("distributed")
    with PlainReceiver() as r:
        proc = run_instrumented(LOGGING_PROGRAM, env=evlog_env(r.env(), EVLOG_CAPTURE=capture), timeout=240)
        res = _json_line(proc)
        r.wait_for(lambda: len([rec for _res, rec in r.logs() if rec.body.string_value.startswith("Compute Failed")]),
                   timeout=60)
        warn_span, fail_span = _execute(r, "warn-7"), _execute(r, "fail-8")
        logged = {rec.body.string_value.split("\n")[0]: rec for _res, rec in r.logs() if rec.severity_text}
        console = [rec.body.string_value for _res, rec in r.logs()
                   if attrs(rec.attributes).get("log.iostream") and not rec.severity_text]
    main = logged["in main"]
    assert f"{main.trace_id.hex()}/{main.span_id.hex()}" == res["main"]
    assert main.severity_text == "WARN" and main.severity_number == 13
    assert "below the level" not in logged
    task = logged["in task 7"]
    assert (task.trace_id, task.span_id) == (warn_span.trace_id, warn_span.span_id), "the task's record is in its span"
    failed = logged["Compute Failed"]
    assert (failed.trace_id, failed.span_id) == (fail_span.trace_id, fail_span.span_id), "in the failing task's trace"
    assert failed.severity_text == "ERROR"
    if capture == "enabled":
        assert attrs(failed.attributes)["log.iostream"] == "stderr", "it was printed there, and is exported once"
        assert "a plain line" in console, console  # the console is captured ...
        texts = [line for body in console for line in body.split("\n")]
        for message in ("in main", "in task 7", "Compute Failed"):  # ... but what logging exported is not sent twice
            assert not [t for t in texts if message in t], (message, console)
    else:
        assert console == []


LATE_LOGGING = r"""
import logging

class Late:
    def __del__(self):  # runs as the interpreter shuts down, when no module can be imported any more
        logging.getLogger("late").warning("logged at shutdown")

late = Late()
print("done")
"""


def test_a_record_logged_as_the_interpreter_shuts_down_goes_to_the_programs_handlers_only(tmp_path):
    proc = run_instrumented([PYTHON, "-c", LATE_LOGGING], env=evlog_env(EVLOG_RUN_DIR=str(tmp_path / "run")),
                            timeout=60)
    err = proc.stderr.decode()
    assert proc.returncode == 0 and proc.stdout.split() == [b"done"], err
    assert "logged at shutdown" in err and "evlog: a Python logging record" not in err, err


CONSUMERS_PROGRAM = r"""
import json
from distributed import Client, LocalCluster
import evlog

def inc(x):
    return x + 1

if __name__ == "__main__":
    ml = evlog.MultiEventLog()
    ml["bytes"] = evlog.consumers.BytesAllocd()
    ml["name"] = lambda ev: ev.name
    ml["kind"] = lambda ev: ev.kind
    evlog.set_log_sink(ml)
    out = {}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        first = client.map(inc, range(20))
        client.gather(first)
        out["running"] = ml.fetch()  # while the cluster runs and holds the results
        second = client.map(inc, range(100, 120))
        client.gather(second)
    out["closed"] = ml.fetch()  # after the cluster closed
    print("RESULT " + json.dumps(out))
"""


def test_consumers_see_each_task_when_it_happens():
    pytest.importorskip("distributed")
    proc = run_instrumented(CONSUMERS_PROGRAM, env=evlog_env(EVLOG_SUMMARY="false", OTEL_TRACES_EXPORTER="none",
                                                             OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none"),
                            timeout=240)
    res = _json_line(proc)
    for when, held_before in (("running", 0), ("closed", 20)):
        log = res[when]
        stream = [(b, k) for b, n, k in zip(log["bytes"], log["name"], log["kind"]) if n.startswith("dask.execute")]
        assert len(stream) == 40, (when, stream)
        # one thread: task k starts once task k-1's result (an int, 28 bytes) is held, and its own result is
        # stored after it finishes, so each start and finish reads the results held at that moment
        expected = [((held_before + i // 2) * 28, "start" if i % 2 == 0 else "finish") for i in range(40)]
        assert stream == expected, (when, stream)


EXIT_PROGRAM = r"""
import concurrent.futures as cf, multiprocessing as mp
from opentelemetry import trace

def work(x):
    with trace.get_tracer("w").start_as_current_span("inner"):
        return x * 2

if __name__ == "__main__":
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        print(sum(pool.map(work, range(50))))
    print("last line", flush=True)
"""


def test_exit_with_an_unreachable_collector_is_quick(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{dead}")
    prog = tmp_path / "prog.py"  # spawn children import the program's functions from its file
    prog.write_text(EXIT_PROGRAM)
    proc = subprocess.Popen([PYTHON, "-m", "evlog.launcher", PYTHON, str(prog)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        while True:
            line = _line(proc)
            if line == b"last line\n":
                break
        t = time.monotonic()
        _, err = proc.communicate(timeout=60)
        after = time.monotonic() - t
    finally:
        proc.kill()
    print(f"exit took {after:.2f} s after the last line")
    assert proc.returncode == 0, err.decode()
    # the goal is 1.5 s (BENCHMARKS.md: exit); this bound only catches the old path's 6-7.5 s
    assert after < 4.0, (after, err.decode())
    assert err.decode().count("exporting failed") == 1, err.decode()


def test_a_log_processor_the_program_adds_changes_what_is_exported():
    """As with the SDK's BatchLogRecordProcessor, a LogRecordProcessor the program adds (after evlog's) may
    change a record before it is exported: here it redacts the body and adds an attribute."""
    code = """
    import logging
    from opentelemetry import _logs

    class Redact:
        def on_emit(self, record):
            record.log_record.body = "[redacted]"
            record.log_record.attributes = {**(record.log_record.attributes or {}), "redacted": True}
        def shutdown(self): pass
        def force_flush(self, timeout_millis=30000): return True

    logging.getLogger("app").warning("before the processor")
    _logs.get_logger_provider().add_log_record_processor(Redact())
    logging.getLogger("app").warning("password=hunter2")
    """
    with PlainReceiver() as r:
        proc = run_instrumented(code, env=evlog_env(r.env(), EVLOG_CAPTURE="off"), timeout=120)
        assert proc.returncode == 0, proc.stderr.decode()
        r.wait_for(lambda: len([rec for _res, rec in r.logs() if rec.severity_text]) >= 2, timeout=30)
        bodies = {rec.body.string_value: attrs(rec.attributes).get("redacted") for _res, rec in r.logs()
                  if rec.severity_text}
    assert bodies == {"before the processor": None, "[redacted]": True}, bodies
