"""The console-metadata graphs: per process that printed metadata, its numeric keys plotted against the x
key chosen by the rules of cluster-job-logging (``choose_x``). `evlog report` uses the same rules."""
from __future__ import annotations

import collections

from evlog.data.jsonsafe import finite, num

MAX_METADATA = 20_000


def choose_x(records: list[dict]) -> str | None:
    """The x key of a metadata graph, after cluster-job-logging: "progress", else "epoch", else the
    first in alphabetical order of: monotonically increasing integers, monotonically increasing
    numbers, integers monotonic either way, numbers monotonic either way, any numbers. None: by time.

    ``records`` are the metadata objects in time order. A key qualifies by the values it has where it
    is numeric; "increasing" means never decreasing and not constant. A key is only chosen if some
    other numeric key is left to plot against it.
    """
    values: dict[str, list[float]] = collections.defaultdict(list)
    for r in records:
        for k, v in r.items():
            x = num(v)
            if x is not None:
                values[k].append(x)
    if len(values) < 2:
        return None
    for k in ("progress", "epoch"):
        if k in values:
            return k

    def integer(vs: list[float]) -> bool:
        return all(v.is_integer() for v in vs)

    def increasing(vs: list[float]) -> bool:
        return all(a <= b for a, b in zip(vs, vs[1:])) and vs[0] != vs[-1]

    def decreasing(vs: list[float]) -> bool:
        return all(a >= b for a, b in zip(vs, vs[1:])) and vs[0] != vs[-1]

    rules = (
        lambda vs: integer(vs) and increasing(vs),
        increasing,
        lambda vs: integer(vs) and (increasing(vs) or decreasing(vs)),
        lambda vs: increasing(vs) or decreasing(vs),
        lambda vs: True,
    )
    for rule in rules:
        found = sorted(k for k, vs in values.items() if rule(vs))
        if found:
            return found[0]
    return None


def metadata_graphs(events: list[dict]) -> list[dict]:
    """One graph per process that printed metadata: x key, x values, numeric series, newest rows."""
    by_proc: dict[str, list[dict]] = collections.OrderedDict()
    for e in events:
        if isinstance(e["body"], dict):
            by_proc.setdefault(e["process"], []).append(e)
    graphs = []
    for proc, evs in by_proc.items():
        records = [e["body"] for e in evs]
        xkey = choose_x(records)
        keys = sorted({k for r in records for k, v in r.items() if num(v) is not None and k != xkey})
        rows = [e for e in evs if xkey is None or num(e["body"].get(xkey)) is not None]
        if xkey is not None:  # a graph by x: points in x order
            rows.sort(key=lambda e: num(e["body"][xkey]))
        xs = [num(e["body"][xkey]) if xkey else e["time"] / 1e9 for e in rows]
        series = {k: [num(e["body"].get(k)) for e in rows] for k in keys}
        table = [{"time": e["time"] / 1e9, "body": finite(e["body"])} for e in reversed(evs[-200:])]
        graphs.append({"process": proc, "x": xkey, "xs": xs, "series": series, "table": table,
                       "count": len(evs)})
    return graphs


def graphs(store) -> dict:
    """The metadata panel: every process's graph."""
    return {"graphs": metadata_graphs(store.named_events("evlog.metadata", limit=MAX_METADATA))}
