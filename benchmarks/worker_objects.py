"""GC-tracked objects of a Dask worker process after 10,000 tasks, plain against evlog.

Every full collection of the garbage collector walks every object it tracks, so what evlog leaves in a
worker (modules, their classes and functions, caches, the OTel SDK's providers if they were built) costs
on every full collection for the worker's whole life. The app runs a LocalCluster of 2 worker processes
x 1 thread, a client.map of N trivial tasks (10,000), waits 1.5 s (a shipment of records and a metric
collection happen meanwhile), and asks each worker (client.run) for ``len(gc.get_objects())`` after a
``gc.collect()``, and for the ``opentelemetry.sdk`` modules it holds. The plain app and the same app
under ``evlog-instrument`` (run folder) alternate, A B A B ..., at least 3 pairs; object counts do not
depend on the machine's load. Goal: at most +2,000 objects per worker.

    python benchmarks/worker_objects.py            # 10,000 tasks, 3 pairs
    python benchmarks/worker_objects.py --quick    # 2,000 tasks, 3 pairs

The evlog runs prove they were instrumented: their run folders hold the tasks' dask.execute spans.
"""
from __future__ import annotations

import argparse
import glob
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap

PY = sys.executable

APP = textwrap.dedent('''
    import gc, json, sys, time
    from distributed import Client, LocalCluster

    def inc(x):
        return x + 1

    def objects():
        gc.collect()
        return len(gc.get_objects()), sorted(m for m in sys.modules if m.startswith("opentelemetry.sdk"))

    if __name__ == "__main__":
        n = int(sys.argv[1])
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \\
                Client(cluster) as client:
            assert sum(client.gather(client.map(inc, range(n)))) == n * (n + 1) // 2
            time.sleep(1.5)
            got = client.run(objects)
        print("RESULT " + json.dumps(sorted(got.values())))
''')


def _env(**kw) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(kw)
    return env


def _run(cmd: list, env: dict) -> list:
    proc = subprocess.run(cmd, env=env, capture_output=True, timeout=900)
    for line in proc.stdout.decode().splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise SystemExit(f"no result from {cmd[:3]}...: {proc.stderr.decode()[-3000:]}")


def _execute_spans(run_dir: str) -> int:
    n = 0
    for path in glob.glob(os.path.join(run_dir, "**", "traces*.jsonl*"), recursive=True):
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt") as fh:
            for line in fh:
                for rs in json.loads(line).get("resourceSpans", ()):
                    for ss in rs.get("scopeSpans", ()):
                        n += sum(1 for s in ss.get("spans", ()) if s.get("name", "").startswith("dask.execute"))
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=0)
    args = ap.parse_args()
    tasks = args.tasks or (2_000 if args.quick else 10_000)
    tmp = tempfile.mkdtemp(prefix="evlog-bench-objects-")
    app = os.path.join(tmp, "app.py")
    with open(app, "w") as fh:
        fh.write(APP)
    counts: dict[str, list[int]] = {"plain": [], "evlog": []}
    sdk_modules = set()
    spans = []
    try:
        for i in range(max(3, args.pairs)):
            for name in ("plain", "evlog"):
                if name == "plain":
                    got = _run([PY, app, str(tasks)], _env())
                else:
                    run_dir = os.path.join(tmp, f"run{i}")
                    got = _run([PY, "-m", "evlog.launcher", PY, app, str(tasks)],
                               _env(EVLOG_RUN_DIR=run_dir, EVLOG_SUMMARY="false"))
                    spans.append(_execute_spans(run_dir))
                    sdk_modules.update(m for _n, mods in got for m in mods)
                counts[name] += [n for n, _mods in got]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    plain, evlog = statistics.median(counts["plain"]), statistics.median(counts["evlog"])
    print(f"worker_gc_objects: ratio {evlog / plain:.3f} (plain {plain:,.0f}, evlog {evlog:,.0f}, objects)")
    print(f"worker_gc_objects.added: {evlog - plain:+,.0f} objects per worker after {tasks:,} tasks (goal <= +2,000); "
          f"each worker, plain {sorted(counts['plain'])}, evlog {sorted(counts['evlog'])}")
    print(f"worker_gc_objects.proof: the evlog runs wrote {spans} dask.execute spans (expected {tasks:,} each); "
          f"their workers held {len(sdk_modules)} opentelemetry.sdk modules")


if __name__ == "__main__":
    main()
