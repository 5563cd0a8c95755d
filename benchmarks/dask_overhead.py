"""Dask throughput under evlog: client.map of trivial tasks on a LocalCluster of 2 worker processes.

Two apps run side by side for the whole benchmark, each with its own LocalCluster (2 worker
processes x 1 thread): one plain, one under `evlog-instrument` exporting all three signals over
OTLP/gRPC to a receiver in this process (it only keeps the request bytes, counted after the run:
the proof that the evlog app was instrumented). This process tells them in turn (A B A B ...) to
run one round: client.map(inc, range(N)) + gather, timed. Only one cluster works at a time; the
other is frozen (SIGSTOP to its process group: an idle Dask cluster still costs CPU, heartbeats and
monitors). Interleaving round by round, seconds apart, is what makes the comparison hold on a
machine whose load changes by the minute.

Figures, medians over the rounds with the spread of the pairs' ratios (the middle half and the whole
range: pairs swing by 20% on a shared or even a quiet machine, so judge with many pairs):
- throughput (tasks/s);
- CPU time per task of each process: the client (with the scheduler, in the LocalCluster's process),
  each worker, and evlog's exporter process; and all of them together. A round's CPU is read after a
  flush and, for the evlog app, once its exporter process has gone idle (its CPU stops growing), so
  evlog's deferred work (building, encoding, sending the round's spans) is counted in its round.
Goal: at least 0.98 of plain throughput, all processes at most +8% CPU per task, the exporter process at
most 60 us CPU per task.

    python benchmarks/dask_overhead.py            # 5,000 tasks per round, 15 pairs of rounds
    python benchmarks/dask_overhead.py --quick    # 1,000 tasks per round, 4 pairs (a quick look, not a figure)
    python benchmarks/dask_overhead.py --pairs 7  # fewer (or more) pairs
    python benchmarks/dask_overhead.py --env EVLOG_CONSUMERS=none   # a variable for the evlog app
    python benchmarks/dask_overhead.py --separate  # `dask scheduler` and 2 `dask worker` processes
    python benchmarks/dask_overhead.py --spans     # each round in distributed.span("bench", "round-N"), both apps

evlog's exporter process belongs to the evlog app's process group, so it is frozen with it. With
--separate, the scheduler runs in its own process and its CPU per task is reported apart: the issue's
goal there is at most +3% over plain.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from concurrent import futures

PY = sys.executable

APP = textwrap.dedent('''
    import contextlib, json, os, subprocess, sys, tempfile, time
    from distributed import Client, LocalCluster, span

    def inc(x):
        return x + 1

    def cpu():
        return time.process_time()

    def flush():
        from opentelemetry import trace
        getattr(trace.get_tracer_provider(), "force_flush", lambda: None)()

    @contextlib.contextmanager
    def separate():
        """`dask scheduler` and two `dask worker` processes (1 thread each), children of this app."""
        folder = tempfile.mkdtemp()
        sf = os.path.join(folder, "scheduler.json")
        procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file", sf,
                                   "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0"])]
        while not os.path.exists(sf):
            time.sleep(0.1)
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--scheduler-file",
                                           sf, "--nthreads", "1", "--nworkers", "1", "--no-nanny",
                                           "--dashboard-address", ":0"]))
        try:
            client = Client(scheduler_file=sf)
            client.wait_for_workers(2)
            yield client
        finally:
            client.retire_workers()
            client.shutdown()
            client.close()
            for p in procs:
                p.wait(60)

    @contextlib.contextmanager
    def local():
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \\
                Client(cluster) as client:
            yield client

    if __name__ == "__main__":
        sched, spans = "separate" in sys.argv[1:], "spans" in sys.argv[1:]
        with (separate() if sched else local()) as client:
            client.gather(client.map(inc, range(200), key=[f"warm-{i}" for i in range(200)]))
            print("ready", flush=True)
            for r, line in enumerate(sys.stdin):
                if line.strip() == "quit":
                    break
                n = int(line)
                w0, m0 = client.run(cpu), time.process_time()
                s0 = client.run_on_scheduler(cpu) if sched else 0
                t = time.perf_counter()
                with (span("bench", f"round-{r}") if spans else contextlib.nullcontext()):
                    fs = client.map(inc, range(n), key=[f"inc-{r}-{i}" for i in range(n)])
                    client.gather(fs)
                wall = time.perf_counter() - t
                del fs
                client.run(flush)
                flush()
                w1, m1 = client.run(cpu), time.process_time()
                s1 = client.run_on_scheduler(cpu) if sched else 0
                workers = [(w1[k] - w0[k]) / n * 1e6 for k in sorted(w0)]
                print(json.dumps({"rate": n / wall, "sched_us": (s1 - s0) / n * 1e6, "client_us": (m1 - m0) / n * 1e6,
                                  "workers_us": workers}), flush=True)
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
        for service, kind in self.SERVICES.items():
            handlers.append(grpc.method_handlers_generic_handler(service, {
                "Export": grpc.unary_unary_rpc_method_handler(
                    self._handler(kind), request_deserializer=None, response_serializer=None)}))
        self.server.add_generic_rpc_handlers(tuple(handlers))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _handler(self, signal):
        def export(body, context):
            with self._lock:
                self.bodies[signal].append(body)
            return b""  # an empty Export*ServiceResponse: everything accepted

        return export

    def count(self) -> dict:
        """What arrived: spans by name (without the template part), log records, metric requests."""
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        with self._lock:
            bodies = {k: list(v) for k, v in self.bodies.items()}
        names: dict = {}
        for body in bodies["traces"]:
            for rs in ExportTraceServiceRequest.FromString(body).resource_spans:
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        base = s.name.split(" ")[0]
                        names[base] = names.get(base, 0) + 1
        logs = sum(len(sl.log_records) for body in bodies["logs"]
                   for rl in ExportLogsServiceRequest.FromString(body).resource_logs for sl in rl.scope_logs)
        return {"spans": names, "logs": logs, "metric_requests": len(bodies["metrics"])}

    def stop(self):
        self.server.stop(1)


def _env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(extra or {})
    return env


class App:
    """One long-lived app process with its cluster, running a round per request."""

    def __init__(self, app: str, instrumented: bool, endpoint: str, log, extra_env: dict | None = None,
                 args: tuple = ()):
        cmd, env = [PY, app, *args], _env()
        if instrumented:
            cmd = [PY, "-m", "evlog.launcher"] + cmd
            # The timeout (seconds) outlasts a frozen round: an export in flight when the app is stopped
            # (SIGSTOP, ~13 s) would otherwise pass its 10 s deadline and lose its batch of 512.
            env = _env({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                        "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_EXPORTER_OTLP_TIMEOUT": "60",
                        "EVLOG_SUMMARY": "false", **(extra_env or {})})
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     text=True, bufsize=1, start_new_session=True)
        self._expect("ready")
        self.exporter = None
        if instrumented:  # evlog's exporter process: a child of the launcher, in the app's process group
            import psutil

            deadline = time.monotonic() + 10  # started by the launcher at the warm-up's first shipment
            while self.exporter is None and time.monotonic() < deadline:
                found = [c for c in psutil.Process(self.proc.pid).children()
                         if "evlog.exporter.process" in " ".join(c.cmdline())]
                self.exporter = found[0] if found else None
                time.sleep(0.1)
        self.pause()

    def exporter_cpu(self) -> float:
        if self.exporter is None:
            return 0.0
        t = self.exporter.cpu_times()
        return t.user + t.system

    def settle(self, limit: float = 30.0) -> None:
        """Wait (running) until evlog's exporter process has gone idle: its CPU time unchanged for 0.5 s."""
        if self.exporter is None:
            return
        deadline, last, still = time.monotonic() + limit, self.exporter_cpu(), 0
        while time.monotonic() < deadline and still < 5:
            time.sleep(0.1)
            now = self.exporter_cpu()
            still, last = (still + 1 if now == last else 0), now

    def pause(self) -> None:
        """Freeze the app and its cluster (one process group): an idle cluster still costs CPU."""
        os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.killpg(self.proc.pid, signal.SIGCONT)

    def _expect(self, prefix: str) -> str:
        line = self.proc.stdout.readline()
        if not line.startswith(prefix):
            raise SystemExit(f"the app failed (exit {self.proc.poll()}), see its log; got {line!r}")
        return line

    def round(self, n: int) -> dict:
        """One round's figures; for the evlog app with its exporter process's CPU per task ("exporter_us"),
        read once the exporter process has finished the round."""
        self.resume()
        try:
            before = self.exporter_cpu()
            self.proc.stdin.write(f"{n}\n")
            self.proc.stdin.flush()
            row = json.loads(self._expect("{"))
            self.settle()
            row["exporter_us"] = (self.exporter_cpu() - before) / n * 1e6
            row["cpu_us"] = row["client_us"] + sum(row["workers_us"]) + row["sched_us"] + row["exporter_us"]
            return row
        finally:
            self.pause()

    def close(self) -> None:
        try:
            self.resume()
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(120)
        except Exception:
            self.proc.kill()
            self.proc.wait(10)


def spread(xs: list) -> str:
    """The middle half and the whole range of ``xs``."""
    xs = sorted(xs)
    if len(xs) < 4:
        return f"range {xs[0]:.3f}-{xs[-1]:.3f}"
    q = statistics.quantiles(xs, n=4)
    return f"middle half {q[0]:.3f}-{q[2]:.3f}, range {xs[0]:.3f}-{xs[-1]:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="1,000 tasks per round and 4 pairs: a quick look")
    ap.add_argument("--tasks", type=int, default=0)
    ap.add_argument("--pairs", type=int, default=0, help="pairs of rounds (default 15; 4 with --quick)")
    ap.add_argument("--separate", action="store_true", help="`dask scheduler` + 2 `dask worker` processes")
    ap.add_argument("--spans", action="store_true", help="each round inside distributed.span(\"bench\", \"round-N\")")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra variable for the evlog app (e.g. EVLOG_DASK_TRANSITIONS=false)")
    args = ap.parse_args()
    extra = dict(e.split("=", 1) for e in args.env)
    n = args.tasks or (1000 if args.quick else 5000)
    pairs = max(3, args.pairs or (4 if args.quick else 15))
    tmp = tempfile.mkdtemp(prefix="evlog-bench-dask-")
    app = os.path.join(tmp, "app.py")
    with open(app, "w") as fh:
        fh.write(APP)
    receiver = CountingReceiver()
    endpoint = f"http://127.0.0.1:{receiver.port}"
    rows = {"plain": [], "evlog": []}
    with open(os.path.join(tmp, "apps.log"), "w") as log:
        app_args = (("separate",) if args.separate else ()) + (("spans",) if args.spans else ())
        apps = {"plain": App(app, False, endpoint, log, args=app_args),
                "evlog": App(app, True, endpoint, log, extra, app_args)}
        apps["evlog"].resume()  # the warm-up's spans are built and sent before the first round
        apps["evlog"].settle()
        apps["evlog"].pause()
        try:
            for i in range(pairs):
                for name in ("plain", "evlog"):
                    rows[name].append(apps[name].round(n))
                pl, ev = rows["plain"][-1], rows["evlog"][-1]
                print(f"# pair {i + 1}: plain {pl['rate']:.1f}, evlog {ev['rate']:.1f} tasks/s; CPU us per task: "
                      f"client {pl['client_us']:.0f} / {ev['client_us']:.0f}, workers "
                      f"{' + '.join(f'{w:.0f}' for w in pl['workers_us'])} / "
                      f"{' + '.join(f'{w:.0f}' for w in ev['workers_us'])}, exporter {ev['exporter_us']:.0f}, "
                      f"all {pl['cpu_us']:.0f} / {ev['cpu_us']:.0f}", flush=True)
        finally:
            for a in apps.values():
                a.close()
            receiver.stop()
    report(rows, n, pairs, args.separate, args.spans, receiver.count())


def report(rows: dict, n: int, pairs: int, separate: bool, spans: bool, arrived: dict) -> None:
    """One line per figure: medians over the rounds, the spread of the pairs' ratios."""

    def med(name, get):
        return statistics.median(get(r) for r in rows[name])

    def line(figure, get, what):
        p, e = med("plain", get), med("evlog", get)
        ratios = [get(b) / get(a) for a, b in zip(rows["plain"], rows["evlog"]) if get(a)]
        print(f"{figure}: ratio {e / p:.3f} (plain {p:.1f}, evlog {e:.1f}, {what}; the {pairs} pairs' ratios: "
              f"{spread(ratios)})")

    line("dask_overhead", lambda r: r["rate"], f"tasks/s, client.map of {n} trivial tasks, 2 worker processes, "
         "OTLP/gRPC")
    line("dask_overhead.cpu", lambda r: r["cpu_us"], "CPU us per task, all processes")
    line("dask_overhead.cpu_client", lambda r: r["client_us"],
         "CPU us per task, the client" + ("" if separate else " and the scheduler"))
    if separate:
        line("dask_overhead.scheduler_cpu", lambda r: r["sched_us"], "CPU us per task, the `dask scheduler` process")
    for w in range(len(rows["plain"][0]["workers_us"])):
        line(f"dask_overhead.cpu_worker{w + 1}", lambda r, w=w: r["workers_us"][w], f"CPU us per task, worker {w + 1}")
    ex = [r["exporter_us"] for r in rows["evlog"]]
    print(f"dask_overhead.cpu_exporter: {statistics.median(ex):.1f} CPU us per task in evlog's exporter process "
          f"(median of {pairs} rounds; {spread(ex)})")
    expected = n * pairs + 200
    tasks, execs = arrived["spans"].get("dask.task", 0), arrived["spans"].get("dask.execute", 0)
    dask_spans = f", {arrived['spans'].get('dask.span', 0)} dask.span spans" if spans else ""
    print(f"dask_overhead.proof: the evlog app delivered {tasks} dask.task and {execs} dask.execute spans for "
          f"{expected} tasks{dask_spans}, and {arrived['logs']} events")
    if tasks < expected or execs < expected:
        print(f"# warning: fewer spans than tasks arrived ({tasks}, {execs} < {expected})")


if __name__ == "__main__":
    main()
