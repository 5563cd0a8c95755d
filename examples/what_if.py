"""Three workloads to try `evlog report --what-if` on, each timed by itself (one JSON line at the end):

    python examples/what_if.py sleeps WORKERS [THREADS] [SCALE]   # a Dask graph of sleeping tasks
    python examples/what_if.py array WORKERS [THREADS]            # dask.array with transfers and a CPU-bound step
    python examples/what_if.py pool PROCESSES                     # multiprocessing Pool.map of sleeping calls

Record one on some shape, then ask about others:

    EVLOG_RUN_DIR=run evlog-instrument python examples/what_if.py sleeps 2
    evlog report run --what-if workers=1 --what-if workers=4
    python examples/what_if.py sleeps 4          # the real thing, to compare

- sleeps: 24 loads, merges of four of them, and a final step that also takes a chain of 4 slower
  steps beside them: 7.1 s of sleeping in all, the chain 1 s of it; more workers help less and less
  (the chain does not get shorter). SCALE multiplies every sleep (default 1: loads and merges 0.2 s,
  steps 0.25 s, the final 0.1 s).
- array: a 2400 x 2400 random array in 64 chunks, added to its transpose (chunks move between
  workers), then a step that spins in pure Python on every chunk (it holds the GIL), then a sum.
- pool: 120 calls on a Pool of PROCESSES (fork), one in seven sleeping 0.15 s and the others 0.05 s,
  in the chunks Pool.map chooses.

The JSON line: {"workload", "workers" or "processes", "threads", "seconds"}: the time of the client's
call (compute, or the map), not of starting the cluster or the pool.
"""
from __future__ import annotations

import json
import sys
import time


def load(i, s):
    time.sleep(0.2 * s)
    return i


def merge(*xs):
    time.sleep(0.2 * xs[-1])
    return sum(xs[:-1])


def step(x, s):
    time.sleep(0.25 * s)
    return x + 1


def final(*xs):
    time.sleep(0.1 * xs[-1])
    return sum(xs[:-1])


def sleeps_graph(scale: float):
    import dask

    loads = [dask.delayed(load)(i, scale, dask_key_name=f"load-{i}") for i in range(24)]
    merges = [dask.delayed(merge)(*loads[4 * j:4 * j + 4], scale, dask_key_name=f"merge-{j}") for j in range(6)]
    c = 0
    for k in range(4):
        c = dask.delayed(step)(c, scale, dask_key_name=f"step-{k}")
    return dask.delayed(final)(*merges, c, scale, dask_key_name="final-0")


def spin(block):
    n = 0
    for _ in range(2_000_000):  # pure Python: holds the GIL, about 50 ms
        n += 1
    return block + n * 0


def array_graph():
    import dask.array as da

    x = da.random.random((2400, 2400), chunks=(300, 300))
    return (x + x.T).map_blocks(spin).sum()


def on_cluster(workers: int, threads: int, make) -> float:
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=workers, threads_per_worker=threads, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(workers)
        graph = make()
        t = time.perf_counter()
        graph.compute()
        return time.perf_counter() - t


def work(i):
    time.sleep(0.05 if i % 7 else 0.15)
    return i


def pool(processes: int) -> float:
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(processes) as p:
        t = time.perf_counter()
        p.map(work, range(120))
        return time.perf_counter() - t


def main(argv: list[str]) -> dict:
    what = argv[0] if argv else ""
    if what == "sleeps":
        w, th = int(argv[1]), int(argv[2]) if len(argv) > 2 else 1
        scale = float(argv[3]) if len(argv) > 3 else 1.0
        return {"workload": what, "workers": w, "threads": th, "scale": scale,
                "seconds": on_cluster(w, th, lambda: sleeps_graph(scale))}
    if what == "array":
        w, th = int(argv[1]), int(argv[2]) if len(argv) > 2 else 1
        return {"workload": what, "workers": w, "threads": th, "seconds": on_cluster(w, th, array_graph)}
    if what == "pool":
        n = int(argv[1])
        return {"workload": what, "processes": n, "seconds": pool(n)}
    raise SystemExit(__doc__)


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])), flush=True)
