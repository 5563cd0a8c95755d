"""One line per mistake, word for word (issue 29), each from a real run of the command a user types:

- a gRPC exporter pointed at `evlog serve`'s HTTP port: `evlog serve` says once what to set, and prints
  no aiohttp traceback; the program says once per run (not once per process) what to set;
- `evlog serve` on a port that is taken: one clean line naming the port and the option, exit 1, and no
  database left behind (a database it makes is readable by its user alone);
- `evlog.configure()` says where it writes its run folder;
- `evlog story KEY` shows the exception text that `evlog report` shows, and names the worker's process
  as the other rows do (service, role, pid@host), not by its address alone;
- OTLP over http/json, which the Python exporters cannot send: one line for all signals, and the
  telemetry goes over http/protobuf.
"""
from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess

import pytest
from helpers import PYTHON, ServeProcess, evlog_env, free_port, run_instrumented, wait_until


def test_grpc_sent_to_the_http_port_of_evlog_serve_is_one_line_naming_what_to_set(tmp_path):
    serve = ServeProcess(tmp_path)
    try:
        env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=serve.http_endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                        EVLOG_CONSUMERS="none")
        program = "from opentelemetry import trace\nwith trace.get_tracer('t').start_as_current_span('s'): pass\n"
        proc = run_instrumented(program, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        wait_until(serve.stderr, timeout=60)
    finally:
        _, err = serve.stop()
    # the program's side: one line for the run (only its exporter process talks to the collector), naming
    # what to set; the gRPC library's own words, in the middle, are quoted as they come
    said = [l for l in proc.stderr.decode().splitlines() if l.startswith("evlog:")]
    assert len(said) == 2 and said[1].startswith("evlog: 0 spans"), said
    assert said[0].startswith("evlog: exporting failed (") and "http1.x server" in said[0], said
    assert said[0].endswith("); the endpoint's port speaks HTTP/1.1, not gRPC: set OTEL_EXPORTER_OTLP_PROTOCOL="
                            "http/protobuf for an OTLP/HTTP port (4318; evlog serve's too), or point the endpoint at "
                            "the gRPC port (4317); failed batches are retried, what cannot be sent by the end of "
                            "the run is dropped and counted"), said
    assert err == (f"evlog serve: OTLP/gRPC came to the OTLP/HTTP port 127.0.0.1:{serve.http}; "
                   f"send gRPC to OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:{serve.grpc}, or set "
                   "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf to use this port\n")


@pytest.mark.parametrize("taken", ["grpc", "http"])
def test_evlog_serve_on_a_taken_port_is_one_clean_line_and_leaves_nothing_behind(tmp_path, taken):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        ports = {"grpc": free_port(), "http": free_port(), taken: port}
        proc = subprocess.run([PYTHON, "-m", "evlog.cli", "serve", "--db", str(tmp_path / "evlog.sqlite"),
                               "--grpc-port", str(ports["grpc"]), "--http-port", str(ports["http"])],
                              capture_output=True, timeout=120, env=evlog_env(), cwd=str(tmp_path))
    what, flag = ("OTLP/gRPC", "--grpc-port") if taken == "grpc" else ("OTLP/HTTP", "--http-port")
    assert (proc.returncode, proc.stdout, proc.stderr.decode()) == (
        1, b"", f"evlog: cannot listen for {what} on 127.0.0.1:{port}: Address already in use; choose another "
                f"port with {flag}, or stop what listens there\n")
    assert os.listdir(tmp_path) == []  # no evlog.sqlite (nor its -wal, -shm)


def test_the_database_evlog_serve_makes_is_readable_by_its_user_alone(tmp_path):
    serve = ServeProcess(tmp_path)
    try:
        env = evlog_env(OTEL_EXPORTER_OTLP_ENDPOINT=serve.grpc_endpoint, EVLOG_CONSUMERS="none")
        proc = run_instrumented("from opentelemetry import trace\n"
                                "with trace.get_tracer('t').start_as_current_span('s'): pass\n", env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        serve.wait_for(lambda o: o["summary"]["spans"] >= 1, what="the span")
        made = sorted(n for n in os.listdir(tmp_path) if n.startswith("evlog.sqlite"))
        modes = {n: stat.S_IMODE(os.stat(tmp_path / n).st_mode) for n in made}
    finally:
        serve.stop()
    assert made[0] == "evlog.sqlite" and modes == {n: 0o600 for n in made}, modes


def test_configure_says_where_it_writes_its_run_folder(tmp_path):
    proc = subprocess.run([PYTHON, "-c", "import evlog\nevlog.configure()\nprint('ok')"], capture_output=True,
                          timeout=120, env=evlog_env(), cwd=str(tmp_path))
    assert proc.returncode == 0 and proc.stdout == b"ok\n", proc.stderr.decode(errors="replace")
    (name,) = os.listdir(tmp_path / "evlog-runs")
    folder = tmp_path / "evlog-runs" / name
    assert proc.stderr.decode() == (f"evlog: writing telemetry to the run folder {folder}; "
                                    f"see it with: evlog view evlog-runs/{name}\n")


STORY_APP = r'''
import json, os, socket
from distributed import Client, LocalCluster

def boom(x):
    raise ValueError(f"bad input {x}")

if __name__ == "__main__":
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        (address, pid), = client.run(os.getpid).items()
        try:
            client.submit(boom, 42, key="boom-0").result()
        except ValueError:
            pass
    print(json.dumps({"worker": address, "pid": pid, "host": socket.gethostname()}))
'''


@pytest.mark.slow
def test_story_shows_the_exception_text_of_the_report_and_names_the_workers_process(tmp_path):
    (tmp_path / "app.py").write_text(STORY_APP)
    folder = tmp_path / "run"
    proc = run_instrumented([PYTHON, str(tmp_path / "app.py")], env=evlog_env(EVLOG_RUN_DIR=str(folder)),
                            cwd=str(tmp_path), timeout=240)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    w = json.loads(proc.stdout.decode().strip().splitlines()[-1])

    def evlog(*args: str) -> str:
        p = subprocess.run([PYTHON, "-m", "evlog.cli", *args], capture_output=True, timeout=120, env=evlog_env())
        assert p.returncode == 0, p.stderr.decode(errors="replace")
        return p.stdout.decode()

    rows = [re.split(r"\s{2,}", line) for line in evlog("story", "boom-0", str(folder)).splitlines()[1:]]
    raised = [r[1:] for r in rows if r[1] == "[exception]" and r[-1] != rows[0][-1]]  # the worker's, not the scheduler's
    assert raised == [["[exception]", "ValueError('bad input 42')", w["worker"], f"app worker {w['pid']}@{w['host']}"]]
    report = evlog("report", str(folder))
    assert re.search(r"\[exception\]\s+ValueError\('bad input 42'\)\s+" + re.escape(w["worker"]) + r"\s+"
                     + re.escape(f"app worker {w['pid']}@{w['host']}"), report), report


HTTP_JSON = "evlog: http/json is not supported by the Python OTLP exporters; using http/protobuf for {}"


def test_http_json_is_said_once_for_logs_and_metrics_which_go_as_protobuf_and_spans_go_as_json(otlp_receiver):
    program = ("import subprocess, sys\nfrom opentelemetry import trace\n"
               "with trace.get_tracer('t').start_as_current_span('parent'):\n"
               "    subprocess.run([sys.executable, '-c', \"from opentelemetry import trace; "
               "trace.get_tracer('t').start_span('child').end()\"], check=True)\n")
    proc = run_instrumented(program, env=evlog_env(otlp_receiver.env("http/json")), timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    said = [line for line in proc.stderr.decode().splitlines() if line.startswith("evlog: http/json")]
    assert said == [HTTP_JSON.format("logs and metrics")], proc.stderr.decode()
    otlp_receiver.wait_for(lambda: {"parent", "child"} <= {s["name"] for s in otlp_receiver.spans()}, timeout=60)


def test_http_json_for_some_signals_names_those():
    from evlog import config

    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL": "http/json"}
    s = config.load(env, cwd="/nonexistent")
    assert s.problems == (HTTP_JSON.format("logs").removeprefix("evlog: "),)
    assert s.exporters.protocol == {"traces": "http/protobuf", "metrics": "http/protobuf", "logs": "http/protobuf"}
    env["OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"] = "http/json"
    assert config.load(env, cwd="/nonexistent").problems == (HTTP_JSON.format("logs and metrics").removeprefix("evlog: "),)
