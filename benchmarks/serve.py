"""How many spans per second `evlog serve` stores: a standard OTLP gRPC exporter (opentelemetry's
OTLPSpanExporter) sends 20,000 finished SDK spans with 3 events each (Dask-like: 5 attributes per span,
4 per event), in batches of 512 as the BatchSpanProcessor would, to `evlog serve` running as its own
process; the clock stops when all of them can be counted in the server's SQLite file by another
connection (queryable, not just received).

The exporter's own protobuf encoding of such spans costs about 150-200 µs each on this machine (it
alone caps one exporter near 5,000-6,000 spans/s), so the headline figure has the batches encoded by
the exporter's encoder (encode_spans) before the clock starts and sent through the exporter's
export() unchanged otherwise (channel, metadata, retries): it measures the server. The second figure
keeps the encoding inside the clock: what one exporting process sees end to end.

    python benchmarks/serve.py [--quick] [--spans N] [--repeat R]

Prints `serve: X spans/s (goal 20000)` (median of the repeats) and the parts behind it.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

GOAL = 20_000
BATCH = 512


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_spans(n: int) -> list:
    """n finished SDK spans (ReadableSpan), 3 events each, with Dask-like attributes."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    mem = InMemorySpanExporter()
    tp = TracerProvider(resource=Resource.create({"service.name": "bench", "dask.role": "scheduler"}))
    tp.add_span_processor(SimpleSpanProcessor(mem))
    tracer = tp.get_tracer("evlog.bench")
    with tracer.start_as_current_span("dask.compute"):
        for i in range(n):
            key = f"inc-{i:08x}"
            with tracer.start_as_current_span("dask.task inc", attributes={
                    "dask.task.key": key, "dask.task.prefix": "inc", "dask.task.group": "inc",
                    "dask.worker.address": "tcp://127.0.0.1:40000", "dask.task.nbytes": 28}) as sp:
                for a, b in (("released", "waiting"), ("waiting", "processing"), ("processing", "memory")):
                    sp.add_event("transition", {"dask.transition.start": a, "dask.transition.finish": b,
                                                "dask.stimulus_id": f"s-{i}", "dask.worker.address": "tcp://127.0.0.1:40000"})
    spans = [s for s in mem.get_finished_spans() if s.name == "dask.task inc"]
    tp.shutdown()
    return spans


class Server:
    def __init__(self, db: str):
        self.grpc = free_port()
        self.http = free_port()
        self.db = db
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "evlog.cli", "serve", "--db", db, "--grpc-port", str(self.grpc),
             "--http-port", str(self.http)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + 60
        while True:  # the server prints its dashboard line once both ports listen
            line = self.proc.stdout.readline()
            if "dashboard at" in line:
                break
            if not line or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"evlog serve did not start: {line!r}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), to show what the server itself spent."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def count(conn: sqlite3.Connection) -> int:
    try:
        return conn.execute("SELECT count(*) FROM spans").fetchone()[0]
    except sqlite3.Error:
        return 0


def pre_encoded_exporter(endpoint: str):
    """The standard OTLPSpanExporter, handed requests its own encoder already built."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

    class PreEncoded(OTLPSpanExporter):
        def _translate_data(self, data):
            return data

        def _count_data(self, data):
            return sum(len(ss.spans) for rs in data.resource_spans for ss in rs.scope_spans)

    return PreEncoded(endpoint=endpoint, insecure=True, timeout=30)


def one_run(spans: list, workdir: str, n: int, encode_inside: bool) -> tuple[float, float, float]:
    """(seconds until all stored and queryable, seconds the exporter spent sending, server CPU seconds)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    db = os.path.join(workdir, f"serve-{time.monotonic_ns()}.sqlite")
    server = Server(db)
    try:
        endpoint = f"127.0.0.1:{server.grpc}"
        if encode_inside:
            exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=30)
            batches = [spans[i:i + BATCH] for i in range(0, n, BATCH)]
            warm = exporter.export(spans[:1])
        else:
            exporter = pre_encoded_exporter(endpoint)
            batches = [encode_spans(spans[i:i + BATCH]) for i in range(0, n, BATCH)]
            warm = exporter.export(encode_spans(spans[:1]))
        if warm is not SpanExportResult.SUCCESS:  # connect first: channel set-up is not the server's speed
            raise RuntimeError("warm-up export failed")
        conn = sqlite3.connect(db, timeout=30)
        deadline = time.monotonic() + 60
        while count(conn) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("warm-up span never stored")
            time.sleep(0.01)
        cpu0 = cpu_seconds(server.proc.pid)
        t0 = time.perf_counter()
        for batch in batches:
            if exporter.export(batch) is not SpanExportResult.SUCCESS:
                raise RuntimeError("export failed")
        sent = time.perf_counter() - t0
        deadline = time.monotonic() + 120
        while count(conn) < n + 1:
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {count(conn) - 1} of {n} spans stored after 120 s")
            time.sleep(0.005)
        total = time.perf_counter() - t0
        cpu = cpu_seconds(server.proc.pid) - cpu0
        conn.close()
        exporter.shutdown()
        return total, sent, cpu
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one run of 20,000 spans instead of three")
    ap.add_argument("--spans", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    spans = make_spans(args.spans)
    workdir = tempfile.mkdtemp(prefix="evlog-bench-serve-")
    try:
        runs = [one_run(spans, workdir, args.spans, False) for _ in range(repeat)]
        inline = [one_run(spans, workdir, args.spans, True) for _ in range(1 if args.quick else 2)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rate = statistics.median(args.spans / t for t, _, _ in runs)
    send = statistics.median(args.spans / s for _, s, _ in runs)
    cpu = statistics.median(c / args.spans * 1e6 for _, _, c in runs)
    e2e = statistics.median(args.spans / t for t, _, _ in inline)
    print(f"serve: {rate:,.0f} spans/s (goal {GOAL})")
    print(f"serve.server_cpu: {cpu:.1f} us per span stored (the server process's CPU time: "
          f"{1e6 / cpu:,.0f} spans per CPU-second; with a core of its own it stores that many per second)")
    print(f"serve.exporter_returned: {send:,.0f} spans/s (export calls answered; storing goes on behind them)")
    print(f"serve.with_exporter_encoding: {e2e:,.0f} spans/s (one exporter encoding inside the clock: "
          "bound by the exporter)")
    print(f"serve.runs: {repeat} x {args.spans:,} spans with 3 events each, OTLP/gRPC, batches of {BATCH}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
