"""Dask throughput under evlog: client.map of trivial tasks on a LocalCluster of 2 worker processes.

Each run is a fresh `python app.py` (LocalCluster, 2 worker processes x 1 thread, no dashboard):
100 warm-up tasks, then ROUNDS timed rounds of client.map(inc, range(N)) + gather, reporting the
median tasks/s. Runs alternate plain / under `evlog-instrument` (A B A B ...), the evlog runs exporting
all three signals over OTLP/gRPC to a receiver in this process that only keeps the request bytes
(parsed after the run, to count what arrived: the proof that the evlog run was instrumented).
Goal: at least 0.97 of plain throughput.

    python benchmarks/dask_overhead.py            # 5,000 tasks, 3 pairs
    python benchmarks/dask_overhead.py --quick    # 1,000 tasks, 3 pairs
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
from concurrent import futures

PY = sys.executable

APP = textwrap.dedent('''
    import json, statistics, sys, time
    from distributed import Client, LocalCluster

    def inc(x):
        return x + 1

    if __name__ == "__main__":
        n, rounds = int(sys.argv[1]), int(sys.argv[2])
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \\
                Client(cluster) as client:
            client.gather(client.map(inc, range(100), key=[f"warm-{i}" for i in range(100)]))
            rates = []
            for r in range(rounds):
                t = time.perf_counter()
                fs = client.map(inc, range(n), key=[f"inc-{r}-{i}" for i in range(n)])
                client.gather(fs)
                rates.append(n / (time.perf_counter() - t))
                del fs
            print(json.dumps({"rate": statistics.median(rates), "rates": rates}), flush=True)
''')


class CountingReceiver:
    """An OTLP/gRPC endpoint that answers at once and keeps the raw requests for later."""

    SERVICES = {
        "opentelemetry.proto.collector.trace.v1.TraceService": "traces",
        "opentelemetry.proto.collector.logs.v1.LogsService": "logs",
        "opentelemetry.proto.collector.metrics.v1.MetricsService": "metrics",
    }

    def __init__(self):
        import grpc

        self.bodies = {"traces": [], "logs": [], "metrics": []}
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        handlers = []
        for service, signal in self.SERVICES.items():
            handlers.append(grpc.method_handlers_generic_handler(service, {
                "Export": grpc.unary_unary_rpc_method_handler(
                    self._handler(signal), request_deserializer=None, response_serializer=None)}))
        self.server.add_generic_rpc_handlers(tuple(handlers))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _handler(self, signal):
        def export(body, context):
            with self._lock:
                self.bodies[signal].append(body)
            return b""  # an empty Export*ServiceResponse: everything accepted

        return export

    def take(self) -> dict:
        """Count what arrived since the last call: spans by name, log records, metric points."""
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        with self._lock:
            bodies = {k: list(v) for k, v in self.bodies.items()}
            for v in self.bodies.values():
                v.clear()
        names: dict = {}
        for body in bodies["traces"]:
            req = ExportTraceServiceRequest.FromString(body)
            for rs in req.resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        base = s.name.split(" ")[0]
                        names[base] = names.get(base, 0) + 1
        logs = 0
        for body in bodies["logs"]:
            req = ExportLogsServiceRequest.FromString(body)
            logs += sum(len(sl.log_records) for rl in req.resource_logs for sl in rl.scope_logs)
        return {"spans": names, "logs": logs, "metric_requests": len(bodies["metrics"])}

    def stop(self):
        self.server.stop(1)


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(extra or {})
    return env


def run_once(app: str, n: int, rounds: int, instrumented: bool, endpoint: str) -> float:
    cmd = [PY, app, str(n), str(rounds)]
    env = _env()
    if instrumented:
        cmd = [PY, "-m", "evlog.launcher"] + cmd
        env = _env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                    "OTEL_EXPORTER_OTLP_INSECURE": "true", "EVLOG_SUMMARY": "false"})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"run failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    line = [l for l in proc.stdout.splitlines() if l.startswith("{")][-1]
    return json.loads(line)["rate"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tasks", type=int, default=0)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=0, help="timed rounds per run (default 1, quick 2)")
    args = ap.parse_args()
    n = args.tasks or (1000 if args.quick else 5000)
    rounds = args.rounds or (2 if args.quick else 1)
    pairs = max(3, args.pairs)
    tmp = tempfile.mkdtemp(prefix="evlog-bench-dask-")
    app = os.path.join(tmp, "app.py")
    with open(app, "w") as fh:
        fh.write(APP)
    receiver = CountingReceiver()
    endpoint = f"http://127.0.0.1:{receiver.port}"
    plain, evlog, arrived = [], [], []
    try:
        for i in range(pairs):
            plain.append(run_once(app, n, rounds, False, endpoint))
            evlog.append(run_once(app, n, rounds, True, endpoint))
            arrived.append(receiver.take())
            print(f"# pair {i + 1}: plain {plain[-1]:.1f}, evlog {evlog[-1]:.1f} tasks/s; "
                  f"received {arrived[-1]}", flush=True)
    finally:
        receiver.stop()
    p, e = statistics.median(plain), statistics.median(evlog)
    print(f"dask_overhead: ratio {e / p:.3f} (plain {p:.1f}, evlog {e:.1f}, tasks/s; "
          f"client.map of {n} trivial tasks x {rounds}, 2 worker processes, OTLP/gRPC)")
    expected = n * rounds + 100
    tasks = min(a["spans"].get("dask.task", 0) for a in arrived)
    execs = min(a["spans"].get("dask.execute", 0) for a in arrived)
    print(f"dask_overhead.proof: each evlog run delivered at least {tasks} dask.task and {execs} dask.execute "
          f"spans for {expected} tasks, and {min(a['logs'] for a in arrived)} events")
    if tasks < expected or execs < expected:
        print(f"# warning: fewer spans than tasks arrived ({tasks}, {execs} < {expected})")


if __name__ == "__main__":
    main()
