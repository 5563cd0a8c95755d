"""The Fine Performance Metrics panel, as Dask's own dashboard page of that name shows them: per task prefix,
where ``execute`` spent its time (or bytes, or counts) by activity, as stacked bars; the same for
``gather-dep`` and ``get-data``; the whole run, or the tree of one Dask span the program named
(``distributed.span``). And the Dask spans themselves, for the bands above the Gantt and the selector.

The figures are the ``dask.worker.*`` points the scheduler's readings became (evlog/builders/
dask_readings.py): each series' last value, summed over schedulers (``latest``; the report uses it too).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from evlog.wire import dask as wire

if TYPE_CHECKING:
    from evlog.data.store import Store

UNITS = {"seconds": wire.METRIC_TIME, "bytes": wire.METRIC_BYTES, "count": wire.METRIC_COUNT}
METRICS = tuple(UNITS.values())
CONTEXTS = ("gather-dep", "get-data")  # drawn as one bar each, by activity (run-wide: Dask has them per span never)
MAX_SPANS = 2000  # Dask spans listed (bands, selector); a run with more lists its first ones


def latest(points: list[dict]) -> dict:
    """(metric, attributes as sorted items) -> value: each series' last value, summed over the schedulers
    (and over the lifetimes of one process's schedulers: a series' start time)."""
    last: dict = {}
    for p in points:
        name = p.get("name")
        if name not in METRICS or not isinstance(p.get("value"), (int, float)):
            continue
        a = p.get("attributes") or {}
        key = (name, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in a.items())))
        res = p.get("resource") or {}
        series = (str(res.get("service.instance.id") or res.get("process.pid") or ""), p.get("start") or 0, key)
        t = p.get("time") or 0
        if series not in last or t >= last[series][0]:
            last[series] = (t, p["value"])
    out: dict = {}
    for (_inst, _start, key), (_t, v) in last.items():
        out[key] = out.get(key, 0) + v
    return out


def breakdown(values: dict, metric: str = wire.METRIC_TIME, span_id: str | None = None) -> dict:
    """{"execute": {prefix: {activity: v}}, "gather-dep": {activity: v}, "get-data": {activity: v}} of one
    metric, for the run (``span_id`` None) or one Dask span's tree."""
    out: dict = {"execute": {}, **{c: {} for c in CONTEXTS}}
    for (name, items), v in values.items():
        if name != metric:
            continue
        a = dict(items)
        if a.get(wire.ATTR_SPAN_ID) != span_id:
            continue
        context, activity = a.get(wire.ATTR_CONTEXT), str(a.get(wire.ATTR_ACTIVITY, ""))
        if context == "execute":
            per = out["execute"].setdefault(str(a.get(wire.ATTR_PREFIX, "")), {})
        elif context in out:
            per = out[context]
        else:
            continue
        per[activity] = per.get(activity, 0) + v
    return out


def dask_spans(store: Store) -> list[dict]:
    """The Dask spans of the run, in start order: id, name path, start, end (seconds), depth."""
    from evlog.data.store import CAT_OTHER  # imported where read: `evlog report` imports this module, not the store

    out = []
    for s in store.spans_named(wire.SPAN_NAME + " ", CAT_OTHER, MAX_SPANS):
        a = s["attributes"]
        name = a.get(wire.ATTR_SPAN_NAME)
        name = [str(x) for x in name] if isinstance(name, (list, tuple)) else [str(name or s["name"][10:])]
        out.append({"id": str(a.get(wire.ATTR_SPAN_ID) or ""), "name": name, "label": " / ".join(name),
                    "depth": len(name) - 1, "start": s["start"] / 1e9, "end": s["end"] / 1e9,
                    "wall_s": round((s["end"] - s["start"]) / 1e9, 6)})
    out.sort(key=lambda s: (s["start"], s["depth"]))  # an enclosing span before the first inside it
    return out


def _stack(per: dict) -> dict:
    """Bars (largest first) of {bar: {activity: v}}, with every activity once, largest overall first."""
    totals: dict = {}
    for acts in per.values():
        for a, v in acts.items():
            totals[a] = totals.get(a, 0) + v
    bars = sorted(per, key=lambda b: -sum(per[b].values()))
    return {"bars": bars, "activities": sorted(totals, key=lambda a: -totals[a]),
            "values": {b: {a: round(v, 9) for a, v in per[b].items()} for b in bars}}


def fine_metrics(store: Store, span: str | None = None, unit: str = "seconds") -> dict:
    """The panel: ``execute`` by prefix x activity, ``gather-dep`` and ``get-data`` by activity, in ``unit``
    (seconds, bytes or count) of the run or of Dask span ``span`` (its tree, as Dask's figures are)."""
    from evlog.data.store import store_points  # as in dask_spans: importing the store (asyncio with it) costs 60 ms

    values = latest(store_points(store, METRICS))
    present = [u for u, m in UNITS.items() if any(name == m for name, _a in values)]
    unit = unit if unit in UNITS else "seconds"
    spans = dask_spans(store)
    if span and not any(s["id"] == span for s in spans):
        span = None
    b = breakdown(values, UNITS[unit], span or None)
    out = {"units": present, "unit": unit, "spans": spans, "span": span, "empty": not values,
           "execute": _stack(b["execute"])}
    for c in CONTEXTS:  # Dask keeps these per worker only, never per span
        out[c.replace("-", "_")] = _stack({c: b[c]} if b[c] and not span else {})
    return out
