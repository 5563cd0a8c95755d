"""Issue 31's prototype: the two ways to sample task stacks, measured before choosing one.

- in process: a thread in each Dask worker reading ``sys._current_frames()`` every 10 ms and walking the
  stacks of the executor threads (what evlog/observed/profiler.py became);
- out of process: ``py-spy record --rate 100`` (PyPI ``py-spy``) attached to each worker process, with and
  without ``--nonblocking`` (without it py-spy stops the process for each sample). ``austin`` (PyPI
  ``austin-dist``) was the other candidate; its binary did not run here (it needs glibc 2.38).

A LocalCluster of 2 worker processes x 1 thread per variant, in turn: 3,000 trivial tasks (tasks/s), then
400 CPU-bound tasks (seconds); CPU per sample is the sampling thread's own CPU time, or py-spy's CPU
time over the samples its rate asks for. Not run by run_all.py (a leading underscore): it needs py-spy
(``pip install py-spy``) and ptrace rights (root, or CAP_SYS_PTRACE, or Yama's ptrace_scope 0).

    python benchmarks/_sampler_prototype.py plain,thread,pyspy,pyspy-nb 3
"""
import os
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter

import psutil

state = {}


def _loop(interval, stop):
    counts = Counter()
    n = 0
    cpu = 0.0
    while not stop.wait(interval):
        t0 = time.thread_time()
        if n % 100 == 0:
            watch = {t.ident for t in threading.enumerate() if t.name.startswith("Dask-Default")}
        frames = sys._current_frames()
        for ident in watch:
            f = frames.get(ident)
            stack = []
            while f is not None:
                stack.append(f.f_code)
                f = f.f_back
            counts[tuple(stack)] += 1
        del frames
        n += 1
        cpu += time.thread_time() - t0
        state.update(n=n, cpu=cpu, stacks=len(counts))

def start(interval=0.01):
    stop = threading.Event()
    t = threading.Thread(target=_loop, args=(interval, stop), daemon=True, name="proto-sampler")
    t.start()
    state["stop"] = stop
    return True

def stats():
    s = dict(state); s.pop("stop", None)
    return s


def inc(x): return x + 1
def cpu(x):
    s = 0
    for i in range(300_000): s += i * i
    return s

def run(mode, ntriv=3000, ncpu=400):
    os.environ["PYTHONPATH"] = os.path.dirname(os.path.abspath(__file__))
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cl, Client(cl) as c:
        c.wait_for_workers(2)
        pids = list(c.run(os.getpid).values())
        spies = []
        if mode == "thread":
            c.run(lambda: __import__("_sampler_prototype").start(0.01))
        elif mode.startswith("pyspy"):
            for p in pids:
                args = ["py-spy", "record", "--pid", str(p), "--rate", "100", "--format", "raw", "-o", f"/tmp/evlog-pyspy-{p}.txt", "--threads"]
                if mode == "pyspy-nb": args.append("--nonblocking")
                t_spy = time.perf_counter()
                spies.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            time.sleep(1.0)
        c.gather(c.map(inc, range(200), key=[f"w-{i}" for i in range(200)]))
        t0 = time.perf_counter()
        c.gather(c.map(inc, range(ntriv)))
        t1 = time.perf_counter()
        c.gather(c.map(cpu, range(ncpu)))
        t2 = time.perf_counter()
        extra = {}
        if mode == "thread":
            st = c.run(lambda: __import__("_sampler_prototype").stats())
            n = sum(v["n"] for v in st.values()); cpu_s = sum(v["cpu"] for v in st.values())
            extra = dict(samples=n, cpu_per_sample_us=cpu_s / n * 1e6)
        for s in spies:
            ps = psutil.Process(s.pid)
            ct = ps.cpu_times()
            s.send_signal(2); s.wait(10)
            err = s.stderr.read().decode()
            extra.setdefault("spy_cpu_s", 0); extra["spy_cpu_s"] += ct.user + ct.system
            extra.setdefault("err", err[-300:])
            extra.setdefault("spy_samples", 0); extra["spy_samples"] += (time.perf_counter() - t_spy) * 100
        if spies: extra["spy_cpu_per_sample_us"] = extra["spy_cpu_s"] / extra["spy_samples"] * 1e6
        return ntriv / (t1 - t0), (t2 - t1), extra

if __name__ == "__main__":
    modes = sys.argv[1].split(",")
    pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    res = {m: [] for m in modes}
    for _r in range(pairs):
        for m in modes:
            tp, cw, ex = run(m)
            res[m].append((tp, cw))
            print(m, f"trivial {tp:.0f} tasks/s, cpu-bound wall {cw:.2f}s", ex, flush=True)
    base = modes[0]
    for m in modes[1:]:
        tr = statistics.median(a[0] for a in res[m]) / statistics.median(a[0] for a in res[base])
        cr = statistics.median(a[1] for a in res[base]) / statistics.median(a[1] for a in res[m])
        print(f"{m}: trivial throughput ratio {tr:.3f}, cpu-bound speed ratio {cr:.3f}")
