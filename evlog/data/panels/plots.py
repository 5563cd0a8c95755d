"""The line plots: metrics as series per process on one x (downsampled past a limit), the machine's own
figures (load average, free memory) once per host, Dask's memory per worker, and the saturation and
bytes-held plots as exact steps (steps.py): processor saturation only where a worker ran tasks on more
than one thread (with one, it is worker saturation again)."""
from __future__ import annotations

import collections
import math

from evlog.data.store import CAT_EXECUTION, CAT_POOL_TASK, Store

from . import steps
from .gantt import task_category

MAX_SERIES_POINTS = 1_500  # per line-plot series; above, averaged per time bucket

LINE_PLOTS = (
    ("evlog.worker.saturation", "Worker saturation", "running tasks"),
    ("system.cpu.load_average.1m", "CPU load average (1 min)", "runnable threads"),
    ("evlog.memory.free_fraction", "Free memory", "% free"),
    ("evlog.bytes.allocated", "Bytes allocated", "bytes"),
    ("evlog.processor.saturation", "Processor saturation", "running tasks"),
    ("evlog.event.saturation", "Event saturation", "events in flight"),
)
ALWAYS_PLOTTED = 4  # the first four are drawn even when empty
# what every process samples of the machine it runs on: one series per host, whichever process sampled it
MACHINE_WIDE = frozenset(("system.cpu.load_average.1m", "evlog.memory.free_fraction"))


def line_plot(store: Store, name: str, worker: str | None = None, limit: int = MAX_SERIES_POINTS) -> dict:
    """One metric as series per process (a machine-wide one: per host), aligned on one x (seconds) for uPlot."""
    procs = store.processes()
    labels = {p["id"]: p["label"] for p in procs}
    machine = name in MACHINE_WIDE
    if machine:  # the host's samples, whichever of its processes took them (a worker chosen: its host's)
        hosts = {p["host"] for p in procs if p["label"] == worker} if worker else None
        labels = {p["id"]: p["host"] or "?" for p in procs if hosts is None or p["host"] in hosts}
    rows, averaged = store.series(name, buckets=limit)
    per: dict[str, dict[float, list[float]]] = collections.defaultdict(dict)
    for proc, t, v in rows:
        label = labels.get(proc, None if machine else "?")
        if label is None or (worker and not machine and label != worker):
            continue
        if v is None or not math.isfinite(v):
            continue
        per[label].setdefault(t / 1e9, []).append(v)
    xs = sorted({t for pts in per.values() for t in pts})
    index = {t: i for i, t in enumerate(xs)}
    series = []
    for label in sorted(per):
        vals: list[float | None] = [None] * len(xs)
        for t, vs in per[label].items():
            vals[index[t]] = sum(vs) / len(vs)  # one host's processes sampling at one instant
        series.append({"label": label, "values": vals})
    note = f"averaged over {limit:,} time buckets" if averaged else ""
    if machine:
        note = "the machine's own figure, once per host (sampled by each of its processes)" + (f"; {note}" if note else "")
    return {"name": name, "x": xs, "series": series, "downsampled": averaged, "note": note, "per_host": machine}


def worker_memory(store: Store, worker: str | None = None, limit: int = MAX_SERIES_POINTS) -> dict | None:
    """Memory per worker as Dask's dashboard shows it: managed, unmanaged and spilled bytes of each
    worker (the scheduler's samples of WorkerState.memory), one group of three series per worker on one
    x; past ``limit`` sample times, averaged per time bucket. None when the run has no such samples."""
    rows = store.worker_memory()
    if worker:
        rows = [r for r in rows if r[1] == worker]
    if not rows:
        return None
    lo, hi = rows[0][0], rows[-1][0]
    times = sorted({r[0] for r in rows})
    width = max(1, -(-(hi - lo) // limit)) if len(times) > limit else 0
    sums: dict = collections.defaultdict(lambda: [0.0, 0])
    for t, w, kind, v in rows:
        x = lo + (t - lo) // width * width if width else t
        acc = sums[(w, kind, x)]
        acc[0] += v
        acc[1] += 1
    xs = sorted({x for _w, _k, x in sums})
    index = {x: i for i, x in enumerate(xs)}
    cols: dict = {}
    for (w, kind, x), (total, n) in sums.items():
        cols.setdefault((w, kind), [None] * len(xs))[index[x]] = total / n
    series = [{"label": kind, "worker": w, "values": cols.get((w, kind)) or [None] * len(xs)}
              for w in sorted({w for w, _k in cols}) for kind in ("managed", "unmanaged", "spilled")]
    return {"name": "dask.worker.memory", "title": "Memory per worker", "unit": "bytes", "x": [x / 1e9 for x in xs],
            "series": series, "stacked": True, "per_worker": True, "downsampled": bool(width),
            "note": "Dask's own figures (WorkerState.memory), sampled on the scheduler: managed (task results "
                    "in memory), unmanaged (the rest of the worker's process memory), spilled (results on disk)"}


def plots(st: Store, worker: str | None = None) -> list[dict]:
    """The line plots panel: LINE_PLOTS in order (the saturation plots as exact steps from the task spans
    where the run has tasks with threads, the bytes held from the scheduler's transitions in a Dask run),
    with Dask's memory per worker after the bytes plot."""
    names = {n for n, _u, _c in st.metric_names()}
    cat, _what = task_category(st)
    exact = {}
    skip = set()
    if cat in (CAT_EXECUTION, CAT_POOL_TASK):  # tasks with their threads: saturation from the spans
        labels = {p["id"]: p["label"] for p in st.processes()}
        exact = {p["name"]: p for p in steps.saturation(st.gantt_rows(cat), labels, worker)}
        psat = exact.get("evlog.processor.saturation")
        if psat is not None:  # a worker of one thread: its processor saturation is its worker saturation
            psat["series"] = [x for x in psat["series"] if x.get("threads", 1) > 1]
            if not psat["series"]:
                del exact["evlog.processor.saturation"]
                skip.add("evlog.processor.saturation")
    held = st.held_bytes(worker)
    if held:  # a Dask run: the bytes its workers hold, from the scheduler's transitions
        exact["evlog.bytes.allocated"] = steps.held_bytes(held)
    out = []
    for i, (name, title, unit) in enumerate(LINE_PLOTS):
        if name in exact:
            out.append(exact[name])
        elif name in skip:
            pass
        elif i < ALWAYS_PLOTTED or name in names:
            out.append({**line_plot(st, name, worker), "title": title, "unit": unit})
        if name == "evlog.bytes.allocated":
            memory = worker_memory(st, worker)
            if memory is not None:
                out.append(memory)
    return out
