"""`evlog serve` as a user runs it: a real process taking OTLP from the standard exporters over gRPC and
HTTP (protobuf), and OTLP/JSON over HTTP; storing into SQLite that survives a restart; refusing bad
input with the protocol's status and counting it; feeding summary/story/events and the dashboard API,
live updates included. Plus the dashboard's data shaping (Gantt aggregation, metadata x axis)."""
from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
from helpers import Serve
from synthetic_run import make_run, resource, span, traces_request

from evlog import cli
from evlog.data.panels import dag as dag_panel
from evlog.data.panels import gantt as gantt_panel
from evlog.data.panels import metadata as metadata_panel
from evlog.data.run_reader import RunFolder
from evlog.data.store import Store, decode_for_store


@pytest.fixture
def serve(tmp_path):
    s = Serve(str(tmp_path / "evlog.sqlite"))
    try:
        yield s
    finally:
        s.stop()


def tracer(exporter, service="app", **res):
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tp = TracerProvider(resource=Resource.create({"service.name": service, "process.pid": os.getpid(), **res}))
    tp.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=10_000))
    return tp


def task_spans(tp, keys, worker="tcp://127.0.0.1:41000", error_key=None):
    """Scheduler-like `dask.task` spans with transitions, as the Dask instrumentation sends them."""
    from opentelemetry.trace import Status, StatusCode

    t = tp.get_tracer("evlog.dask")
    with t.start_as_current_span("dask.compute"):
        for i, key in enumerate(keys):
            prefix = key.split("-")[0]
            with t.start_as_current_span(f"dask.task {prefix}", attributes={
                    "dask.task.key": key, "dask.task.prefix": prefix, "dask.task.group": prefix,
                    "dask.worker.address": worker, "dask.task.nbytes": 28,
                    "dask.task.dependencies": keys[:i][-2:]}) as sp:
                finish = "erred" if key == error_key else "memory"
                for a, b in (("released", "waiting"), ("waiting", "processing"), ("processing", finish)):
                    sp.add_event("transition", {"dask.transition.start": a, "dask.transition.finish": b,
                                                "dask.stimulus_id": f"stim-{key}-{b}", "dask.worker.address": worker})
                if key == error_key:
                    sp.set_status(Status(StatusCode.ERROR, "ZeroDivisionError"))
    assert tp.force_flush(30_000)


# -------------------------------------------------------------------------------------------------
# the three transports with the standard exporters


def test_grpc_exporter_spans_are_stored_and_tell_a_story(serve, capsys):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    tp = tracer(OTLPSpanExporter(endpoint=f"127.0.0.1:{serve.grpc}", insecure=True))
    keys = [f"inc-{i}" for i in range(20)]
    task_spans(tp, keys, error_key="inc-3")
    tp.shutdown()
    serve.wait(lambda: serve.spans() == 21, what="21 spans")
    code = cli.main(["story", "inc-3", "--db", serve.db, "--json"])
    story = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(e["start"], e["finish"]) for e in story] == [
        ("released", "waiting"), ("waiting", "processing"), ("processing", "erred")]
    assert story[0]["worker"] == "tcp://127.0.0.1:41000" and story[0]["process"].startswith("app ")
    task = serve.get("api/task?key=inc-3")
    assert task["spans"][0]["status_code"] == "ERROR"
    assert task["spans"][0]["attributes"]["dask.task.dependencies"] == ["inc-1", "inc-2"]
    dag = serve.get("api/dag")
    assert dag["mode"] == "tasks" and len(dag["nodes"]) == 20 and len(dag["edges"]) == 37


def test_http_protobuf_exporters_send_spans_events_and_metrics(serve, capsys):
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    base = f"http://127.0.0.1:{serve.http}"
    tp = tracer(OTLPSpanExporter(endpoint=f"{base}/v1/traces"))
    task_spans(tp, ["add-1", "add-2"])
    tp.shutdown()

    res = Resource.create({"service.name": "app", "dask.role": "worker", "dask.worker.address": "tcp://w:9"})
    lp = LoggerProvider(resource=res)
    lp.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{base}/v1/logs")))
    logger = lp.get_logger("evlog")
    logger.emit(event_name="dask.log_event", body={"start": 1, "stop": 2}, attributes={"dask.topic": "runtimes"},
                severity_number=SeverityNumber.INFO)
    logger.emit(event_name="evlog.log_event", body="saved", attributes={"evlog.topic": "checkpoints"})
    lp.shutdown()

    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
                                           export_interval_millis=3_600_000)
    mp = MeterProvider(resource=res, metric_readers=[reader])
    g = mp.get_meter("evlog.consumers").create_gauge("evlog.worker.saturation")
    g.set(0.5)
    mp.force_flush(30_000)
    mp.shutdown()

    serve.wait(lambda: (lambda s: s["spans"] == 3 and s["events"] == 2 and s["metric_points"] >= 1)(
        serve.get("api/overview")["summary"]), what="spans, events, metric points")
    code = cli.main(["events", "--db", serve.db, "--json"])
    evs = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {(e["topic"], json.dumps(e["msg"])) for e in evs} == {
        ("runtimes", '{"start": 1, "stop": 2}'), ("checkpoints", '"saved"')}
    plots = serve.get("api/plots")
    wsat = next(p for p in plots if p["name"] == "evlog.worker.saturation")
    assert wsat["series"][0]["label"] == "tcp://w:9" and set(wsat["series"][0]["values"]) == {0.5}


def test_otlp_json_over_http_is_stored(serve, tmp_path):
    spans = [span("3" * 32, f"{i + 1:016x}", "dask.execute inc", 10**18 + i, 10**18 + i + 5,
                  {"dask.task.key": f"inc-{i}", "thread.id": 5}, kind=5) for i in range(3)]
    body = json.dumps(traces_request(resource(7, "worker", "tcp://127.0.0.1:40007"), spans)).encode()
    status, resp = serve.post("/v1/traces", body, "application/json")
    assert status == 200 and json.loads(resp) == {}
    serve.wait(lambda: serve.spans() == 3, what="3 spans")
    g = serve.get("api/gantt")
    assert g["mode"] == "bars" and g["workers"] == ["tcp://127.0.0.1:40007"]
    assert serve.get(f"api/task?id={g['bars'][0][5]}")["key"] == "inc-0"


# -------------------------------------------------------------------------------------------------
# bad input


def test_malformed_requests_get_400_or_invalid_argument_and_are_counted(serve):
    import grpc

    assert serve.post("/v1/traces", b"\xff\x00garbage", "application/x-protobuf")[0] == 400
    assert serve.post("/v1/logs", b"{not json", "application/json")[0] == 400
    bad_id = traces_request(resource(1, "worker"), [span("zz", "1" * 16, "x", 1, 2, {})])
    status, body = serve.post("/v1/traces", json.dumps(bad_id).encode(), "application/json")
    assert status == 400 and "traceId" in json.loads(body)["message"]
    with grpc.insecure_channel(f"127.0.0.1:{serve.grpc}") as ch:
        export = ch.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as e:
            export(b"\xff\x00garbage", timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # a span id of the wrong length: protobuf parses it, evlog refuses it
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        req = ExportTraceServiceRequest()
        req.resource_spans.add().scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\1" * 3, name="x")
        with pytest.raises(grpc.RpcError) as e:
            export(req.SerializeToString(), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "spanId" in e.value.details()
    assert serve.get("api/overview")["receiver"]["rejected"] == 5
    assert serve.spans() == 0


def test_a_lone_surrogate_in_a_json_body_gets_400_high_or_low(serve):
    """JSON can spell what Unicode cannot (\\ud800 .. \\udfff alone); a pair is a character, and is stored."""
    for i, name in enumerate(["high \\ud800 alone", "low \\udc00 alone", "low \\uDFFF alone"]):
        body = json.dumps(traces_request(resource(1, "worker"), [span("4" * 32, f"{i + 1:016x}", "x", 1, 2, {})]))
        status, resp = serve.post("/v1/traces", body.replace('"x"', f'"{name}"').encode(), "application/json")
        assert status == 400 and "lone surrogate" in json.loads(resp)["message"], (name, status, resp)
    body = json.dumps(traces_request(resource(1, "worker"), [span("4" * 32, "f" * 16, "x", 1, 2, {})]))
    status, _resp = serve.post("/v1/traces", body.replace('"x"', '"pair \\ud83d\\ude00"').encode(), "application/json")
    assert status == 200
    serve.wait(lambda: serve.spans() == 1, what="the span named with a pair")


def test_an_oversized_request_gets_413(tmp_path):
    s = Serve(str(tmp_path / "small.sqlite"), "--max-body", "2K")
    try:
        spans = [span("4" * 32, f"{i + 1:016x}", "x" * 100, 1, 2, {"k": "v" * 100}) for i in range(30)]
        body = json.dumps(traces_request(resource(1, "worker"), spans)).encode()
        assert len(body) > 2048
        assert s.post("/v1/traces", body, "application/json")[0] == 413
        assert s.get("api/overview")["receiver"]["rejected"] == 1
    finally:
        s.stop()


def test_a_foreign_database_is_refused_with_a_clear_message(tmp_path):
    db = tmp_path / "other.sqlite"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE invoices (id INTEGER)")
    c.commit()
    c.close()
    p = subprocess.run([sys.executable, "-m", "evlog.cli", "serve", "--db", str(db), "--grpc-port", "0",
                        "--http-port", "0"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 1
    assert f"evlog: {db}: an SQLite database, but not evlog's" in p.stderr and "Traceback" not in p.stderr


def test_serve_refuses_a_non_loopback_host_without_a_token():
    p = subprocess.run([sys.executable, "-m", "evlog.cli", "serve", "--host", "0.0.0.0"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 1 and "not a loopback address" in p.stderr and "--token" in p.stderr


def test_a_taken_port_is_a_clear_error(serve, tmp_path):
    p = subprocess.run([sys.executable, "-m", "evlog.cli", "serve", "--db", str(tmp_path / "b.sqlite"),
                        "--grpc-port", "0", "--http-port", str(serve.http)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "cannot listen" in p.stderr


def test_the_token_guards_the_dashboard_api(tmp_path):
    s = Serve(str(tmp_path / "t.sqlite"), "--token", "hunter2")
    try:
        with pytest.raises(urllib.error.HTTPError) as e:
            s.get("api/overview")
        assert e.value.code == 401
        with pytest.raises(urllib.error.HTTPError) as e:
            s.get("api/gantt", headers={"Authorization": "Bearer wrong"})
        assert e.value.code == 401
        assert s.get("api/overview", headers={"Authorization": "Bearer hunter2"})["summary"]["spans"] == 0
        assert "(it will ask for the token)" in "".join(s.out)
    finally:
        s.stop()


# -------------------------------------------------------------------------------------------------
# persistence, CLI against the database, live updates


def test_data_survives_a_restart_and_the_cli_reads_it(tmp_path, capsys):
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    db = str(tmp_path / "keep.sqlite")
    s = Serve(db)
    try:
        tp = tracer(OTLPSpanExporter(endpoint=f"127.0.0.1:{s.grpc}", insecure=True))
        task_spans(tp, [f"inc-{i}" for i in range(10)])
        tp.shutdown()
        s.wait(lambda: s.spans() == 11, what="11 spans")
    finally:
        out = s.stop()
    assert "stored 11 spans" in out
    s = Serve(db, grpc=s.grpc, http=s.http)
    try:
        assert s.spans() == 11
        tp = tracer(OTLPSpanExporter(endpoint=f"127.0.0.1:{s.grpc}", insecure=True), service="second")
        task_spans(tp, [f"dbl-{i}" for i in range(5)])
        tp.shutdown()
        s.wait(lambda: s.spans() == 17, what="17 spans")
    finally:
        s.stop()
    assert cli.main(["summary", "--db", db, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    # both services' spans came from this test's process (one process.pid): one process (evlog.process_count)
    assert summary["spans"] == 17 and summary["traces"] == 2 and summary["processes"] == 1
    assert cli.main(["story", "inc-7", "--db", db]) == 0
    out = capsys.readouterr().out
    assert [ln.split()[2:4] for ln in out.strip().splitlines()[1:]] == [
        ["released", "waiting"], ["waiting", "processing"], ["processing", "memory"]]


def test_live_updates_arrive_over_server_sent_events(serve):
    import aiohttp
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    async def read_updates():
        async with aiohttp.ClientSession() as session:
            async with session.get(serve.url + "api/stream", timeout=aiohttp.ClientTimeout(total=60)) as r:
                assert r.headers["Content-Type"].startswith("text/event-stream")
                versions = []
                sent = False
                async for raw in r.content:
                    line = raw.decode().strip()
                    if line == "retry: 5000":
                        continue
                    if line.startswith("data:"):
                        versions.append(json.loads(line[5:])["version"])
                        if not sent:  # the first event is the current state; now make a change
                            sent = True
                            tp = tracer(OTLPSpanExporter(endpoint=f"127.0.0.1:{serve.grpc}", insecure=True))
                            await asyncio.get_running_loop().run_in_executor(None, task_spans, tp, ["x-1"])
                            tp.shutdown()
                        else:
                            return versions

    versions = asyncio.run(asyncio.wait_for(read_updates(), 60))
    assert versions[1] > versions[0]
    assert serve.spans() == 2


# -------------------------------------------------------------------------------------------------
# the store and the dashboard's shaping, in process


def test_protobuf_and_json_paths_store_the_same_task(tmp_path):
    """`evlog serve` keeps protobuf spans raw; a run folder stores JSON: both read back the same."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    folder = tmp_path / "run"
    info = make_run(str(folder), n_tasks=6)
    a = Store(None)
    RunFolder(str(folder)).load_into(a)
    b = Store(str(tmp_path / "b.sqlite"))
    with open(folder / "traces-100.jsonl") as f:
        d = json.loads(f.readline())
    for rs in d["resourceSpans"]:  # the JSON mapping wants base64 ids; OTLP/JSON has hex
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if sp.get(k):
                        sp[k] = __import__("base64").b64encode(bytes.fromhex(sp[k])).decode()
    msg = json_format.ParseDict(d, ExportTraceServiceRequest())
    raw = decode_for_store("traces", msg.SerializeToString())
    assert len(raw) == 6
    b.ingest([("traces", raw)])
    key = info["keys"][5]
    assert a.story(key) == b.story(key)
    sa, sb = a.task_spans(key=key)[0], b.task_spans(key=key)[0]
    for k in ("attributes", "events", "name", "worker", "prefix", "status_code", "start", "end", "process"):
        assert sa[k] == sb[k], k
    assert [r[1:] for r in a.dependencies()] == [r[1:] for r in b.dependencies()]


def test_protobuf_transfers_and_bytes_held_are_read_from_their_columns(tmp_path):
    """`evlog serve` stores the attributes and events of the spans the Gantt and the plots read whole, so
    drawing them decodes no stored request; they answer as the same spans stored as rows."""
    from evlog.data import otlp_decode

    req = otlp_decode.request_class("traces")()
    rs = req.resource_spans.add()
    kv = rs.resource.attributes.add(key="service.name")
    kv.value.string_value = "app"
    spans = rs.scope_spans.add().spans
    for i in range(3):
        sp = spans.add(trace_id=b"\1" * 16, span_id=bytes([2, i]) * 4, name="dask.transfer",
                       start_time_unix_nano=10**18 + i * 10**7, end_time_unix_nano=10**18 + i * 10**7 + 10**6)
        for k, v in (("dask.worker.address", "tcp://127.0.0.1:1"), ("dask.transfer.source", "tcp://127.0.0.1:2")):
            sp.attributes.add(key=k).value.string_value = v
        sp.attributes.add(key="dask.transfer.bytes").value.int_value = 100 + i
        spans.add(trace_id=b"\1" * 16, span_id=bytes([3, i]) * 4, name="dask.task inc", start_time_unix_nano=10**18,
                  end_time_unix_nano=10**18 + 1)
    mem = spans.add(trace_id=b"\1" * 16, span_id=b"\4" * 8, name="dask.worker.memory", start_time_unix_nano=10**18,
                    end_time_unix_nano=10**18 + 10**8)
    mem.attributes.add(key="dask.worker.address").value.string_value = "tcp://127.0.0.1:1"
    for i in range(4):
        ev = mem.events.add(name="dask.worker.memory", time_unix_nano=10**18 + i)
        ev.attributes.add(key="dask.worker.nbytes").value.int_value = 10 * i
    kept, rows = Store(str(tmp_path / "kept.sqlite")), Store(None)
    kept.ingest([("traces", decode_for_store("traces", req.SerializeToString()))])
    rows.ingest([("traces", otlp_decode.decode_proto("traces", req))])
    assert kept._q("SELECT count(*) FROM spans WHERE req IS NOT NULL AND attributes IS NOT NULL")[0][0] == 4
    kept._requests.spans = None  # a decode from here on fails the test
    assert [r[1:] for r in kept.transfer_rows()] == [r[1:] for r in rows.transfer_rows()]
    assert [r[4:6] for r in kept.transfer_rows()] == [("tcp://127.0.0.1:2", 100 + i) for i in range(3)]
    assert kept.held_bytes() == rows.held_bytes() == {"tcp://127.0.0.1:1": [(10**18 + i, 10 * i) for i in range(4)]}
    del kept._requests.spans
    kept.close()


def test_gantt_aggregates_what_cannot_be_drawn_and_says_so(tmp_path):
    folder = tmp_path / "run"
    make_run(str(folder), n_tasks=300, metadata=0)
    st = Store(None)
    RunFolder(str(folder)).load_into(st)
    full = gantt_panel.gantt(st)
    assert full["mode"] == "bars" and full["total"] == 300 and full["note"] == ""
    agg = gantt_panel.gantt(st, max_bars=100, bins=50)
    assert agg["mode"] == "aggregated" and agg["total"] == 300
    assert "300 spans in view" in agg["note"] and "zoom in" in agg["note"]
    assert len(agg["busy"]) == len(agg["lanes"]) and all(len(r) == 50 for r in agg["busy"])
    assert any(any(r) for r in agg["errors"])  # the erred task is still marked
    assert all(0 <= x <= 1 for r in agg["busy"] for x in r)
    zoomed = gantt_panel.gantt(st, t0=full["t0"], t1=full["t0"] + (full["t1"] - full["t0"]) / 10, max_bars=100)
    assert zoomed["mode"] == "bars" and 0 < zoomed["total"] < 100
    one = gantt_panel.gantt(st, worker="tcp://127.0.0.1:40001")
    assert {ln["worker"] for ln in one["lanes"]} == {"tcp://127.0.0.1:40001"} and one["total"] == 150


def test_the_task_graph_groups_by_prefix_when_large(tmp_path):
    folder = tmp_path / "run"
    make_run(str(folder), n_tasks=60, metadata=0)
    st = Store(None)
    RunFolder(str(folder)).load_into(st)
    g = dag_panel.task_graph(st, max_nodes=10)
    assert g["mode"] == "prefixes" and {n["prefix"] for n in g["nodes"]} == {"inc", "double", "add"}
    assert sum(n["count"] for n in g["nodes"]) == 60 and "60 tasks" in g["note"]


@pytest.mark.parametrize("records, x", [
    ([{"epoch": 1, "loss": 2.0, "progress": 0.1}, {"epoch": 2, "loss": 1.0, "progress": 0.2}], "progress"),
    ([{"epoch": 1, "loss": 2.0, "step": 10}, {"epoch": 2, "loss": 1.0, "step": 20}], "epoch"),
    ([{"step": 100, "lr": 0.1, "time": 5}, {"step": 200, "lr": 0.05, "time": 9}], "step"),  # increasing ints, a-z
    ([{"t": 0.5, "lr": 0.1}, {"t": 1.5, "lr": 0.05}], "t"),  # increasing numbers
    ([{"left": 9, "lr": 0.1}, {"left": 5, "lr": 0.5}, {"left": 3, "lr": 0.2}], "left"),  # integers, decreasing
    ([{"a": 0.9, "b": 0.1}, {"a": 0.3, "b": 0.7}, {"a": 0.2, "b": 0.2}], "a"),  # monotonic either way
    ([{"a": 0.9, "b": 0.1}, {"a": 0.3, "b": 0.7}, {"a": 0.5, "b": 0.2}], "a"),  # any numbers
    ([{"loss": 1.0, "size": "big"}, {"loss": 0.5, "size": "small"}], None),  # one number only: by time
    ([{"flag": True, "loss": 1.0}, {"flag": False, "loss": 0.5}], None),  # booleans are not numbers
])
def test_metadata_x_axis_follows_cluster_job_logging(records, x):
    assert metadata_panel.choose_x(records) == x


def test_metadata_graphs_plot_by_the_chosen_x(tmp_path):
    folder = tmp_path / "run"
    make_run(str(folder), n_tasks=3, metadata=6)
    st = Store(None)
    RunFolder(str(folder)).load_into(st)
    (g,) = metadata_panel.metadata_graphs(st.named_events("evlog.metadata"))
    assert g["x"] == "epoch" and g["xs"] == [0, 1, 2, 3, 4, 5]
    assert set(g["series"]) == {"loss", "acc", "step"}  # "size" is a string: table only
    assert g["table"][0]["body"]["epoch"] == 5  # newest first


def test_a_store_scoped_to_a_run_sees_only_its_rows_and_reuses_its_connections(tmp_path):
    """What `evlog serve`'s run selector rests on: every query of Store.scoped(run) sees that run only."""
    from evlog.data.store import Store

    def span(i: int, run: str) -> dict:
        return {"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "parent_span_id": "", "name": f"futures.task f{run}",
                "kind": "INTERNAL", "start": i * 1000, "end": i * 1000 + 500, "attributes": {}, "events": [],
                "links": [], "status_code": "UNSET", "status_message": "", "scope": "t",
                "resource": {"service.name": run, "evlog.run.id": run, "process.pid": 1 + i % 2}}

    st = Store(str(tmp_path / "evlog.sqlite"))
    try:
        st.ingest([("traces", [span(i, "a") for i in range(1, 4)] + [span(i, "b") for i in range(10, 15)])])
        assert [(r["run"], r["processes"]) for r in st.runs()] == [("b", 2), ("a", 2)]  # newest first
        a, b = st.scoped("a"), st.scoped("b")
        assert st.summary()["spans"] == 8 and a.summary()["spans"] == 3 and b.summary()["spans"] == 5
        assert {p["service"] for p in a.processes()} == {"a"}
        assert len(a.gantt_rows(None)) == 3 and st.scoped("a") is a and st.scoped(None) is st
        before = len(st._readers)
        for _ in range(20):
            a.summary()
            st.scoped("a").summary()
        assert len(st._readers) == before  # one connection per (run, thread), not per request
    finally:
        st.close()


def test_runs_whose_id_is_not_text_are_runs_too(tmp_path):
    """An exporter may send any value as evlog.run.id (a number, a list): it is a run, shown as text."""
    from evlog.data.store import Store

    st = Store(str(tmp_path / "evlog.sqlite"))
    try:
        rows = [{"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "parent_span_id": "", "name": "s", "kind": "INTERNAL",
                 "start": i, "end": i + 1, "attributes": {}, "events": [], "links": [], "status_code": "UNSET",
                 "status_message": "", "scope": "t", "resource": {"evlog.run.id": run, "process.pid": i}}
                for i, run in enumerate([7, 7.5, ["a"], "x"], 1)]
        rows.append({**rows[-1], "span_id": f"{9:016x}", "resource": {"evlog.run.id": "y", "n": float("nan")}})
        st.ingest([("traces", rows)])
        runs = {r["run"] for r in st.runs()}
        assert runs == {"7", "7.5", '["a"]', "x", ""}  # NaN: stored as text SQLite's JSON refuses, no run id
        assert all(st.scoped(r).summary()["spans"] == 1 for r in runs)
    finally:
        st.close()


def test_a_version_3_database_gets_the_state_column_and_keeps_its_progress(tmp_path):
    """Version 4 stores each task life's dask.task.state in a column (progress in `evlog serve`, where
    spans stay protobuf); a version-3 file is brought to 4 when opened, its rows read from their JSON."""
    from evlog.data.store import Store

    def life(i: int, key: str, state: str, status: str = "UNSET") -> dict:
        return {"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "parent_span_id": "", "name": "dask.task inc",
                "kind": "INTERNAL", "start": i * 1000, "end": i * 1000 + 500, "status_code": status,
                "attributes": {"dask.task.key": key, "dask.task.prefix": "inc", "dask.task.state": state},
                "events": [], "links": [], "status_message": "", "scope": "t", "resource": {"process.pid": 1}}

    path = str(tmp_path / "old.sqlite")
    st = Store(path)
    st.ingest([("traces", [life(1, "inc-1", "memory"), life(2, "inc-2", "erred", "ERROR"),
                           life(3, "inc-1", "forgotten")])])  # inc-1's second life: it only let the result go
    st.close()
    conn = sqlite3.connect(path)  # as a version-3 file was: no state column
    conn.execute("ALTER TABLE spans DROP COLUMN state")
    conn.execute("UPDATE evlog_meta SET value = '3' WHERE key = 'version'")
    conn.commit()
    conn.close()
    st = Store(path, create=False)
    try:
        assert st.progress() == {"inc": {"memory": 1, "erred": 1}}
        st.ingest([("traces", [life(4, "inc-3", "memory")])])
        assert st.progress() == {"inc": {"memory": 2, "erred": 1}}
        assert dict(st.conn.execute("SELECT key, value FROM evlog_meta"))["version"] == "4"
    finally:
        st.close()


def test_a_dask_executor_thread_is_one_gantt_row_however_much_its_spans_overlap(tmp_path):
    """A worker's clock offset estimate can move by 100 ms and more on a loaded host, so two tasks of one
    executor thread can overlap by that much; the event loop's thread (coroutine tasks) still gets a row
    per real overlap over 25 ms."""
    from evlog.data.panels.gantt import gantt
    from evlog.data.store import Store

    def execution(i: int, start_ms: int, end_ms: int, thread: str) -> dict:
        return {"trace_id": f"{i:032x}", "span_id": f"{i:016x}", "parent_span_id": "", "name": "dask.execute inc",
                "kind": "CONSUMER", "start": start_ms * 1_000_000, "end": end_ms * 1_000_000, "status_code": "UNSET",
                "attributes": {"dask.task.key": f"inc-{i}", "dask.task.prefix": "inc", "thread.name": thread},
                "events": [], "links": [], "status_message": "", "scope": "t",
                "resource": {"process.pid": 7, "dask.worker.address": "tcp://127.0.0.1:4000"}}

    st = Store(str(tmp_path / "evlog.sqlite"))
    try:
        st.ingest([("traces", [execution(1, 0, 200, "0-Dask-Default-Threads-77-0"),
                               execution(2, 100, 300, "0-Dask-Default-Threads-77-0"),  # 100 ms of clock noise
                               # distributed 2024.x names them without the leading number
                               execution(5, 0, 200, "Dask-Default-Threads-77-1"),
                               execution(6, 150, 300, "Dask-Default-Threads-77-1"),
                               execution(3, 0, 200, "MainThread"), execution(4, 100, 300, "MainThread")])])
        lanes = gantt(st)["lanes"]
        assert [(x["thread"], x["sub"]) for x in lanes] == [
            ("0-Dask-Default-Threads-77-0", 0), ("Dask-Default-Threads-77-1", 0), ("MainThread", 0), ("MainThread", 1)]
    finally:
        st.close()


def test_a_store_filled_in_bulk_gets_the_same_indexes_once_filled(tmp_path):
    """`evlog view` stores a run folder without the span indexes and makes them once it is read."""
    folder = tmp_path / "run"
    make_run(str(folder), n_tasks=6)
    whole, bulk = Store(str(tmp_path / "a.sqlite")), Store(str(tmp_path / "b.sqlite"), indexes=False)
    names = "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'spans' ORDER BY name"
    assert bulk._q(names) == []
    RunFolder(str(folder)).load_into(whole)
    RunFolder(str(folder)).load_into(bulk)
    bulk.make_indexes()
    assert bulk._q(names) == whole._q(names) and len(whole._q(names)) == 4
    assert bulk.summary() == whole.summary() and bulk.gantt_rows(None) == whole.gantt_rows(None)
    whole.close()
    bulk.close()
