"""`evlog serve --token` guards what it takes in, not only what it shows: a real `evlog serve --host 0.0.0.0
--token ...` process, sent to by a plain grpcio client (opentelemetry-proto's service stubs) and plain HTTP
requests, by an `evlog-instrument` run, and opened by a browser's requests (the dashboard's cookie).
What was stored is read from the SQLite file itself, opened read-only."""
from __future__ import annotations

import os
import re
import sqlite3
import stat
import subprocess
import threading
from signal import SIGTERM

import grpc
import pytest
import requests
from helpers import PYTHON, evlog_env, run_instrumented, wait_until
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

TOKEN = "t0k-en+/=%"  # "%" must go percent-encoded in OTEL_EXPORTER_OTLP_HEADERS
T0 = 1_700_000_000_000_000_000


class TokenServe:
    """`evlog serve --host 0.0.0.0` on ports of its own choosing, with ``args`` (the token); stopped by SIGTERM."""

    def __init__(self, db: str, *args: str):
        self.db = db
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "evlog.cli", "serve", "--host", "0.0.0.0", "--grpc-port", "0", "--http-port", "0",
             "--db", db, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.err: list[str] = []
        self._err_reader = threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True)
        self._err_reader.start()
        self.out: list[str] = []
        for line in self.proc.stdout:  # bounded by the test's timeout; ends if serve exits
            self.out.append(line)
            if "Ctrl+C to stop" in line:
                break
        else:
            raise AssertionError(f"evlog serve exited {self.proc.wait()}: {self.out} {self.err}")
        ports = re.search(r"OTLP/gRPC on 0\.0\.0\.0:(\d+), OTLP/HTTP on 0\.0\.0\.0:(\d+)", "".join(self.out))
        self.grpc, self.http = int(ports.group(1)), int(ports.group(2))
        self.url = f"http://127.0.0.1:{self.http}"

    def stop(self) -> str:
        """SIGTERM; returns serve's whole stdout and stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(SIGTERM)
            try:
                rest = self.proc.stdout.read()
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise AssertionError("evlog serve did not stop on SIGTERM") from None
            self.out.append(rest)
            self._err_reader.join(10)
            assert self.proc.returncode == 0, self.err
        return "".join(self.out) + "".join(self.err)

    def stored(self) -> dict:
        """What the store holds, by its own tables: span names, log bodies, metric names."""
        c = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
        try:
            return {"traces": sorted(r[0] for r in c.execute("SELECT name FROM spans")),
                    "logs": sorted(r[0] for r in c.execute("SELECT body FROM logs")),
                    "metrics": sorted(r[0] for r in c.execute("SELECT name FROM points"))}
        finally:
            c.close()

    def receiver(self) -> dict:
        """The dashboard's receiver counters (its API, with the token)."""
        r = requests.get(self.url + "/api/overview", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=15)
        r.raise_for_status()
        return r.json()["receiver"]


@pytest.fixture
def served(tmp_path):
    s = TokenServe(str(tmp_path / "t.sqlite"), "--token", TOKEN)
    try:
        yield s
    finally:
        s.stop()


# -------------------------------------------------------------------------------------------------
# one export request per signal, named: a span, a log record (body), a gauge point


def _resource():
    return resource_pb2.Resource(attributes=[common_pb2.KeyValue(
        key="service.name", value=common_pb2.AnyValue(string_value="token-test"))])


def proto_request(signal: str, name: str):
    if signal == "traces":
        span = trace_pb2.Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)), name=name,
                              start_time_unix_nano=T0, end_time_unix_nano=T0 + 1000)
        return trace_service_pb2.ExportTraceServiceRequest(resource_spans=[trace_pb2.ResourceSpans(
            resource=_resource(), scope_spans=[trace_pb2.ScopeSpans(spans=[span])])])
    if signal == "logs":
        record = logs_pb2.LogRecord(time_unix_nano=T0, body=common_pb2.AnyValue(string_value=name))
        return logs_service_pb2.ExportLogsServiceRequest(resource_logs=[logs_pb2.ResourceLogs(
            resource=_resource(), scope_logs=[logs_pb2.ScopeLogs(log_records=[record])])])
    point = metrics_pb2.NumberDataPoint(time_unix_nano=T0, as_double=1.0)
    metric = metrics_pb2.Metric(name=name, gauge=metrics_pb2.Gauge(data_points=[point]))
    return metrics_service_pb2.ExportMetricsServiceRequest(resource_metrics=[metrics_pb2.ResourceMetrics(
        resource=_resource(), scope_metrics=[metrics_pb2.ScopeMetrics(metrics=[metric])])])


def json_request(signal: str, name: str) -> dict:
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "token-test"}}]}
    if signal == "traces":
        span = {"traceId": "0102030405060708090a0b0c0d0e0f10", "spanId": "0102030405060708", "name": name,
                "startTimeUnixNano": str(T0), "endTimeUnixNano": str(T0 + 1000)}
        return {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    if signal == "logs":
        record = {"timeUnixNano": str(T0), "body": {"stringValue": name}}
        return {"resourceLogs": [{"resource": resource, "scopeLogs": [{"logRecords": [record]}]}]}
    metric = {"name": name, "gauge": {"dataPoints": [{"timeUnixNano": str(T0), "asDouble": 1.0}]}}
    return {"resourceMetrics": [{"resource": resource, "scopeMetrics": [{"metrics": [metric]}]}]}


SIGNALS = ("traces", "logs", "metrics")
STUBS = {"traces": trace_service_pb2_grpc.TraceServiceStub, "logs": logs_service_pb2_grpc.LogsServiceStub,
         "metrics": metrics_service_pb2_grpc.MetricsServiceStub}
# what a sender may get wrong: no header, another token, the right token under another scheme
WRONG = {"none": None, "wrong": "Bearer not-the-token", "scheme": f"Basic {TOKEN}"}


def send(s: TokenServe, path: str, signal: str, name: str, authorization: str | None) -> str:
    """Export one request over ``path`` ("http-protobuf", "http-json", "grpc"); the outcome: "ok", or the
    HTTP status / gRPC code of the refusal."""
    if path == "grpc":
        with grpc.insecure_channel(f"127.0.0.1:{s.grpc}") as channel:
            try:
                STUBS[signal](channel).Export(proto_request(signal, name), timeout=15,
                                              metadata=[("authorization", authorization)] if authorization else None)
            except grpc.RpcError as e:
                return e.code().name
            return "ok"
    headers = {"Authorization": authorization} if authorization else {}
    if path == "http-json":
        r = requests.post(f"{s.url}/v1/{signal}", json=json_request(signal, name), headers=headers, timeout=15)
    else:
        r = requests.post(f"{s.url}/v1/{signal}", data=proto_request(signal, name).SerializeToString(),
                          headers={"Content-Type": "application/x-protobuf", **headers}, timeout=15)
    return "ok" if r.status_code == 200 else str(r.status_code)


# -------------------------------------------------------------------------------------------------
# ingest


@pytest.mark.parametrize("path", ["http-protobuf", "http-json", "grpc"])
def test_every_ingest_path_takes_only_exports_that_carry_the_token(served, path):
    refusal = "UNAUTHENTICATED" if path == "grpc" else "401"
    for signal in SIGNALS:
        for how, authorization in WRONG.items():
            assert send(served, path, signal, f"refused-{how}", authorization) == refusal, (signal, how)
        assert send(served, path, signal, f"taken-{signal}", f"Bearer {TOKEN}") == "ok", signal
    # the refused requests came first: once the taken ones are stored, anything refused would be too
    want = {signal: [f"taken-{signal}"] for signal in SIGNALS}
    wait_until(lambda: all(served.stored()[signal] for signal in SIGNALS))
    got = served.stored()
    got["logs"] = [body.strip('"') for body in got["logs"]]  # bodies are stored as JSON
    assert got == want
    assert served.receiver()["refused"] == 3 * len(WRONG)


def test_a_refusal_is_said_once_per_address_and_counted_every_time(served):
    for i in range(4):
        assert send(served, "grpc", "traces", f"r{i}", None) == "UNAUTHENTICATED"
        assert send(served, "http-protobuf", "logs", f"r{i}", "Bearer nope") == "401"
    assert served.receiver()["refused"] == 8
    out = served.stop()
    said = [line for line in out.splitlines() if "refused OTLP" in line]
    assert len(said) == 1, said
    assert "from 127.0.0.1" in said[0] and "OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token>" in said[0]
    assert TOKEN not in said[0]
    assert "8 refused for want of the token" in out


def test_the_startup_lines_say_how_to_send_with_the_token(served):
    from opentelemetry.util.re import parse_env_headers

    out = "".join(served.out)
    assert "taking exports that carry the token only" in out
    headers = re.search(r"OTEL_EXPORTER_OTLP_HEADERS=(\S+)", out).group(1)
    assert headers == "authorization=Bearer%20t0k-en+/=%25"
    assert parse_env_headers(headers) == {"authorization": f"Bearer {TOKEN}"}  # as the OTel SDK reads it


# -------------------------------------------------------------------------------------------------
# evlog-instrument sends the headers on every signal

PROGRAM = """
import logging
from opentelemetry import metrics, trace

with trace.get_tracer("token-app").start_as_current_span("token-app-span"):
    logging.getLogger("token-app").warning("token-app-log")
metrics.get_meter("token-app").create_counter("token.app.count").add(3)
"""


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_instrumented_run_with_the_headers_lands_in_the_server(served, tmp_path, protocol):
    """gRPC with OTEL_EXPORTER_OTLP_HEADERS; HTTP with the per-signal variables (endpoints and headers)."""
    (tmp_path / "app.py").write_text(PROGRAM)
    if protocol == "grpc":
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{served.grpc}",
               "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer%20{TOKEN.replace('%', '%25')}"}
    else:
        env = {"OTEL_EXPORTER_OTLP_PROTOCOL": protocol}
        for signal in SIGNALS:
            env[f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"] = f"{served.url}/v1/{signal}"
            env[f"OTEL_EXPORTER_OTLP_{signal.upper()}_HEADERS"] = f"authorization=Bearer%20{TOKEN.replace('%', '%25')}"
    proc = run_instrumented([PYTHON, str(tmp_path / "app.py")], env=evlog_env(env), cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    got = wait_until(lambda: (lambda st: st if all(st.values()) else None)(served.stored()))
    assert "token-app-span" in got["traces"], got
    assert any("token-app-log" in body for body in got["logs"]), got
    assert "token.app.count" in got["metrics"], got
    assert served.receiver()["refused"] == 0


def test_an_instrumented_run_without_the_headers_is_refused_and_stores_nothing(served, tmp_path):
    (tmp_path / "app.py").write_text(PROGRAM)
    proc = run_instrumented([PYTHON, str(tmp_path / "app.py")], cwd=str(tmp_path),
                            env=evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{served.grpc}"))
    err = proc.stderr.decode(errors="replace")
    assert proc.returncode == 0, err
    assert served.receiver()["refused"] >= 3  # each signal's exporter tried (the launcher waited for them)
    assert served.stored() == {"traces": [], "logs": [], "metrics": []}
    assert "the collector wants credentials: set them in OTEL_EXPORTER_OTLP_HEADERS" in err, err


# -------------------------------------------------------------------------------------------------
# --token-file


def _serve_once(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "evlog.cli", "serve", "--host", "0.0.0.0", "--grpc-port", "0",
                           "--http-port", "0", "--db", str(tmp_path / "f.sqlite"), *args],
                          capture_output=True, text=True, timeout=60)


def test_a_token_file_open_to_others_is_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o640)
    p = _serve_once(tmp_path, "--token-file", str(path))
    assert p.returncode == 1
    assert p.stderr == (f"evlog: --token-file {path} is open to its group or others (mode 0640); make it its "
                        f"owner's alone: chmod 600 {path}\n")
    assert not (tmp_path / "f.sqlite").exists()


@pytest.mark.parametrize("case", ["missing", "empty"])
def test_a_missing_or_empty_token_file_is_one_clear_message(tmp_path, case):
    path = tmp_path / "token"
    if case == "empty":
        path.write_text("\n")
        path.chmod(0o600)
    p = _serve_once(tmp_path, "--token-file", str(path))
    assert p.returncode == 1
    want = (f"cannot read --token-file {path}: No such file or directory" if case == "missing"
            else f"--token-file {path} is empty")
    assert p.stderr == f"evlog: {want}\n"


def test_a_token_that_a_header_cannot_carry_is_refused(tmp_path):
    p = _serve_once(tmp_path, "--token", "two words")
    assert p.returncode == 1 and p.stderr.startswith("evlog: --token holds ' '") and "Traceback" not in p.stderr


def test_a_token_file_guards_ingest_and_its_secret_is_not_printed(tmp_path):
    path = tmp_path / "token"
    path.write_text("from-a-file-" + TOKEN + "\n")
    path.chmod(0o600)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    s = TokenServe(str(tmp_path / "f.sqlite"), "--token-file", str(path))
    try:
        out = "".join(s.out)
        assert "from-a-file" not in out
        assert (f"OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token> (<token>: the contents of {path}, "
                "percent-encoded)") in out
        assert send(s, "grpc", "traces", "no", None) == "UNAUTHENTICATED"
        assert send(s, "http-json", "traces", "no", f"Bearer {TOKEN}") == "401"
        assert send(s, "http-json", "traces", "yes", f"Bearer from-a-file-{TOKEN}") == "ok"
        assert wait_until(lambda: s.stored()["traces"]) == ["yes"]
    finally:
        assert "from-a-file" not in s.stop()


# -------------------------------------------------------------------------------------------------
# the dashboard: the token leaves the URL at its first use


def test_the_page_trades_the_token_in_its_url_for_a_cookie(served):
    r = requests.get(f"{served.url}/?run=r1&token={requests.utils.quote(TOKEN, safe='')}", allow_redirects=False,
                     timeout=15)
    assert r.status_code == 303 and r.headers["Location"] == "/?run=r1"
    cookie = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie and requests.utils.quote(TOKEN, safe="") not in cookie  # derived, not the secret
    name, value = cookie.split(";")[0].split("=", 1)
    assert requests.get(f"{served.url}/api/overview", cookies={name: value}, timeout=15).status_code == 200
    assert requests.get(f"{served.url}/api/overview", timeout=15).status_code == 401
    tampered = value[:-1] + ("1" if value.endswith("0") else "0")
    assert requests.get(f"{served.url}/api/overview", cookies={name: tampered}, timeout=15).status_code == 401
    # the cookie opens the dashboard, never ingest
    r = requests.post(f"{served.url}/v1/traces", json=json_request("traces", "by-cookie"), cookies={name: value},
                      timeout=15)
    assert r.status_code == 401


def test_a_wrong_token_in_the_url_is_dropped_from_it_without_a_cookie(served):
    r = requests.get(f"{served.url}/?token=nope", allow_redirects=False, timeout=15)
    assert r.status_code == 303 and r.headers["Location"] == "/" and "Set-Cookie" not in r.headers


def test_an_api_answer_to_the_header_sets_the_cookie_the_live_stream_uses(served):
    with requests.Session() as browser:
        r = browser.get(f"{served.url}/api/overview", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=15)
        assert r.status_code == 200 and "HttpOnly" in r.headers["Set-Cookie"]
        with browser.get(f"{served.url}/api/stream", stream=True, timeout=15) as stream:  # no header, no query
            assert stream.status_code == 200
            assert next(stream.iter_lines()) == b"retry: 5000"


def test_on_loopback_without_a_token_nothing_changes(tmp_path):
    s = subprocess.Popen([PYTHON, "-m", "evlog.cli", "serve", "--grpc-port", "0", "--http-port", "0",
                          "--db", str(tmp_path / "l.sqlite")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        lines = []
        for line in s.stdout:
            lines.append(line)
            if "Ctrl+C to stop" in line:
                break
        out = "".join(lines)
        assert "OTEL_EXPORTER_OTLP_HEADERS" not in out and "carry the token" not in out and "ask for" not in out
        http = re.search(r"OTLP/HTTP on 127\.0\.0\.1:(\d+)", out).group(1)
        url = f"http://127.0.0.1:{http}"
        assert requests.post(f"{url}/v1/traces", json=json_request("traces", "open"), timeout=15).status_code == 200
        r = requests.get(f"{url}/?token=x", allow_redirects=False, timeout=15)
        assert r.status_code == 200 and "Set-Cookie" not in r.headers
        assert requests.get(f"{url}/api/overview", timeout=15).status_code == 200
    finally:
        s.send_signal(SIGTERM)
        s.communicate(timeout=30)
    assert s.returncode == 0
