"""Throughput of process pools on trivial calls, plain against evlog, side by side in one run.

One "run" is a fresh `python benchmarks/pools.py --run N` that times, after a warm-up, N calls of a
trivial function through each pool (a fresh pool of 2 workers each, fork), REPS times in a row:

- futures_process: ProcessPoolExecutor.map(f, range(N)) (chunksize 1: one message per call)
- mp_pool:         multiprocessing.Pool.imap(f, range(N)) (chunksize 1: one message per call)
- mp_pool_map:     multiprocessing.Pool.map(f, range(10 N)) (default chunks: ~10 N/8 calls per message; ten
                   times the calls, as a map of N takes about 2 ms plain, well inside this machine's noise;
                   N calls with one span each, EVLOG_POOL_SPANS=call)

Each workload group of PARTS runs in a measured process of its own (mp_pool_map alone). Variants,
interleaved round by round (A B C D A B C D ...): plain python; under evlog-instrument with
the default run folder; under evlog-instrument exporting OTLP/gRPC to a minimal collector in this
process (parses each request in C and counts the calls its task and chunk spans stand for: a stand-in
for a collector on another host); and, for mp_pool_map only, the run folder with EVLOG_POOL_SPANS=call
(one span per call instead of the default one per chunk). Every variant's other defaults are left as a
user gets them (consumers, capture, chunk spans).

Figures: calls per second, each run's figure the median of its REPS repetitions; the ratio is the
median over rounds of (evlog / plain of the same round), so a machine that speeds up or slows down
between rounds moves both sides of a ratio alike (goals: >= 0.85 for calls sent one at a time,
futures_process and mp_pool; >= 0.8 for mp_pool_map with the default chunk spans). Then CPU per call of all the run's
processes over each pool's whole life, exit flush included (ratio evlog over plain: what the
throughput ratio becomes when the cores are busy anyway), and where the CPU of the timed calls goes
(Linux /proc, per thread): the submitting process, the workers' main threads (the calls, their spans
and the span processors), the workers' other threads (export). The proof line counts the task spans
that reached the run folders and the collector (a chunk span counts its evlog.pool.calls).

Pool.map with one span per call (EVLOG_POOL_SPANS=call) is reported, not judged: a trivial call costs
about 0.1 µs there, far less than any span.

    python benchmarks/pools.py            # N = 20,000, 5 rounds
    python benchmarks/pools.py --quick    # N = 2,000, 3 rounds
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

PY = sys.executable
HERE = os.path.abspath(__file__)
WORKLOADS = ("futures_process", "mp_pool", "mp_pool_map")
WARMUP = 1200  # > 2 x 512 calls: each worker exports a batch (and builds its exporter) before timing
REPS = {"futures_process": 3, "mp_pool": 5, "mp_pool_map": 9}  # timed repetitions per run: ~1 s or more each
MAP_SCALE = 10  # mp_pool_map's calls per repetition: N times this (1 with a span per call)
# Each part in a measured process of its own: mp_pool_map's few spans are not timed while the run's
# exporter process still works off the other workloads' task spans (a second of its CPU on 2 cores).
PARTS = (("futures_process", "mp_pool"), ("mp_pool_map",))


def f(x):
    return x


def _cpu() -> float:
    """CPU seconds of this process and of its children that have been waited for."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _threads_cpu(workers: list) -> dict:
    """CPU seconds so far by role: the submitting process (all its threads), the workers' main threads,
    the workers' other threads (evlog's export threads; the SDK's idle ones). Linux /proc, 10 ms ticks."""
    out = {"submitter": 0.0, "worker": 0.0, "export": 0.0}
    tick = os.sysconf("SC_CLK_TCK")
    me = os.getpid()
    for pid in [me] + workers:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            role = "submitter" if pid == me else ("worker" if int(tid) == pid else "export")
            out[role] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _worker_pids(pool) -> list:
    procs = getattr(pool, "_processes", None)  # ProcessPoolExecutor: {pid: process} (Pool: a count)
    if isinstance(procs, dict):
        return list(procs)
    return [p.pid for p in getattr(pool, "_pool", [])]  # multiprocessing.Pool


def run_workloads(n: int, names: tuple = WORKLOADS, map_scale: int = MAP_SCALE) -> dict:
    """In the measured process: per workload, the calls of one repetition (n, n * map_scale for
    mp_pool_map), the median seconds they take over REPS repetitions (pool started and warm), the CPU
    seconds of the pool's whole life (start, warm-up, calls, shutdown with the workers' exit flush), and
    the CPU seconds per timed call by role (see _threads_cpu)."""
    import concurrent.futures
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = {}

    def ppe(pool):
        list(pool.map(f, range(n)))

    def imap(pool):
        for _ in pool.imap(f, range(n)):
            pass

    def pmap(pool):
        pool.map(f, range(n * map_scale))

    for name, make, warm, run in (
        ("futures_process", lambda: concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx),
         lambda p: list(p.map(f, range(WARMUP))), ppe),
        ("mp_pool", lambda: ctx.Pool(2), lambda p: p.map(f, range(WARMUP), chunksize=1), imap),
        ("mp_pool_map", lambda: ctx.Pool(2), lambda p: p.map(f, range(WARMUP), chunksize=1), pmap),
    ):
        if name not in names:
            continue
        cpu = _cpu()
        walls = []
        with make() as pool:
            warm(pool)
            workers = _worker_pids(pool)
            before = _threads_cpu(workers)
            for _ in range(REPS[name]):
                t = time.perf_counter()
                run(pool)
                walls.append(time.perf_counter() - t)
            after = _threads_cpu(workers)
        calls = n * map_scale if name == "mp_pool_map" else n
        out[name] = statistics.median(walls)
        out[name + ".calls"] = calls
        out[name + ".cpu"] = _cpu() - cpu
        for role in before:
            out[f"{name}.cpu.{role}"] = (after[role] - before[role]) / REPS[name] / calls
    return out


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(kw)
    return env


def _measure(cmd: list, env: dict, timeout: float) -> dict:
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run and its pool workers: none left behind
            proc.communicate()
            raise SystemExit(f"benchmark run timed out after {timeout:g} s: {' '.join(cmd)}")
    if proc.returncode != 0:
        raise SystemExit(f"benchmark run failed ({proc.returncode}): {stderr[-2000:]}")
    out = json.loads(stdout.strip().splitlines()[-1])
    dropped = re.search(r"([\d,]+) dropped \(could not be exported\)", stderr)  # evlog's summary
    out["dropped"] = int(dropped.group(1).replace(",", "")) if dropped else 0
    return out


def _calls_of(attributes) -> int:
    """How many calls a task span (1) or a chunk span (its evlog.pool.calls) stands for."""
    for kv in attributes:
        if kv["key"] == "evlog.pool.calls":
            return int(kv["value"]["intValue"])
    return 1


def _spans_in(folder: str) -> int:
    """Calls of the task and chunk spans in a run folder (OTLP/JSON lines)."""
    count = 0
    for name in os.listdir(folder):
        if name.startswith("traces") and name.endswith((".jsonl", ".jsonl.gz")):
            with (gzip.open if name.endswith(".gz") else open)(os.path.join(folder, name), "rt", encoding="utf-8") as fh:
                for line in fh:
                    for rs in json.loads(line).get("resourceSpans", []):
                        for ss in rs.get("scopeSpans", []):
                            count += sum(_calls_of(s.get("attributes", [])) for s in ss.get("spans", [])
                                         if s["name"].endswith(" f"))
    return count


class CountingCollector:
    """OTLP/gRPC on loopback that accepts all three signals and counts the calls of the task and chunk
    spans it gets."""

    def __init__(self):
        import concurrent.futures

        import grpc
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        self.spans = 0
        self._lock = threading.Lock()

        def traces(request: bytes, _context) -> bytes:
            req = ExportTraceServiceRequest.FromString(request)
            n = sum(next((a.value.int_value for a in sp.attributes if a.key == "evlog.pool.calls"), 1)
                    for rs in req.resource_spans for ss in rs.scope_spans for sp in ss.spans if sp.name.endswith(" f"))
            with self._lock:
                self.spans += n
            return b""  # an empty Export*ServiceResponse

        def other(request: bytes, _context) -> bytes:
            return b""

        handlers = {}
        for service, fn in (("trace.v1.TraceService", traces), ("metrics.v1.MetricsService", other),
                            ("logs.v1.LogsService", other)):
            handlers[f"opentelemetry.proto.collector.{service}"] = grpc.method_handlers_generic_handler(
                f"opentelemetry.proto.collector.{service}", {"Export": grpc.unary_unary_rpc_method_handler(fn)})
        self._server = grpc.server(concurrent.futures.ThreadPoolExecutor(4), handlers=list(handlers.values()))
        port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{port}"
        self._server.start()

    def stop(self) -> None:
        self._server.stop(2).wait(5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--calls", type=int, default=0)
    ap.add_argument("--run", type=int, default=0, help=argparse.SUPPRESS)  # inside a measured process
    ap.add_argument("--only", default=",".join(WORKLOADS), help=argparse.SUPPRESS)
    ap.add_argument("--map-scale", type=int, default=MAP_SCALE, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(run_workloads(args.run, tuple(args.only.split(",")), args.map_scale)))
        return
    n = args.calls or (2_000 if args.quick else 20_000)
    rounds = args.rounds or (3 if args.quick else 5)
    collector = CountingCollector()
    tmp = tempfile.mkdtemp(prefix="evlog-bench-pools-")
    cmd = [PY, HERE, "--run", str(n)]
    evlog_cmd = [PY, "-m", "evlog.launcher"] + cmd
    otlp = dict(OTEL_EXPORTER_OTLP_ENDPOINT=collector.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                OTEL_EXPORTER_OTLP_INSECURE="true")
    timeout = 60 + n * 0.2
    results: dict[str, list[dict]] = {"plain": [], "evlog": [], "evlog_otlp": [], "evlog_call": []}
    in_folders = {"evlog": 0, "evlog_call": 0}
    def run(variant: str, base: list, extra: dict, parts=PARTS, args=()) -> dict:
        """One round of a variant: a measured process per part, results merged; the run folders of the
        in_folders variants counted."""
        out = {"dropped": 0}
        for part in parts:
            folder = os.path.join(tmp, f"{variant}-{len(results[variant])}-{part[0]}")
            env = _env(EVLOG_RUN_DIR=folder, **extra) if variant in in_folders else _env(**extra)
            r = _measure(base + ["--only", ",".join(part), *args], env, timeout)
            out["dropped"] += r.pop("dropped")
            out.update(r)
            if variant in in_folders:
                in_folders[variant] += _spans_in(folder)
                shutil.rmtree(folder, ignore_errors=True)
        return out

    try:
        for _ in range(rounds):
            results["plain"].append(run("plain", cmd, {}))
            results["evlog"].append(run("evlog", evlog_cmd, {}))
            results["evlog_call"].append(run("evlog_call", evlog_cmd, {"EVLOG_POOL_SPANS": "call"},
                                             (("mp_pool_map",),), ("--map-scale", "1")))
            results["evlog_otlp"].append(run("evlog_otlp", evlog_cmd, otlp))
    finally:
        collector.stop()  # the runs flushed at exit, before their launcher returned
        shutil.rmtree(tmp, ignore_errors=True)

    def per_s(r: dict, workload: str) -> float:  # calls per second in one run
        return r[workload + ".calls"] / r[workload]

    def rate(variant: str, workload: str) -> float:
        return statistics.median(per_s(r, workload) for r in results[variant])

    def ratio(variant: str, workload: str) -> float:  # median over rounds of the round's evlog / plain
        return statistics.median(per_s(e, workload) / per_s(p, workload)
                                 for p, e in zip(results["plain"], results[variant]))

    def made(r: dict, workload: str) -> int:  # calls over the pool's life
        return r[workload + ".calls"] * REPS[workload] + WARMUP

    def cpu(variant: str, workload: str) -> float:  # µs of CPU per call over the pool's life
        return 1e6 * statistics.median(r[workload + ".cpu"] / made(r, workload) for r in results[variant])

    def role_cpu(variant: str, workload: str, role: str) -> float:  # µs of CPU per call while timed
        return 1e6 * statistics.median(r[f"{workload}.cpu.{role}"] for r in results[variant])

    for workload in WORKLOADS:
        plain = rate("plain", workload)
        variants = [("evlog", ""), ("evlog_otlp", ".otlp")]
        if workload == "mp_pool_map":
            variants.append(("evlog_call", ".call_spans"))
        for variant, suffix in variants:
            print(f"pools.{workload}{suffix}: ratio {ratio(variant, workload):.2f} "
                  f"(plain {plain:,.0f}, evlog {rate(variant, workload):,.0f}, calls/s)")
        plain = cpu("plain", workload)
        for variant, suffix in variants:
            ev = cpu(variant, workload)
            print(f"pools.{workload}{suffix}.cpu: ratio {ev / plain:.2f} (plain {plain:.1f}, evlog {ev:.1f}, "
                  f"µs CPU per call, all processes)")
        for role, what in (("submitter", "the submitting process"), ("worker", "the workers' main threads")):
            plain, ev = role_cpu("plain", workload, role), role_cpu("evlog", workload, role)
            calls = results["plain"][0][workload + ".calls"]
            ratio_text = f"{ev / plain:.2f}" if plain >= 1e6 * 0.03 / calls else "-"  # under 3 ticks: no ratio
            print(f"pools.{workload}.cpu.{role}: ratio {ratio_text} (plain {plain:.1f}, evlog {ev:.1f}, "
                  f"evlog OTLP {role_cpu('evlog_otlp', workload, role):.1f}, µs CPU per call while timed, {what})")
        print(f"pools.{workload}.cpu.export: evlog {role_cpu('evlog', workload, 'export'):.1f}, evlog OTLP "
              f"{role_cpu('evlog_otlp', workload, 'export'):.1f} (µs CPU per call while timed, the workers' export threads)")
    expected = sum(made(r, w) for r in results["evlog"] for w in WORKLOADS)
    dropped = [sum(r["dropped"] for r in results[v]) for v in ("evlog", "evlog_otlp")]
    print(f"pools.proof: calls expected {expected:,} per evlog variant; the task and chunk spans in the run "
          f"folders account for {in_folders['evlog']:,}, at the OTLP collector {collector.spans:,} (items the "
          f"runs' summaries report dropped: {dropped[0]:,} and {dropped[1]:,}, all signals); call mode: "
          f"{in_folders['evlog_call']:,} task spans for {sum(made(r, 'mp_pool_map') for r in results['evlog_call']):,} calls")


if __name__ == "__main__":
    main()
