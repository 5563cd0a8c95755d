"""Saturation plots computed from the task spans themselves: exact step functions, in time with the Gantt.

The consumers' gauges (``evlog.worker.saturation``, ``evlog.processor.saturation``) are sampled once per
metric export (5 s by default), so a short run can end between two samples and a busy one reads 0
between tasks. The dashboard draws these two from the same spans as the Gantt instead: every task start
and end is a point. Worker saturation: tasks running in each worker (Dagger's ``wsat``); processor
saturation: the share of each worker's threads running a task (Dagger's ``psat`` per thread, summed up
per worker so a cluster of many threads stays readable).
"""
from __future__ import annotations

import collections

from evlog.data.intervals import merge

MAX_POINTS = 20_000  # per series: above, the steps are kept at the edges of equal time buckets
DENSE_STEPS = 600   # a worker with more task starts and ends than this ...
BUCKETS = 600       # ... is drawn as the mean of busy threads in this many equal time buckets


def saturation(rows: list[tuple], labels: dict, worker: str | None = None) -> list[dict]:
    """``rows``: the Gantt's task spans (id, start, end, worker, thread, process, ...); ``labels``: process
    id -> label. Returns the worker and processor saturation plots in line_plot's shape (x in seconds,
    one series per worker, values aligned on x), with ``steps``: draw as a step function.

    A thread runs one task at a time: its tasks' spans are merged first (spans of one thread can overlap
    by a few ms, the worker's clock offset moving mid-task), so a worker's saturation is the number of
    its threads busy, never more than it has, and processor saturation never over 100%. Past
    DENSE_STEPS starts and ends in a worker (many short tasks), each of BUCKETS equal time buckets
    shows the mean number of threads busy in it: a step per task would paint a solid band from 0 to 1,
    where the mean is what the report's utilisation says."""
    busy: dict[str, dict[str, list[tuple[int, int]]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in rows:
        w = r[3] or labels.get(r[5], "?")
        if worker and w != worker:
            continue
        busy[w][r[4] or ""].append((r[1], max(r[2], r[1])))
    merged = {w: [iv for th in threads.values() for iv in merge(th)] for w, threads in busy.items()}
    nthreads = {w: max(1, len(threads)) for w, threads in busy.items()}
    dense = any(2 * len(iv) > DENSE_STEPS for iv in merged.values())
    if dense:
        xs, aligned = _bucket_means(merged)
    else:
        per: dict[str, list[tuple[int, int]]] = {}
        for w, iv in merged.items():
            ch = sorted([(s, 1) for s, _e in iv] + [(e, -1) for _s, e in iv])  # an end before a start at one instant
            n, pts = 0, []
            for t, d in ch:
                n += d
                if pts and pts[-1][0] == t:
                    pts[-1] = (t, n)
                else:
                    pts.append((t, n))
            per[w] = pts
        xs, aligned = _aligned(per)
    wsat, psat = [], []
    for w, vals in aligned:
        k = nthreads[w]
        wsat.append({"label": w, "values": vals, "threads": k})
        psat.append({"label": w, "values": [None if v is None else round(100 * v / k, 1) for v in vals], "threads": k})
    x = [t / 1e9 for t in xs]
    if dense:
        width = (xs[1] - xs[0]) / 1e9 if len(xs) > 1 else 0
        note = (f"many short tasks: the mean of threads busy in each of {BUCKETS} time buckets of "
                f"{width * 1e3:.3g} ms, from the task spans")
    else:
        note = "from the task spans: every task start and end is a step"
    return [
        {"name": "evlog.worker.saturation", "title": "Worker saturation", "unit": "running tasks",
         "x": x, "series": wsat, "steps": True, "downsampled": dense, "note": note, "per_worker": True},
        {"name": "evlog.processor.saturation", "title": "Processor saturation", "unit": "% of the worker's threads busy",
         "x": x, "series": psat, "steps": True, "downsampled": dense, "note": note, "max": 100, "per_worker": True},
    ]


def _bucket_means(busy: dict[str, list[tuple[int, int]]]) -> tuple[list[int], list[tuple[str, list]]]:
    """Per worker, the mean number of its threads busy in each of BUCKETS equal time buckets over the
    tasks' range (its threads' busy intervals in ``busy``), on one x: the buckets' starts and the end."""
    lo = min(s for iv in busy.values() for s, _e in iv)
    hi = max(e for iv in busy.values() for _s, e in iv)
    width = max(1, -(-(hi - lo) // BUCKETS))
    out = []
    for w in sorted(busy):
        acc = [0] * BUCKETS
        for s, e in busy[w]:
            b = (s - lo) // width
            while s < e and b < BUCKETS:
                edge = lo + (b + 1) * width
                acc[b] += min(e, edge) - s
                s, b = edge, b + 1
        out.append((w, [round(a / width, 4) for a in acc] + [0]))
    return [lo + b * width for b in range(BUCKETS + 1)], out


def held_bytes(series: dict[str, list[tuple[int, int]]]) -> dict:
    """``series``: worker -> (time ns, bytes held) at each change, from the ``dask.worker.memory`` spans
    (evlog/builders/dask_memory.py). The bytes-held plot in line_plot's shape, as steps."""
    per = {}
    for w, pts in series.items():
        pts = sorted(pts)
        if pts:
            per[w] = _thin([(pts[0][0] - 1, 0)] + pts)  # nothing held before its first result
    xs, aligned = _aligned(per)
    return {"name": "evlog.bytes.allocated", "title": "Bytes held", "unit": "bytes",
            "x": [t / 1e9 for t in xs], "series": [{"label": w, "values": v} for w, v in aligned],
            "steps": True, "downsampled": False,
            "note": "task results in each worker's memory, from the scheduler's transitions: every change is a step"}


def _aligned(per: dict[str, list[tuple[int, int]]]) -> tuple[list[int], list[tuple[str, list]]]:
    """Every series on one x (the union of their change times), each holding its value until its next
    change; None before its first."""
    xs = sorted({t for pts in per.values() for t, _ in pts})
    index = {t: i for i, t in enumerate(xs)}
    out = []
    for w in sorted(per):
        vals: list = [None] * len(xs)
        for t, n in per[w]:
            vals[index[t]] = n
        _fill(vals)
        out.append((w, vals))
    return xs, out


def _fill(vals: list) -> None:
    """A step series holds its value until its next change (aligned x of other workers in between)."""
    last = None
    for i, v in enumerate(vals):
        if v is None:
            vals[i] = last
        else:
            last = v


def _thin(pts: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """At most MAX_POINTS steps: per equal time bucket, the highest level reached and the level it ends at."""
    if len(pts) <= MAX_POINTS:
        return pts
    lo, hi = pts[0][0], pts[-1][0]
    buckets = MAX_POINTS // 2
    width = max(1, (hi - lo) // buckets + 1)
    out: list[tuple[int, int]] = []
    cur, top, last, t_top = None, 0, 0, 0
    for t, n in pts:
        b = (t - lo) // width
        if b != cur:
            if cur is not None:
                out.append((t_top, top))
                if last != top:
                    out.append((lo + (cur + 1) * width - 1, last))
            cur, top, t_top = b, n, t
        elif n > top:
            top, t_top = n, t
        last = n
    out.append((t_top, top))
    if last != top:
        out.append((hi, last))
    return out
