"""The line plots: metrics as series per process on one x (downsampled past a limit), Dask's memory per
worker, and the saturation and bytes-held plots as exact steps (steps.py)."""
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


def line_plot(store: Store, name: str, worker: str | None = None, limit: int = MAX_SERIES_POINTS) -> dict:
    """One metric as series per process, aligned on one x array (seconds) for uPlot."""
    labels = {p["id"]: p["label"] for p in store.processes()}
    rows, averaged = store.series(name, buckets=limit)
    per: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for proc, t, v in rows:
        label = labels.get(proc, "?")
        if worker and label != worker:
            continue
        if v is None or not math.isfinite(v):
            continue
        per[label].append((t / 1e9, v))
    xs = sorted({t for pts in per.values() for t, _ in pts})
    index = {t: i for i, t in enumerate(xs)}
    series = []
    for label in sorted(per):
        vals: list[float | None] = [None] * len(xs)
        for t, v in per[label]:
            vals[index[t]] = v
        series.append({"label": label, "values": vals})
    return {"name": name, "x": xs, "series": series, "downsampled": averaged,
            "note": f"averaged over {limit:,} time buckets" if averaged else ""}


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
    if cat in (CAT_EXECUTION, CAT_POOL_TASK):  # tasks with their threads: saturation from the spans
        labels = {p["id"]: p["label"] for p in st.processes()}
        exact = {p["name"]: p for p in steps.saturation(st.gantt_rows(cat), labels, worker)}
    held = st.held_bytes(worker)
    if held:  # a Dask run: the bytes its workers hold, from the scheduler's transitions
        exact["evlog.bytes.allocated"] = steps.held_bytes(held)
    out = []
    for i, (name, title, unit) in enumerate(LINE_PLOTS):
        if name in exact:
            out.append(exact[name])
        elif i < ALWAYS_PLOTTED or name in names:
            out.append({**line_plot(st, name, worker), "title": title, "unit": unit})
        if name == "evlog.bytes.allocated":
            memory = worker_memory(st, worker)
            if memory is not None:
                out.append(memory)
    return out
