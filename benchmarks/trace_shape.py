"""Trace shape of big Dask computations: spans and bytes per trace, as Jaeger and Tempo would receive them.

One app per size runs ``client.map(inc, range(N))`` on a LocalCluster of 2 worker processes under
`evlog-instrument`, exporting over OTLP/gRPC to a receiver in this process that keeps, per trace id,
its span count and its protobuf bytes (each span's encoded size, plus its resource's once per trace
and request, as a backend's per-trace limit counts them: Tempo refuses a trace over
``max_bytes_per_trace``, 5,000,000 bytes by default). Nothing to compare with a plain run here: the
figures are the shape itself, and the proof that every task's execute span arrived.

    python benchmarks/trace_shape.py            # 1,000, 20,000 and 100,000 tasks, and 20,000 unsplit
    python benchmarks/trace_shape.py --quick    # 1,000 and 5,000 tasks, and 5,000 unsplit
    python benchmarks/trace_shape.py --sizes 20000 --env EVLOG_DASK_TRACE_TASKS=0   # one trace, as before

Each size prints one line: ``trace_shape.N: T traces; the client call's trace S spans, B bytes;
the largest other trace S spans, B bytes; E of N execute spans``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent import futures

PY = sys.executable
LIMIT_BYTES, LIMIT_SPANS = 5_000_000, 10_000

APP = textwrap.dedent('''
    import sys
    from distributed import Client, LocalCluster

    def inc(x):
        return x + 1

    if __name__ == "__main__":
        n = int(sys.argv[1])
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \\
                Client(cluster) as client:
            assert sum(client.gather(client.map(inc, range(n)))) == n * (n + 1) // 2
''')


class ShapeReceiver:
    """An OTLP/gRPC trace endpoint that keeps, per trace id, its spans and bytes (not the spans)."""

    def __init__(self):
        import grpc

        self.traces: dict = {}  # trace id -> [spans, bytes, names of its root spans]
        self.compute: set = set()  # trace ids holding a dask.compute span
        self.executes = 0
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        ok = {"Export": grpc.unary_unary_rpc_method_handler(lambda body, ctx: b"")}
        handlers = [grpc.method_handlers_generic_handler(
            "opentelemetry.proto.collector.trace.v1.TraceService",
            {"Export": grpc.unary_unary_rpc_method_handler(self._export)})]
        for service in ("logs.v1.LogsService", "metrics.v1.MetricsService"):
            handlers.append(grpc.method_handlers_generic_handler(f"opentelemetry.proto.collector.{service}", ok))
        self.server.add_generic_rpc_handlers(tuple(handlers))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _export(self, body, context):
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        req = ExportTraceServiceRequest.FromString(body)
        with self._lock:
            for rs in req.resource_spans:
                res_bytes = rs.resource.ByteSize()
                seen = set()
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        t = self.traces.setdefault(s.trace_id, [0, 0])
                        t[0] += 1
                        t[1] += s.ByteSize()
                        if s.trace_id not in seen:
                            seen.add(s.trace_id)
                            t[1] += res_bytes
                        if s.name == "dask.compute":
                            self.compute.add(s.trace_id)
                        elif s.name.startswith("dask.execute"):
                            self.executes += 1
        return b""

    def stop(self):
        self.server.stop(1)


def one(n: int, extra_env: dict) -> str:
    rec = ShapeReceiver()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            app = os.path.join(tmp, "app.py")
            with open(app, "w") as fh:
                fh.write(APP)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
            env.update({"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{rec.port}",
                        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_INSECURE": "true",
                        "EVLOG_SUMMARY": "false", **extra_env})
            t = time.monotonic()
            proc = subprocess.run([PY, "-m", "evlog.launcher", PY, app, str(n)], env=env, cwd=tmp,
                                  capture_output=True, text=True, timeout=3600)
            took = time.monotonic() - t
            if proc.returncode != 0:
                return f"trace_shape.{n}: failed, exit {proc.returncode}: {proc.stderr[-500:]}"
            deadline = time.monotonic() + 30
            while rec.executes < n and time.monotonic() < deadline:
                time.sleep(0.2)
        with rec._lock:
            traces = dict(rec.traces)
            client = [traces[t] for t in rec.compute if t in traces]
            others = [v for t, v in traces.items() if t not in rec.compute]
        cs = max(client, key=lambda v: v[1]) if client else [0, 0]
        big_s = max((v[0] for v in others), default=0)
        big_b = max((v[1] for v in others), default=0)
        over = sum(1 for v in traces.values() if v[0] > LIMIT_SPANS or v[1] > LIMIT_BYTES)
        return (f"trace_shape.{n}: {len(traces):,} traces; the client call's trace {cs[0]:,} spans, "
                f"{cs[1]:,} bytes; the largest other trace {big_s:,} spans, {big_b:,} bytes; "
                f"{over} over {LIMIT_SPANS:,} spans or {LIMIT_BYTES:,} bytes; {rec.executes:,} of {n:,} "
                f"execute spans ({took:.0f} s)")
    finally:
        rec.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE for the app")
    args = ap.parse_args()
    sizes = args.sizes or ([1000, 5000] if args.quick else [1000, 20000, 100000])
    extra = dict(e.split("=", 1) for e in args.env)
    for n in sizes:
        print(one(n, extra), flush=True)
    if not args.sizes and not args.env:  # what the same computation was before it was split
        n = sizes[1]
        print(one(n, {"EVLOG_DASK_TRACE_TASKS": "0"}).replace(f"trace_shape.{n}:", f"trace_shape.{n}_one_trace:", 1),
              flush=True)


if __name__ == "__main__":
    main()
