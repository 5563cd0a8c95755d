"""Where the tasks' time went by Dask's own measure: its fine performance metrics (the ``dask.worker.*``
points the scheduler's readings become, evlog/builders/dask_readings.py) and the Dask spans the program
named (``dask.span`` spans), in the report. docs/report.md defines the figures.

Pure functions over otlp_decode's rows (spans and metric points); ``attach`` adds them to the report:
- per computation, per task prefix, ``activity_s``: seconds by activity of ``execute`` (``thread-cpu``,
  ``thread-noncpu``, ``serialize``, ...). Dask sums them per prefix for the whole run, so a prefix that
  ran in several computations is shared out by each one's part of the prefix's compute time (tasks, if
  none computed); a prefix of one computation is exact;
- ``activity``: the run's figures, ``execute`` by prefix, and ``gather-dep`` and ``get-data`` by activity;
- ``dask_spans``: each Dask span with its wall time and its tree's figures (Dask's ``Span`` figures
  include its sub-spans');
- advice from them (thresholds below).
"""
from __future__ import annotations

from evlog.data.panels.fine_metrics import METRICS, breakdown, latest  # the dashboard's own reduction
from evlog.wire import dask as wire

from .common import pct

__all__ = ["METRICS", "attach", "latest", "line"]  # what the report's command, renderers and panel use

CPU, OFF_CPU = "thread-cpu", "thread-noncpu"
WHAT = {  # an activity of execute, as a line of the report says it
    CPU: "on the CPU",
    OFF_CPU: "off the CPU (I/O, sleep, or waiting for the GIL or a free core)",
    "executor": "waiting for a thread of the worker's executor",
    "serialize": "serializing its results",
    "compress": "compressing its results",
    "deserialize": "deserializing its inputs",
    "decompress": "decompressing its inputs",
    "disk-write": "spilling results to disk",
    "disk-read": "reading spilled data back from disk",
    "other": "in Dask's own work around the task",
}
SHOWN_SHARE = 0.05  # activities of a prefix named on its line besides the largest
ADVICE_MIN_S = 0.5  # a prefix's seconds below which no activity advice is given
SERIALIZE_SHARE = 0.3  # serialize + compress; deserialize + decompress
DISK_SHARE = 0.2  # disk-write + disk-read
OFF_CPU_SHARE = 0.5  # thread-noncpu


def _r(x: float) -> float:
    return round(x, 6)


def figures(values: dict, span_id: str | None = None) -> dict:
    """Seconds of Dask's fine performance metrics: {"execute": {prefix: {activity: s}}, "gather-dep":
    {activity: s}, "get-data": {activity: s}} of the run (``span_id`` None) or of one Dask span's tree."""
    out = breakdown(values, wire.METRIC_TIME, span_id)
    for per in [*out["execute"].values(), out["gather-dep"], out["get-data"]]:
        for k in per:
            per[k] = _r(per[k])
    return out


def share_out(comps: list[dict], run_execute: dict) -> None:
    """Each computation's ``prefixes[P]["activity_s"]``: the run's figures of P, shared by compute time."""
    totals: dict = {}
    for c in comps:
        for p, s in c["prefixes"].items():
            t = totals.setdefault(p, [0.0, 0])
            t[0] += s.get("compute_s") or 0.0
            t[1] += s.get("count") or 0
    for c in comps:
        for p, s in c["prefixes"].items():
            run = run_execute.get(p)
            if not run:
                continue
            compute, count = totals[p]
            part = (s.get("compute_s") or 0.0) / compute if compute > 0 else (s.get("count") or 0) / max(count, 1)
            s["activity_s"] = {a: _r(v * part) for a, v in sorted(run.items(), key=lambda kv: -kv[1])}


def line(prefix: str, activity_s: dict) -> str:
    """"clean: 97% off the CPU (I/O, sleep, or waiting for the GIL or a free core)", and the other activities of
    5% or more; "" without figures."""
    total = sum(activity_s.values())
    if total <= 0:
        return ""
    ranked = sorted(activity_s.items(), key=lambda kv: -kv[1])
    parts = [f"{pct(v / total)} {WHAT.get(a, a)}" for i, (a, v) in enumerate(ranked)
             if i == 0 or v / total >= SHOWN_SHARE]
    return f"{prefix}: " + "; ".join(parts)


def advice(name: str, prefix: str, activity_s: dict) -> list[str]:
    """What a prefix's activities suggest (docs/report.md, Advice)."""
    total = sum(activity_s.values())
    if total < ADVICE_MIN_S:
        return []
    share = {a: v / total for a, v in activity_s.items()}
    out = []
    ser = share.get("serialize", 0) + share.get("compress", 0)
    deser = share.get("deserialize", 0) + share.get("decompress", 0)
    disk = share.get("disk-write", 0) + share.get("disk-read", 0)
    if ser >= SERIALIZE_SHARE:
        out.append(f"{name}: prefix {prefix} is {pct(ser)} serialize: return smaller results or keep them on the "
                   "workers (persist, and reduce there before gathering)")
    if deser >= SERIALIZE_SHARE:
        out.append(f"{name}: prefix {prefix} is {pct(deser)} deserialize: its inputs are large; fuse it with the step "
                   "that makes them, or send smaller pieces")
    if disk >= DISK_SHARE:
        out.append(f"{name}: prefix {prefix} spends {pct(disk)} of its time spilling to and reading from disk: the "
                   "workers are short of memory; give them more, or make smaller partitions")
    if share.get(OFF_CPU, 0) >= OFF_CPU_SHARE:
        out.append(f"{name}: prefix {prefix} is {pct(share[OFF_CPU])} off the CPU (I/O, sleep, or waiting for the "
                   "GIL or a free core): if it waits for I/O, more threads per worker will help; if for the GIL, "
                   "more worker processes with fewer threads; if the host is busy, fewer threads")
    return out


def dask_spans(spans: list[dict], values: dict) -> list[dict]:
    """The Dask spans the program named, in start order: name, wall time, and their tree's figures."""
    out = []
    for r in spans:
        if not r["name"].startswith(wire.SPAN_NAME + " "):
            continue
        a = r["attributes"]
        sid = str(a.get(wire.ATTR_SPAN_ID) or "")
        f = figures(values, sid)
        by_activity: dict = {}
        for per in f["execute"].values():
            for k, v in per.items():
                by_activity[k] = _r(by_activity.get(k, 0.0) + v)
        name = a.get(wire.ATTR_SPAN_NAME)
        out.append({"id": sid, "name": list(name) if isinstance(name, (list, tuple)) else [str(name)],
                    "start": _r(r["start"] / 1e9), "end": _r(r["end"] / 1e9), "wall_s": _r((r["end"] - r["start"]) / 1e9),
                    "execute_s": _r(sum(by_activity.values())), "activity_s": by_activity,
                    "prefixes": f["execute"], "gather_dep_s": f["gather-dep"]})
    out.sort(key=lambda s: (s["start"], len(s["name"])))
    return out


def attach(report: dict, spans: list[dict], points: list[dict]) -> None:
    """Add Dask's own figures to ``report`` (analysis.analyse's dict): per computation and prefix
    ``activity_s`` and its advice, ``activity`` (the run's) and ``dask_spans``."""
    values = latest(points)
    run = figures(values)
    comps = report.get("computations") or []
    share_out(comps, run["execute"])
    extra = []
    for c in comps:
        for p, s in c["prefixes"].items():
            for a in advice(c["name"], p, s.get("activity_s") or {}):
                c["advice"].append(a)
                extra.append(a)
    report["advice"] = list(report.get("advice") or []) + extra
    report["activity"] = run
    report["dask_spans"] = dask_spans(spans, values)
