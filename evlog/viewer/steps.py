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

MAX_POINTS = 20_000  # per series: above, the steps are kept at the edges of equal time buckets


def saturation(rows: list[tuple], labels: dict, worker: str | None = None) -> list[dict]:
    """``rows``: the Gantt's task spans (id, start, end, worker, thread, process, ...); ``labels``: process
    id -> label. Returns the worker and processor saturation plots in line_plot's shape (x in seconds,
    one series per worker, values aligned on x), with ``steps``: draw as a step function."""
    changes: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
    threads: dict[str, set] = collections.defaultdict(set)
    for r in rows:
        w = r[3] or labels.get(r[5], "?")
        if worker and w != worker:
            continue
        start, end = r[1], max(r[2], r[1])
        changes[w].append((start, 1))
        changes[w].append((end, -1))
        threads[w].add(r[4] or "")
    per: dict[str, list[tuple[int, int]]] = {}
    for w, ch in changes.items():
        ch.sort()  # at one instant an end (-1) comes before a start (+1): a handover is not an overlap
        n, pts = 0, []
        for t, d in ch:
            n += d
            if pts and pts[-1][0] == t:
                pts[-1] = (t, n)
            else:
                pts.append((t, n))
        per[w] = _thin(pts)
    xs, aligned = _aligned(per)
    wsat, psat = [], []
    for w, vals in aligned:
        k = max(1, len(threads[w]))
        wsat.append({"label": w, "values": vals})
        psat.append({"label": w, "values": [None if v is None else round(100 * v / k, 1) for v in vals]})
    x = [t / 1e9 for t in xs]
    note = "from the task spans: every task start and end is a step"
    return [
        {"name": "evlog.worker.saturation", "title": "Worker saturation", "unit": "running tasks",
         "x": x, "series": wsat, "steps": True, "downsampled": False, "note": note},
        {"name": "evlog.processor.saturation", "title": "Processor saturation", "unit": "% of the worker's threads busy",
         "x": x, "series": psat, "steps": True, "downsampled": False, "note": note, "max": 100},
    ]


def held_bytes(series: dict[str, list[tuple[int, int]]]) -> dict:
    """``series``: worker -> (time ns, bytes held) at each change, from the ``dask.worker.memory`` spans
    (evlog/instrumentation/dask_memory.py). The bytes-held plot in line_plot's shape, as steps."""
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
