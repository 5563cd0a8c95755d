"""The task profiler (issue 31) on real runs: Dask workers and pool processes under evlog-instrument, their
task spans' ``evlog.profile.top``, the ``evlog.profile`` pprof log records a plain OTLP receiver gets, the
report's hottest functions per prefix, the off switch, the sampler's back-off, and a collector that
refuses the profiles."""
from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
import threading
from concurrent import futures

import grpc
import pprof_proto
import pytest
from helpers import PROFILE_DASK_APP as DASK_APP
from helpers import PROFILE_TASKS as TASKS
from helpers import PYTHON, Serve, evlog_env, run_instrumented
from plain_receiver import PlainReceiver, attrs, value

# TASKS (tasks.py) and DASK_APP are shared with the dashboard's flame graph tests: they live in helpers

POOL_APP = r'''
import json, os
from concurrent.futures import ProcessPoolExecutor
from tasks import crunch, parse

if __name__ == "__main__":
    with ProcessPoolExecutor(2) as pool:
        a = list(pool.map(parse, range(8)))
        b = list(pool.map(crunch, range(8)))
    print(json.dumps({"parse": len(a), "crunch": len(b)}), flush=True)
'''

DEF_LINES = {name: i + 1 for i, line in enumerate(TASKS.splitlines()) for name in ("slow_parse_inner", "crunch_numbers")
             if line.startswith(f"def {name}(")}


def _write(tmp, app: str) -> str:
    (tmp / "tasks.py").write_text(TASKS)
    (tmp / "app.py").write_text(app)
    return str(tmp / "app.py")


def _run(tmp, app: str, env: dict, *args, timeout: float = 240):
    path = _write(tmp, app)
    env = evlog_env({"PYTHONPATH": str(tmp), "EVLOG_SUMMARY": "false", **env})
    proc = run_instrumented([PYTHON, path, *args], env=env, cwd=str(tmp), timeout=timeout)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    return json.loads(proc.stdout.decode().splitlines()[-1]), proc


def _report(run_dir: str, fmt: str = "json"):
    out = subprocess.run([PYTHON, "-m", "evlog.cli", "report", run_dir, "--format", fmt], capture_output=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    return json.loads(out.stdout) if fmt == "json" else out.stdout.decode()


def _profiles(receiver) -> list:
    return [(res, rec) for res, rec in receiver.logs() if rec.event_name == "evlog.profile"]


def _pprof(rec):
    body = value(rec.body)
    assert isinstance(body, str)
    return pprof_proto.parse(gzip.decompress(base64.b64decode(body)))


@pytest.fixture(scope="module")
def dask_run(tmp_path_factory):
    """One Dask run (2 worker processes): OTLP to a plain receiver and the run folder, both."""
    tmp = tmp_path_factory.mktemp("profile-dask")
    with PlainReceiver() as r:
        out, _proc = _run(tmp, DASK_APP, {**r.env(), "OTEL_TRACES_EXPORTER": "otlp,file",
                                          "OTEL_LOGS_EXPORTER": "otlp,file", "OTEL_METRICS_EXPORTER": "none",
                                          "EVLOG_RUN_DIR": str(tmp / "run")})
        r.wait_for(lambda: len([1 for _r, s in r.spans() if s.name.startswith("dask.execute ")]) >= 32, timeout=60)
        r.wait_for(lambda: {attrs(rec.attributes).get("dask.task.prefix") for _res, rec in _profiles(r)}
                   >= {"parse", "crunch"}, timeout=60)
        yield {"out": out, "spans": r.spans(), "logs": r.logs(), "profiles": _profiles(r), "run_dir": str(tmp / "run")}


@pytest.mark.slow
def test_dask_execute_spans_carry_their_tasks_hottest_function(dask_run):
    for prefix, fn in (("parse", "slow_parse_inner"), ("crunch", "crunch_numbers")):
        spans = [s for _res, s in dask_run["spans"] if s.name == f"dask.execute {prefix}"]
        assert len(spans) == 16
        tops = [attrs(s.attributes).get("evlog.profile.top") for s in spans]
        assert sum(t is not None for t in tops) >= 12, tops  # a task of about 50 ms: several samples
        for t in filter(None, tops):
            assert t.startswith(f"{fn} ") and t.split(", ")[0].endswith("%"), t
    # the scheduler's dask.task spans are not executions: no samples
    assert all("evlog.profile.top" not in attrs(s.attributes) for _r, s in dask_run["spans"] if s.name.startswith("dask.task "))


@pytest.mark.slow
def test_a_plain_receiver_gets_each_prefixs_samples_as_pprof_in_log_records(dask_run):
    execute = {s.span_id.hex(): attrs(s.attributes)["dask.task.prefix"] for _r, s in dask_run["spans"]
               if s.name.startswith("dask.execute ")}
    pids = set()
    seen = {"parse": 0, "crunch": 0}
    rooted = {True: 0, False: 0}
    for res, rec in dask_run["profiles"]:
        a = attrs(rec.attributes)
        prefix = a["dask.task.prefix"]
        assert a["profiling.data.format"] == "pprof-gzip-base64" and a["evlog.profile.interval"] == 0.01
        assert res["dask.role"] == "worker" and rec.time_unix_nano > 0
        pids.add(res["process.pid"])
        prof = _pprof(rec)  # protobuf's own parser
        s = prof.string_table
        assert [(s[t.type], s[t.unit]) for t in prof.sample_type] == [("samples", "count"), ("wall", "nanoseconds")]
        assert prof.period == 10_000_000 and (s[prof.period_type.type], s[prof.period_type.unit]) == ("wall", "nanoseconds")
        got = pprof_proto.samples(prof)
        assert sum(v[0] for _st, v, _l in got) == a["evlog.profile.samples"]
        for stack, values, labels in got:
            assert execute[labels["span_id"]] == prefix  # each sample belongs to a task span of its prefix
            assert values[0] >= 1 and values[1] > 0 and labels["thread.id"] > 0 and len(labels["trace_id"]) == 32
            # Dask's own frames below the task's function are left out; a sample of Dask's bookkeeping inside the
            # execution (its metering context managers, after the function returned) has no task function at all
            assert stack[-1] == prefix or prefix not in stack, stack
            rooted[stack[-1] == prefix] += values[0]
            seen[prefix] += values[0] * (stack[0] == {"parse": "slow_parse_inner", "crunch": "crunch_numbers"}[prefix])
    assert seen["parse"] >= 20 and seen["crunch"] >= 20, seen
    assert rooted[True] >= 10 * rooted[False], rooted
    assert pids == set(dask_run["out"]["worker_pids"])  # both workers sampled their own tasks


@pytest.mark.slow
def test_the_report_names_each_prefixs_hottest_function_with_file_line_self_and_total(dask_run):
    rep = _report(dask_run["run_dir"])
    found = {}
    for c in rep["computations"]:
        for prefix, p in c["prefixes"].items():
            if "profile" in p:
                found[prefix] = p["profile"]
    for prefix, fn in (("parse", "slow_parse_inner"), ("crunch", "crunch_numbers")):
        top = found[prefix]["top"]
        assert top[0]["function"] == fn, top
        assert top[0]["file"].endswith("tasks.py") and top[0]["line"] == DEF_LINES[fn]
        assert 0 < top[0]["self"] <= top[0]["total"] <= found[prefix]["seconds"] + 1e-6
        assert [t["self"] for t in top] == sorted((t["self"] for t in top), reverse=True)
        assert any(t["function"] == prefix and t["self"] < t["total"] for t in top)  # the task's function: total only
    assert any("slow_parse_inner (tasks.py:" in a and "parse" in a for a in rep["advice"]), rep["advice"]
    text = _report(dask_run["run_dir"], "text")
    assert "Hottest functions of parse" in text and "slow_parse_inner" in text and "crunch_numbers" in text
    html = os.path.join(dask_run["run_dir"], "report.html")
    out = subprocess.run([PYTHON, "-m", "evlog.cli", "report", dask_run["run_dir"], "--format", "html", "-o", html],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    page = open(html, encoding="utf-8").read()
    assert "Hottest functions of parse" in page and '<table class="profile">' in page and "slow_parse_inner" in page


@pytest.mark.slow
def test_the_sampling_thread_samples_in_the_workers_that_ran_tasks_only(dask_run):
    out = dask_run["out"]
    assert all(names.count("evlog-profile") == 1 for names in out["worker_threads"]), out
    # the client's process ran no task: its sampler (started with Dask's instrumentation, as evlog's other
    # threads are, so Dask's own thread-leak checks see none appear) never sampled
    assert out["own_samples"] == 0, out


@pytest.mark.slow
def test_profile_interval_off_starts_no_thread_and_sends_no_profile(tmp_path):
    out, _ = _run(tmp_path, DASK_APP, {"EVLOG_PROFILE_INTERVAL": "off", "EVLOG_RUN_DIR": str(tmp_path / "run")}, "4")
    assert out["parse"] == 4 and all("evlog-profile" not in names for names in out["worker_threads"])
    from helpers import read_run_folder

    run = read_run_folder(str(tmp_path / "run"))
    assert not [r for r in run["logs"] if r["event_name"] == "evlog.profile"]
    executes = [s for s in run["spans"] if s["name"].startswith("dask.execute ")]
    assert len(executes) == 8 and all("evlog.profile.top" not in s["attributes"] for s in executes)


@pytest.mark.slow
def test_process_pool_tasks_get_the_attribute_the_records_and_the_report(tmp_path):
    with PlainReceiver() as r:
        _run(tmp_path, POOL_APP, {**r.env(), "OTEL_TRACES_EXPORTER": "otlp,file", "OTEL_LOGS_EXPORTER": "otlp,file",
                                  "OTEL_METRICS_EXPORTER": "none", "EVLOG_RUN_DIR": str(tmp_path / "run")})
        r.wait_for(lambda: len([1 for _r, s in r.spans() if s.name.startswith("futures.task ")]) >= 16, timeout=60)
        r.wait_for(lambda: {attrs(rec.attributes).get("code.function.name") for _res, rec in _profiles(r)}
                   >= {"tasks.parse", "tasks.crunch"}, timeout=60)
        for name, fn in (("tasks.parse", "slow_parse_inner"), ("tasks.crunch", "crunch_numbers")):
            tops = [attrs(s.attributes).get("evlog.profile.top") for _r, s in r.spans()
                    if s.name.startswith("futures.task ") and attrs(s.attributes)["code.function.name"] == name]
            assert len(tops) == 8 and sum(t is not None for t in tops) >= 6, tops
            assert all(t.startswith(f"{fn} ") for t in tops if t), tops
        for _res, rec in _profiles(r):
            a = attrs(rec.attributes)
            for stack, _values, _labels in pprof_proto.samples(_pprof(rec)):
                assert stack[-1] == a["code.function.name"].rpartition(".")[2]  # cut at the pool's wrapper
    rep = _report(str(tmp_path / "run"))
    for name, fn in (("tasks.parse", "slow_parse_inner"), ("tasks.crunch", "crunch_numbers")):
        top = rep["pools"]["functions"][name]["profile"]["top"]
        assert top[0]["function"] == fn and top[0]["file"].endswith("tasks.py"), top


BACKOFF_APP = r'''
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from evlog.observed import profiler

def deep(n, until):
    if n:
        return deep(n - 1, until)
    while time.perf_counter() < until:
        pass
    return 0

if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    with ThreadPoolExecutor(1) as pool:
        pool.submit(deep, 4000, time.perf_counter() + 0.6).result()
    print(json.dumps(profiler.stats()), flush=True)
'''


@pytest.mark.slow
def test_a_sampler_whose_ticks_cost_over_a_tenth_of_the_interval_skips_ticks_and_counts_them(tmp_path):
    """Stacks 4,000 frames deep at a 1 ms interval: a tick costs more than 0.1 ms, so ticks are skipped."""
    st, _ = _run(tmp_path, BACKOFF_APP, {"EVLOG_PROFILE_INTERVAL": "1ms", "EVLOG_RUN_DIR": str(tmp_path / "run")})
    assert st["interval"] == 0.001 and st["samples"] > 0 and st["skipped"] > 0, st
    assert st["cpu_s"] / st["ticks"] > 0.0001  # why it backed off


CONSOLE_APP = DASK_APP.replace('print(json.dumps({"parse"', 'print("every line arrives", flush=True)\n        print(json.dumps({"parse"')


@pytest.mark.slow
def test_a_collector_refusing_the_profiles_costs_the_spans_and_console_logs_nothing(tmp_path):
    """The collector answers INVALID_ARGUMENT to every logs request holding an evlog.profile record (as one
    with a size limit might): the spans and the console's log records still all arrive."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc

    with PlainReceiver() as r:
        refused = []

        class Refusing(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):
                names = {rec.event_name for rl in request.resource_logs for sl in rl.scope_logs for rec in sl.log_records}
                if "evlog.profile" in names:
                    refused.append(1)
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no profiles here")
                with r._cond:
                    r.log_requests.append(request)
                    r._cond.notify_all()
                return logs_service_pb2.ExportLogsServiceResponse()

        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Refusing(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            env = {**r.env(), "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": f"http://127.0.0.1:{port}",
                   "OTEL_METRICS_EXPORTER": "none", "EVLOG_CAPTURE": "enabled"}
            out, proc = _run(tmp_path, CONSOLE_APP, env, "8")
            r.wait_for(lambda: len([1 for _r, s in r.spans() if s.name.startswith("dask.execute ")]) >= 16, timeout=60)
            r.wait_for(lambda: any(value(rec.body) == "every line arrives" for _res, rec in r.logs()), timeout=60)
        finally:
            server.stop(None)
    assert refused and not _profiles(r)
    assert len([1 for _r, s in r.spans() if s.name.startswith("dask.task ")]) >= 16
    assert out["parse"] == 8


def test_pprof_bodies_parse_with_protobuf_and_read_back_with_evlogs_decoder():
    from evlog import pprof

    samples = [((("inner", "/w/a.py", 10), ("outer", "/w/a.py", 3)), (5, 50_000_000), {"span_id": "00ab", "thread.id": 7}),
               ((("outer", "/w/a.py", 3),), (1, 10_000_000), {"span_id": "00cd", "thread.id": 7})]
    data = pprof.encode(samples, (("samples", "count"), ("wall", "nanoseconds")), ("wall", "nanoseconds"), 10_000_000,
                        1_000, 2_000)
    prof = pprof_proto.parse(data)
    assert prof.period == 10_000_000 and prof.time_nanos == 1_000 and prof.duration_nanos == 2_000
    assert pprof_proto.samples(prof) == [(["inner", "outer"], [5, 50_000_000], {"span_id": "00ab", "thread.id": 7}),
                                         (["outer"], [1, 10_000_000], {"span_id": "00cd", "thread.id": 7})]
    fns = {prof.string_table[f.name]: (prof.string_table[f.filename], f.start_line) for f in prof.function}
    assert fns == {"inner": ("/w/a.py", 10), "outer": ("/w/a.py", 3)}
    back = pprof.from_body(pprof.to_body(data))
    assert back["samples"] == [(st, list(v), lb) for st, v, lb in samples]
    with pytest.raises(pprof.DecodeError):
        pprof.from_body("not base64 at all!")


def test_a_file_name_that_is_not_utf8_is_written_with_a_replacement_character():
    """A source file whose name is not UTF-8 reaches Python with surrogateescape's lone surrogates; pprof's
    string table holds UTF-8 strings, which a strict parser (Go's, pprof's own) checks."""
    from evlog import pprof

    name = os.fsdecode(b"/w/caf\xe9.py")  # Latin-1 bytes on disk: "/w/caf\udce9.py"
    samples = [((("f", name, 1),), (1, 10_000_000), {})]
    data = pprof.encode(samples, (("samples", "count"), ("wall", "nanoseconds")), ("wall", "nanoseconds"), 10_000_000)
    prof = pprof_proto.parse(data)
    assert "/w/caf\ufffd.py" in list(prof.string_table)
    for text in prof.string_table:
        text.encode("utf-8")


def test_the_builder_makes_one_record_per_prefix_and_leaves_dasks_frames_out():
    """The exporter process's builder on records as a worker ships them (no cluster)."""
    from opentelemetry.sdk.resources import Resource

    from evlog import pprof
    from evlog.builders.profiles import ProfileLogs
    from evlog.wire.profile_records import Rec, Task

    got = []
    b = ProfileLogs({"interval": 0.01}, lambda: Resource({"process.pid": 42}), add=got.extend)
    frames = (("slow_parse_inner", "/app/tasks.py", 2), ("parse", "/app/tasks.py", 9),
              ("Task.__call__", "/site-packages/dask/_task_spec.py", 700),
              ("_run_task", "/site-packages/distributed/worker.py", 2900), ("crunch", "/app/tasks.py", 20))
    assert b.feed([(Rec.FRAMES, 0, frames), (Rec.INTERVAL, 1_000, 501_000, 50, 3, 0, 400_000),
                   (Rec.SAMPLES, Task.DASK, "parse", 1, 2, 99, (((0, 1, 2, 3), 2, 20_000_000),)),
                   (Rec.SAMPLES, Task.DASK, "parse", 1, 3, 99, (((1, 2, 3), 1, 10_000_000),)),
                   (Rec.SAMPLES, Task.DASK, "crunch", 1, 4, 99, (((4, 2, 3, 77), 1, 10_000_000),))], 0.0) == []
    assert len(got) == 2
    by = {r.log_record.attributes.get("dask.task.prefix"): r.log_record for r in got}
    assert by["parse"].event_name == "evlog.profile" and by["parse"].timestamp == 501_000
    assert dict(by["parse"].attributes)["evlog.profile.samples"] == 3 and by["parse"].attributes["evlog.profile.tasks"] == 2
    stacks = [(tuple(f[0] for f in st), v, lb["span_id"]) for st, v, lb in pprof.from_body(by["parse"].body)["samples"]]
    assert stacks == [(("slow_parse_inner", "parse"), [2, 20_000_000], f"{2:016x}"), (("parse",), [1, 10_000_000], f"{3:016x}")]
    [(st, _v, _lb)] = pprof.from_body(by["crunch"].body)["samples"]
    assert [f[0] for f in st] == ["crunch", "Task.__call__", "_run_task", "?"]  # an unknown frame stops the cut


def test_profile_interval_values(tmp_path):
    from evlog import config

    (tmp_path / "evlog.yaml").write_text("profile_interval: off\n")  # YAML reads a bare off as false
    assert config.load({}, cwd=str(tmp_path)).profile_interval is None
    (tmp_path / "evlog.yaml").write_text("profile_interval: 50ms\n")
    assert config.load({}, cwd=str(tmp_path)).profile_interval == 0.05
    assert config.load({"EVLOG_PROFILE_INTERVAL": "0.02s"}, cwd=str(tmp_path)).profile_interval == 0.02  # variable wins

    assert config.load({"EVLOG_PROFILE_INTERVAL": "25ms"}, cwd="/nonexistent").profile_interval == 0.025
    assert config.load({"EVLOG_PROFILE_INTERVAL": "off"}, cwd="/nonexistent").profile_interval is None
    assert config.load({}, cwd="/nonexistent").profile_interval == 0.01
    s = config.load({"EVLOG_PROFILE_INTERVAL": "fast"}, cwd="/nonexistent")
    assert s.profile_interval == 0.01 and "EVLOG_PROFILE_INTERVAL" in s.problems[0] and "'fast'" in s.problems[0]


def test_a_task_threads_top_functions_are_its_self_samples(monkeypatch):
    """enter/leave on this thread, samples read by a real sampling thread (records kept local)."""
    import time

    from evlog import config
    from evlog.observed import profiler

    monkeypatch.setattr(config, "get", lambda: config.load({"EVLOG_PROFILE_INTERVAL": "2ms"}))

    class Log(list):
        pass

    import evlog.observed.records as records

    monkeypatch.setattr(records, "source", lambda kind, meta=None, convert=None, tap=None: Log())
    monkeypatch.setattr(profiler, "_sampler", [])
    monkeypatch.setattr(profiler, "_active", {})

    def hot(until):
        while time.perf_counter() < until:
            pass

    slot = profiler.enter(0, "p", 1, 2, None)
    hot(time.perf_counter() + 0.3)
    top = profiler.leave(slot)
    assert top is not None and top.split(" ")[0].endswith("<locals>.hot"), top
    assert profiler.stats()["samples"] > 0 and threading.get_ident() not in profiler._active


@pytest.mark.slow
def test_evlog_serve_stores_the_profiles_its_dashboard_and_report_read_them(tmp_path):
    """Over OTLP/gRPC into `evlog serve`: the same flame graphs and report as from a run folder."""
    db = str(tmp_path / "serve.sqlite")
    serve = Serve(db)
    try:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{serve.grpc}", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
               "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_METRICS_EXPORTER": "none"}
        _run(tmp_path, DASK_APP, env, "8")
        prof = serve.wait(lambda: (lambda p: p if {x["label"] for x in p["labels"]} >= {"parse", "crunch"} else None)(
            serve.get("api/profile?label=parse")), timeout=60, what="both prefixes' profiles")
        assert prof["label"] == "parse" and prof["samples"] > 0 and prof["tree"]["name"] == "parse"
        names = []
        todo = [prof["tree"]]
        while todo:
            node = todo.pop()
            names.append(node["name"])
            todo += node.get("children", [])
        assert any(n.startswith("slow_parse_inner (tasks.py:") for n in names), names
    finally:
        serve.proc.terminate()
        serve.proc.wait(30)
    out = subprocess.run([PYTHON, "-m", "evlog.cli", "report", "--db", db, "--format", "json"], capture_output=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    tops = {p: s["profile"]["top"][0]["function"] for c in json.loads(out.stdout)["computations"]
            for p, s in c["prefixes"].items() if "profile" in s}
    assert tops == {"parse": "slow_parse_inner", "crunch": "crunch_numbers"}


@pytest.mark.slow
def test_evlog_events_leaves_the_profile_records_out(dask_run):
    out = subprocess.run([PYTHON, "-m", "evlog.cli", "events", dask_run["run_dir"]], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr.decode(errors="replace")
    text = out.stdout.decode()
    assert "add-client" in text and "evlog.profile" not in text  # the cluster's events, not the pprof bodies
