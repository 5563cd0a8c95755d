"""A big Dask graph, plain against evlog: compute time, memory per process, run-folder size, and how fast
`evlog report` and `evlog view` read the run.

The computation is the one a dask.array user runs at scale: ``da.ones(10 * N, chunks=10)``, a
``map_blocks`` of a small function, a tree sum with ``split_every=8``, on a LocalCluster of 2 worker
processes of 1 thread. N = 50,000 chunks is 157,146 graph tasks (57,147 executions once Dask has fused
the blockwise steps); N = 318,200 is 999,432 graph tasks.

Each pair of rounds runs the plain app, then the same app under `evlog-instrument` writing its run
folder (A B A B ...). While an app runs, this process samples the resident memory of every process of
its tree (psutil, every 0.2 s) and keeps each process's peak and the tree's peak (the largest sum of one
sample), and each process's CPU seconds at its last sample (summed per role: where a 2-core machine's time
went). After each evlog round it reads the run folder back:
- ``evlog report RUN --format json``: wall time and peak memory of its process;
- ``evlog view RUN``: the time until /api/overview says the folder is loaded, then the time to answer
  the panels a page asks first (overview, Gantt, plots, task graph, report), and the server's peak memory.

One line per figure, medians over the rounds: ``name: ratio R (plain X, evlog Y, unit)``; figures with
no plain counterpart print ``name: X unit``. The evlog round proves it was instrumented: its run folder
holds the spans of every execution.

    python benchmarks/scale.py                       # 157k graph tasks, 2 pairs
    python benchmarks/scale.py --tasks 1m --pairs 1  # 1M graph tasks: about 15-20 minutes per round
    python benchmarks/scale.py --read RUN_DIR        # only `evlog report` and `evlog view` on a run folder
    python benchmarks/scale.py --keep DIR            # keep the last evlog round's run folder in DIR
    python benchmarks/scale.py --quick               # 10k graph tasks, 1 pair: does it run

It runs by hand, not in CI (minutes per round, and figures mean something only on a quiet machine).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.request

import psutil

PY = sys.executable
BIN = os.path.dirname(PY)
CHUNKS = {"10k": 3_200, "150k": 50_000, "1m": 318_200}

APP = textwrap.dedent('''
    import json, sys, time
    import dask.array as da
    from distributed import Client, LocalCluster

    def inc(block):
        return block + 1

    if __name__ == "__main__":
        n = int(sys.argv[1])
        total = da.ones(10 * n, chunks=10).map_blocks(inc).sum(split_every=8)
        tasks = len(total.__dask_graph__())
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
                Client(cluster) as client:
            t0 = time.perf_counter()
            value = total.compute()
            seconds = time.perf_counter() - t0
        assert value == 20 * n, value
        print(json.dumps({"seconds": seconds, "tasks": tasks}), flush=True)
''')


class TreeMemory:
    """Samples the resident memory of a process and its descendants until stopped."""

    def __init__(self, pid: int, every: float = 0.2):
        self.root = psutil.Process(pid)
        self.every = every
        self.peak: dict[int, int] = {}  # pid -> peak RSS
        self.role: dict[int, str] = {}
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds (user + system) at its last sample
        self.tree_peak = 0
        self.peak_at = 0.0  # seconds from the start to the tree's peak
        self.at_peak: dict[str, int] = {}  # role -> RSS summed over its processes at the tree's peak
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                procs = [self.root] + self.root.children(recursive=True)
            except psutil.Error:
                break
            total = 0
            now: dict[str, int] = {}
            for p in procs:
                try:
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                    if p.pid not in self.role:
                        self.role[p.pid] = _role(p.cmdline())
                except psutil.Error:
                    continue
                total += rss
                role = self.role[p.pid]
                now[role] = now.get(role, 0) + rss
                self.peak[p.pid] = max(self.peak.get(p.pid, 0), rss)
            if total > self.tree_peak:  # where the tree's peak is: which processes hold what at that moment
                self.tree_peak, self.at_peak, self.peak_at = total, now, time.monotonic() - self._start
            self._stop.wait(self.every)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def by_role(self) -> dict[str, int]:
        """Peak RSS per role; a role held by several processes (workers) gives its largest."""
        out: dict[str, int] = {}
        for pid, rss in self.peak.items():
            role = self.role.get(pid, "other")
            out[role] = max(out.get(role, 0), rss)
        return out

    def cpu_by_role(self) -> dict[str, float]:
        """CPU seconds per role, summed over its processes (both workers), as last sampled: up to ``every``
        seconds short of each process's total."""
        out: dict[str, float] = {}
        for pid, seconds in self.cpu.items():
            role = self.role.get(pid, "other")
            out[role] = out.get(role, 0.0) + seconds
        return out


def _role(cmdline: list[str]) -> str:
    text = " ".join(cmdline)
    if len(cmdline) > 1 and cmdline[1].endswith("evlog-instrument"):
        return "launcher"
    if "evlog.exporter.process" in text:
        return "exporter"
    if "spawn_main" in text or "forkserver" in text:
        return "worker"
    if "scale_app.py" in text:
        return "client+scheduler"
    if "resource_tracker" in text:
        return "resource tracker"
    if " -S -c " in f" {text} ":
        return "console relay"
    return "other"


def run_app(app: str, chunks: int, evlog: bool, run_dir: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    cmd = [PY, app, str(chunks)]
    if evlog:
        env["EVLOG_RUN_DIR"] = run_dir
        env["EVLOG_SUMMARY"] = "false"
        cmd = [os.path.join(BIN, "evlog-instrument")] + cmd
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mem = TreeMemory(proc.pid)
    out, err = proc.communicate()
    mem.stop()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"the {'evlog' if evlog else 'plain'} app failed ({proc.returncode}):\n{err[-3000:]}")
    result = json.loads(out.strip().splitlines()[-1])
    result.update(wall=wall, tree_peak=mem.tree_peak, roles=mem.by_role(), cpu=mem.cpu_by_role(),
                  peak_at=mem.peak_at, at_peak=mem.at_peak)
    return result


def folder_bytes(run_dir: str) -> tuple[int, dict]:
    sizes = {}
    for name in os.listdir(run_dir):
        path = os.path.join(run_dir, name)
        if os.path.isfile(path):
            sizes[name] = os.path.getsize(path)
    return sum(sizes.values()), sizes


def time_report(run_dir: str) -> dict:
    t0 = time.perf_counter()
    proc = subprocess.Popen([os.path.join(BIN, "evlog"), "report", run_dir, "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    mem = TreeMemory(proc.pid, every=0.05)
    out, err = proc.communicate()
    mem.stop()
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"evlog report failed ({proc.returncode}):\n{err[-3000:]}")
    report = json.loads(out)
    return {"seconds": seconds, "peak": mem.tree_peak, "executions": _executions(report)}


def _executions(report: dict) -> int | None:
    """Task lives the report counts over its computations: the proof that the evlog round was recorded."""
    return sum(c.get("tasks") or 0 for c in report.get("computations") or ())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 120) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def time_view(run_dir: str) -> dict:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    t0 = time.perf_counter()
    proc = subprocess.Popen([os.path.join(BIN, "evlog"), "view", run_dir, "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mem = TreeMemory(proc.pid, every=0.05)
    try:
        loaded = None
        while time.perf_counter() - t0 < 600:
            try:
                ov = _get(base + "/api/overview", 30)
                if ((ov.get("receiver") or {}).get("loading") or {}).get("state") in ("loaded", "live"):
                    loaded = time.perf_counter() - t0
                    break
            except OSError:
                pass
            time.sleep(0.5)  # a page asks again when told of new data, not ten times a second
        if loaded is None:
            raise SystemExit("evlog view did not finish loading in 600 s")
        for path in ("/api/overview", "/api/gantt", "/api/plots", "/api/dag", "/api/report"):
            _get(base + path)
        panels = time.perf_counter() - t0
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        mem.stop()
    return {"loaded": loaded, "panels": panels, "peak": mem.tree_peak}


def line(name: str, plain: float | None, evlog: float, unit: str) -> None:
    if plain is None:
        print(f"{name}: {evlog:.4g} {unit}", flush=True)
    else:
        print(f"{name}: ratio {evlog / plain:.3f} (plain {plain:.4g}, evlog {evlog:.4g}, {unit})", flush=True)


def med(xs: list) -> float:
    return statistics.median(xs)


def read_side(run_dirs: list[str], tasks: int) -> None:
    reports = [time_report(d) for d in run_dirs]
    views = [time_view(d) for d in run_dirs]
    print(f"# evlog report counts {reports[-1]['executions']:,} tasks in its computations", flush=True)
    line("evlog report wall", None, med([r["seconds"] for r in reports]), "s")
    line("evlog report peak RSS", None, med([r["peak"] for r in reports]) / 1e6, "MB")
    line("evlog view loaded", None, med([v["loaded"] for v in views]), "s")
    line("evlog view loaded, first panels answered", None, med([v["panels"] for v in views]), "s")
    line("evlog view server peak RSS", None, med([v["peak"] for v in views]) / 1e6, "MB")
    if tasks:
        size = med([folder_bytes(d)[0] for d in run_dirs])
        line("run folder", None, size / tasks, "bytes per graph task")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", choices=sorted(CHUNKS), default="150k")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--read", metavar="RUN_DIR", help="only time `evlog report` and `evlog view` on RUN_DIR")
    ap.add_argument("--keep", metavar="DIR", help="keep the last evlog round's run folder in DIR")
    ap.add_argument("--quick", action="store_true", help="10k graph tasks, 1 pair: a smoke check, not a figure")
    args = ap.parse_args()
    if args.quick:
        args.tasks, args.pairs = "10k", 1
    print(f"load: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} on {os.cpu_count()} cores",
          flush=True)
    if args.read:
        read_side([args.read], 0)
        return
    chunks = CHUNKS[args.tasks]
    tmp = tempfile.mkdtemp(prefix="evlog-scale-")
    app = os.path.join(tmp, "scale_app.py")
    with open(app, "w") as f:
        f.write(APP)
    rounds: dict[str, list] = {"plain": [], "evlog": []}
    run_dirs = []
    try:
        for i in range(args.pairs):
            for variant in ("plain", "evlog"):
                run_dir = os.path.join(tmp, f"run-{i}")
                r = run_app(app, chunks, variant == "evlog", run_dir)
                rounds[variant].append(r)
                print(f"# pair {i + 1} {variant}: {r['seconds']:.1f} s compute, tree peak {r['tree_peak'] / 1e6:.0f} MB, "
                      + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in sorted(r["roles"].items())) + "; CPU "
                      + ", ".join(f"{k} {v:.1f} s" for k, v in sorted(r["cpu"].items()))
                      + f"; at the tree's peak ({r['peak_at']:.0f} s of {r['wall']:.0f}) "
                      + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in sorted(r["at_peak"].items())), flush=True)
                if variant == "evlog":
                    run_dirs.append(run_dir)
        tasks = rounds["plain"][0]["tasks"]
        print(f"# {tasks:,} graph tasks ({chunks:,} chunks), {args.pairs} pairs", flush=True)
        p, e = rounds["plain"], rounds["evlog"]
        line("compute time", med([r["seconds"] for r in p]), med([r["seconds"] for r in e]), "s")
        line("throughput", med([r["tasks"] / r["seconds"] for r in p]), med([r["tasks"] / r["seconds"] for r in e]),
             "graph tasks/s")
        line("process tree peak RSS", med([r["tree_peak"] for r in p]) / 1e6, med([r["tree_peak"] for r in e]) / 1e6, "MB")
        for role in ("client+scheduler", "worker", "resource tracker"):
            line(f"{role} peak RSS", med([r["roles"].get(role, 0) for r in p]) / 1e6,
                 med([r["roles"].get(role, 0) for r in e]) / 1e6, "MB")
        for role in ("exporter", "launcher", "console relay"):
            line(f"{role} peak RSS", None, med([r["roles"].get(role, 0) for r in e]) / 1e6, "MB")
        # where the CPU goes: on 2 cores, the exporter's seconds compete with the scheduler's and the workers'
        line("process tree CPU", med([sum(r["cpu"].values()) for r in p]), med([sum(r["cpu"].values()) for r in e]), "s")
        for role in ("client+scheduler", "worker"):
            line(f"{role} CPU (all)", med([r["cpu"].get(role, 0.0) for r in p]), med([r["cpu"].get(role, 0.0) for r in e]),
                 "s")
        for role in ("exporter", "launcher", "console relay"):
            line(f"{role} CPU", None, med([r["cpu"].get(role, 0.0) for r in e]), "s")
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            shutil.copytree(run_dirs[-1], args.keep)
        read_side(run_dirs, tasks)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
