"""The task profiler's cost: Dask throughput under evlog with the profiler (EVLOG_PROFILE_INTERVAL at its
default, 10 ms) against evlog without it (off), and the profiler's own CPU per sample.

Two apps run side by side for the whole benchmark, both under `evlog-instrument` exporting over OTLP/gRPC
to a receiver in this process, each with its own LocalCluster (2 worker processes x 1 thread); they take
rounds in turn (A B, then B A, ...), the idle one frozen, as in dask_overhead.py (whose App and receiver this
uses). Two kinds of round:
- trivial: client.map of N trivial tasks (tasks/s): the profiler's thread wakes every 10 ms but a task
  is rarely long enough to be sampled;
- busy: client.map of tasks that each compute for about 5 ms in pure Python (tasks/s): about every
  other task is sampled, so the stacks are walked, folded, shipped and encoded.
The profiler's CPU per sample is its sampling thread's own CPU time (time.thread_time around each tick)
divided by the stacks it sampled, summed over both workers. Proof that it ran: the spans carrying
evlog.profile.top and the evlog.profile log records the receiver got. Goal (issue 31): at least 0.98 of
the throughput without the profiler.

    python benchmarks/profiler_cost.py            # 3,000 trivial / 600 busy tasks per round, 7 pairs
    python benchmarks/profiler_cost.py --quick    # 1,000 / 200, 4 pairs
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from dask_overhead import App, CountingReceiver  # noqa: E402

APP = textwrap.dedent('''
    import json, sys, time
    from distributed import Client, LocalCluster

    def inc(x):
        return x + 1

    def busy(x):
        until = time.perf_counter() + 0.005
        n = 0
        while time.perf_counter() < until:
            n += 1
        return n

    def stats():
        from evlog.observed import profiler
        return profiler.stats()

    if __name__ == "__main__":
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \\
                Client(cluster) as client:
            client.gather(client.map(inc, range(200), key=[f"warm-{i}" for i in range(200)]))
            print("ready", flush=True)
            for r, line in enumerate(sys.stdin):
                words = line.split()
                if words == ["quit"]:
                    break
                if words == ["stats"]:
                    print(json.dumps(list(client.run(stats).values())), flush=True)
                    continue
                kind, n = words[0], int(words[1])
                fn = busy if kind == "busy" else inc
                t = time.perf_counter()
                client.gather(client.map(fn, range(n), key=[f"{kind}-{r}-{i}" for i in range(n)]))
                print(json.dumps({"rate": n / (time.perf_counter() - t)}), flush=True)
''')


def _arrived(receiver) -> tuple[int, int]:
    """(spans carrying evlog.profile.top, evlog.profile log records) the receiver got."""
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    with receiver._lock:
        bodies = {k: list(v) for k, v in receiver.bodies.items()}
    tops = sum(1 for b in bodies["traces"] for rs in ExportTraceServiceRequest.FromString(b).resource_spans
               for ss in rs.scope_spans for s in ss.spans if any(a.key == "evlog.profile.top" for a in s.attributes))
    profiles = sum(1 for b in bodies["logs"] for rl in ExportLogsServiceRequest.FromString(b).resource_logs
                   for sl in rl.scope_logs for r in sl.log_records if r.event_name == "evlog.profile")
    return tops, profiles


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pairs", type=int, default=0)
    args = ap.parse_args()
    trivial, busy = (1000, 200) if args.quick else (3000, 600)
    pairs = max(3, args.pairs or (4 if args.quick else 7))
    tmp = tempfile.mkdtemp(prefix="evlog-bench-profile-")
    app = os.path.join(tmp, "app.py")
    with open(app, "w") as fh:
        fh.write(APP)
    receiver = CountingReceiver()
    endpoint = f"http://127.0.0.1:{receiver.port}"
    rows = {(name, kind): [] for name in ("off", "on") for kind in ("trivial", "busy")}
    with open(os.path.join(tmp, "apps.log"), "w") as log:
        apps = {"off": App(app, True, endpoint, log, {"EVLOG_PROFILE_INTERVAL": "off"}),
                "on": App(app, True, endpoint, log, {})}
        try:
            for i in range(pairs):
                for kind, n in (("trivial", trivial), ("busy", busy)):
                    for name in (("off", "on") if i % 2 == 0 else ("on", "off")):  # A B B A: no order effect
                        rows[(name, kind)].append(apps[name].round(f"{kind} {n}")["rate"])
                print(f"# pair {i + 1}: trivial off {rows[('off', 'trivial')][-1]:.1f}, on {rows[('on', 'trivial')][-1]:.1f}; "
                      f"busy off {rows[('off', 'busy')][-1]:.1f}, on {rows[('on', 'busy')][-1]:.1f} tasks/s", flush=True)
            a = apps["on"]
            a.resume()
            try:
                a.proc.stdin.write("stats\n")
                a.proc.stdin.flush()
                stats = json.loads(a._expect("["))
                time.sleep(3)  # the last round's spans and profiles reach the receiver
            finally:
                a.pause()
        finally:
            for a in apps.values():
                a.close()
            receiver.stop()
    for kind, n in (("trivial", trivial), ("busy", busy)):
        p, e = statistics.median(rows[("off", kind)]), statistics.median(rows[("on", kind)])
        what = "trivial tasks" if kind == "trivial" else "tasks of 5 ms of Python each"
        print(f"profiler_cost.{kind}: ratio {e / p:.3f} (plain {p:.1f}, evlog {e:.1f}, tasks/s; 'plain' is evlog with "
              f"EVLOG_PROFILE_INTERVAL=off, 'evlog' with the profiler at 10 ms; client.map of {n} {what}, "
              f"2 worker processes, {pairs} pairs of rounds)")
    samples = sum(s.get("samples", 0) for s in stats)
    cpu = sum(s.get("cpu_s", 0.0) for s in stats)
    ticks = sum(s.get("ticks", 0) for s in stats)
    skipped = sum(s.get("skipped", 0) for s in stats)
    per = cpu / samples * 1e6 if samples else 0.0
    print(f"profiler_cost.cpu_per_sample: {per:.1f} us of the sampling thread's CPU per stack sampled ({samples:,} samples "
          f"in {ticks:,} ticks, {skipped:,} skipped, {cpu * 1e3:.0f} ms of CPU, both workers)")
    tops, profiles = _arrived(receiver)
    print(f"profiler_cost.proof: the profiled app delivered {tops:,} task spans with evlog.profile.top and {profiles:,} "
          f"evlog.profile log records")


if __name__ == "__main__":
    main()
