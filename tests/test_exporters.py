"""The run folder and exporter selection: all three signals, whole lines under concurrency, console.

Seven processes' spans all reach the run's exporter process, whose export requests (several) are whole lines."""
from __future__ import annotations

import json

from helpers import evlog_env, read_run_folder, run_file_lines, run_files, run_instrumented

SIGNALS_PROGRAM = """
from opentelemetry import trace, metrics, _logs
tracer = trace.get_tracer("t")
counter = metrics.get_meter("m").create_counter("things", unit="{thing}")
with tracer.start_as_current_span("outer") as span:
    counter.add(3, {"kind": "a"})
    _logs.get_logger("e").emit(event_name="something.happened", body={"n": 1, "nested": [1, "x", None]})
"""


def test_all_three_signals_land_in_the_run_folder_with_context(tmp_path):
    run_instrumented(SIGNALS_PROGRAM, env=evlog_env(EVLOG_RUN_DIR=tmp_path, EVLOG_CONSUMERS="none"), check=True)
    data = read_run_folder(str(tmp_path))
    (span,) = [s for s in data["spans"] if s["name"] == "outer"]
    (event,) = [l for l in data["logs"] if l["event_name"] == "something.happened"]
    assert event["body"]["n"] == 1 and event["trace_id"] == span["trace_id"] and event["span_id"] == span["span_id"]
    points = [m for m in data["metrics"] if m["name"] == "things"]
    assert points and points[-1]["value"] == 3 and points[-1]["attributes"] == {"kind": "a"}


def test_concurrent_processes_never_tear_or_interleave_lines(tmp_path):
    code = """
    import multiprocessing as mp
    from opentelemetry import trace

    def burst(i):
        tracer = trace.get_tracer("t")
        for j in range(300):
            with tracer.start_as_current_span("burst") as s:
                s.set_attribute("payload", "x" * 5000)   # lines far above PIPE_BUF
                s.set_attribute("who", i)

    if __name__ == "__main__":
        procs = [mp.get_context("fork").Process(target=burst, args=(i,)) for i in range(6)]
        for p in procs: p.start()
        burst(-1)
        for p in procs: p.join()
    """
    run_instrumented(code, env=evlog_env(EVLOG_RUN_DIR=tmp_path, EVLOG_CONSUMERS="none"), check=True, timeout=180)
    lines = 0
    for f in run_files(tmp_path, "traces"):
        for line in run_file_lines(f):
            json.loads(line)  # a torn or interleaved line would not parse
            lines += 1
    spans = read_run_folder(str(tmp_path))["spans"]
    assert lines >= 2 and len([s for s in spans if s["name"] == "burst"]) == 7 * 300
    assert {s["attributes"]["who"] for s in spans if s["name"] == "burst"} == set(range(-1, 6))


def test_console_exporter_prints_spans_and_writes_no_run_folder(tmp_path):
    env = evlog_env(OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    proc = run_instrumented("from opentelemetry import trace; trace.get_tracer('t').start_span('to-console').end()",
                            env=env, cwd=tmp_path, check=True)
    assert b'"name": "to-console"' in proc.stdout
    assert not (tmp_path / "evlog-runs").exists()
    assert "console" in proc.stderr.decode()


def test_unknown_exporter_name_is_reported_and_the_program_runs(tmp_path):
    env = evlog_env(OTEL_TRACES_EXPORTER="nosuchexporter", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
    proc = run_instrumented("print('alive')", env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == b"alive\n"
    assert "no exporter named 'nosuchexporter'" in proc.stderr.decode()


def test_unwritable_run_folder_gets_one_warning_and_the_program_carries_on(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code = "from opentelemetry import trace\nfor i in range(5): trace.get_tracer('t').start_span('x').end()\nprint('carried on')"
    proc = run_instrumented(code, env=evlog_env(EVLOG_RUN_DIR=blocker / "run", EVLOG_CONSUMERS="none"))
    err = proc.stderr.decode()
    assert proc.returncode == 0 and b"carried on" in proc.stdout
    assert "Traceback" not in err, err
    assert err.count("cannot create the run folder") + err.count("cannot write to the run folder") == 1, err
    assert "dropped" in err, err


def test_run_folder_span_lines_are_the_full_encoders_json_byte_for_byte():
    """otlp_json.encode_spans_text (the run folder's shortcut for plain spans) against encode_spans."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

    from evlog.exporter import otlp_json

    res, scope = Resource({"service.name": "t", "n": 1}), InstrumentationScope("evlog.futures", "1")
    shared = {"code.function.name": "m.f", "evlog.pool.kind": "process"}
    spans = []
    for i in range(40):
        ctx = SpanContext(i + 1, i + 2, False, TraceFlags(1), TraceState([("k", "v")]) if i % 9 == 0 else None)
        spans.append(ReadableSpan(
            f"futures.task f{i % 3}", ctx, SpanContext(7, 8, True, TraceFlags(1)) if i % 2 else None, res,
            shared if i % 4 else {**shared, "user": i, "list": [1, 2], "é": "✓"},
            events=[Event("e", {"n": i}, 5)] if i % 5 == 0 else (), kind=list(SpanKind)[i % 5],
            status=Status(StatusCode.ERROR, "bad") if i % 6 == 0 else Status(StatusCode.UNSET),
            start_time=10 ** 18 + i, end_time=10 ** 18 + i + 5, instrumentation_scope=scope))
    line = otlp_json.encode_spans_text(spans)
    assert line == otlp_json.dumps(otlp_json.encode_spans(spans))  # key order and whitespace included
    assert len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 40


def test_the_run_folders_json_is_the_standard_librarys_in_value_and_what_msgspec_refuses_is_written_too():
    """otlp_json.dumps writes with msgspec, and with the standard library's encoder what msgspec refuses."""
    import math
    import random

    from evlog.exporter import otlp_json

    stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    rnd = random.Random(7)
    floats = [0.1, 1e-05, 1e16, -0.0, 5e-324, 1.7976931348623157e308] + [rnd.random() * 10 ** rnd.randint(-30, 30)
                                                                          for _ in range(2000)]
    text = "".join(chr(i) for i in range(0x20)) + '"\\/ é ✓ \u2028 \U0001F600 \x7f'
    obj = {"resourceSpans": [{"floats": floats, "text": text, "ints": [0, -1, 2 ** 63 - 1, 2 ** 64, -(2 ** 70)],
                              "nested": {"a": [True, False, None, {"b": ""}]}}]}
    fast = otlp_json.dumps(obj)
    assert fast == otlp_json._fast(obj).decode()  # msgspec wrote it
    assert json.loads(fast) == json.loads(stdlib(obj)) == obj  # the same values (floats' exponents may differ in form)
    assert otlp_json.dumps({"t": text}) == stdlib({"t": text})  # strings written alike, escapes included
    lone = {"name": "a\ud800b", "n": 1}  # msgspec refuses a lone surrogate: the standard library's text
    assert otlp_json.dumps(lone) == stdlib(lone)
    nan = otlp_json.any_value(math.nan), otlp_json.any_value(-math.inf)  # proto3 JSON's strings, never a bare NaN
    assert otlp_json.dumps(nan) == '[{"doubleValue":"NaN"},{"doubleValue":"-Infinity"}]'
    from opentelemetry.sdk.metrics.export import Buckets, ExponentialHistogramDataPoint

    point = ExponentialHistogramDataPoint({}, 1, 2, 3, math.nan, 0, 0, Buckets(0, [3]), Buckets(0, []), 0, -math.inf,
                                          math.inf)
    written = otlp_json.dumps(otlp_json._exp_histogram_point(point))
    assert '"sum":"NaN"' in written and '"min":"-Infinity","max":"Infinity"' in written


def test_the_writer_makes_a_gzip_member_per_flush_and_a_cut_file_reads_to_its_last_whole_member(tmp_path):
    """What SIGKILL or os._exit of the exporter process in the middle of a write leaves: a gzip file whose last
    member is cut. Every whole member before it is one flush, its whole lines read back."""
    import os
    import zlib

    from synthetic_run import make_run

    from evlog.data.run_reader import RunFolder
    from evlog.exporter.run_writer import RunFolderWriter

    make_run(str(tmp_path / "src"), n_tasks=60, batch=10, metadata=0)
    with open(tmp_path / "src" / "traces-100.jsonl", encoding="utf-8") as f:
        requests = [json.loads(line) for line in f]
    assert len(requests) >= 4
    writer = RunFolderWriter(str(tmp_path / "run"), "traces")
    for request in requests:
        assert writer.write(request)
    writer.close()
    (path,) = run_files(tmp_path / "run")
    assert path == str(tmp_path / "run" / f"traces-{os.getpid()}.jsonl.gz")
    data = open(path, "rb").read()
    ends, pos = [], 0
    while pos < len(data):  # one whole member per write, one line in each
        d = zlib.decompressobj(wbits=31)
        text = d.decompress(data[pos:])
        assert d.eof and text.count(b"\n") == 1 and text.endswith(b"\n"), pos
        pos = len(data) - len(d.unused_data)
        ends.append(pos)
    assert len(ends) == len(requests)
    whole = RunFolder(str(tmp_path / "run"))
    all_rows = [r for _s, rows in whole.read_all() for r in rows]
    with open(path, "r+b") as f:
        f.truncate(ends[-2] + (ends[-1] - ends[-2]) // 2)  # killed while writing the last member
    cut = RunFolder(str(tmp_path / "run"))
    rows = [r for _s, rs in cut.read_all() for r in rs]
    last = sum(len(ss["spans"]) for rs in requests[-1]["resourceSpans"] for ss in rs["scopeSpans"])
    assert rows == all_rows[:len(all_rows) - last] and len(rows) > 0
    assert cut.problems == [f"{path}: byte {ends[-2]}: incomplete last gzip member "
                            f"({(ends[-1] - ends[-2]) // 2:,} bytes), skipped"]


def test_a_run_folder_exporter_without_a_folder_is_refused_at_set_up_once_and_what_it_had_is_counted(capfd, tmp_path):
    """An exporter pipeline whose settings name the run folder but no folder (EVLOG_RUN_DIR unset) failed each
    export with ``os.makedirs(None)``'s TypeError: now its set-up is refused, said once, and its items counted."""
    from evlog import stats
    from evlog.config import load
    from evlog.exporter import process, select

    settings = load(env={}, cwd=str(tmp_path))
    assert settings.run_dir is None and "file" in settings.exporters.metrics
    sink = process._Sink(select.factory("metrics", "file", settings), signal="metrics")
    before = stats.counters.get("dropped.no_exporter", 0)
    for _ in range(2):
        sink.pending.append((object(), 3))  # (MetricsData, its points): not read, the exporter is refused first
        sink.export()
    assert stats.counters.get("dropped.no_exporter", 0) - before == 6 and not sink.pending
    err = capfd.readouterr().err
    assert err.count("evlog: cannot set up the exporter of metric points: no run folder is set (EVLOG_RUN_DIR) to "
                     "write metrics to") == 1, err


def test_a_lone_surrogate_is_written_as_a_replacement_character_and_its_batch_is_kept(tmp_path):
    """A Python str may hold a lone surrogate, which UTF-8 cannot: written as is, the whole line (every span
    of its batch) was skipped by every reader as not UTF-8."""
    from evlog.data.run_reader import RunFolder

    program = """
    import logging
    from opentelemetry import trace
    tracer = trace.get_tracer("t")
    with tracer.start_as_current_span("before"):
        pass
    with tracer.start_as_current_span("bad \\ud800 name") as span:
        span.set_attribute("note", "half \\udc00 a pair, whole \\ud83d\\ude00")
    with tracer.start_as_current_span("after"):
        pass
    logging.getLogger("app").warning("a line with \\udcff in it")
    """
    run_instrumented(program, env=evlog_env(EVLOG_RUN_DIR=tmp_path, EVLOG_CONSUMERS="none"), check=True)
    for signal in ("traces", "logs"):
        for path in run_files(str(tmp_path), signal):
            for line in run_file_lines(path):
                line.decode("utf-8")  # raises on a surrogate written as is
    folder = RunFolder(str(tmp_path))
    rows = [r for _signal, batch in folder.read_all() for r in batch]
    assert folder.problems == []
    names = {r.get("name") for r in rows}
    assert {"before", "bad \ufffd name", "after"} <= names
    (bad,) = [r for r in rows if r.get("name") == "bad \ufffd name"]
    assert bad["attributes"]["note"] == "half \ufffd a pair, whole \U0001f600"
    assert any("a line with \ufffd in it" in str(r.get("body")) for r in rows)
