"""The dashboard's flame graphs: the stored ``evlog.profile`` log records -> a tree per task prefix.

``flame(store, worker, label, span)``: the labels (Dask task prefixes, pool functions) that have samples,
and the tree of one of them (the one with most time unless ``label`` names one) in d3-flame-graph's
shape, ``{"name", "value", "children"}``, values in wall milliseconds; ``worker`` keeps one process's
samples (the worker selector), ``span`` one task span's (a task's own samples, 16 hex digits).
"""
from __future__ import annotations

import os

from evlog.data.profile_samples import EVENT, samples

MAX_RECORDS = 200_000  # evlog.profile log records read (about 28 hours of one prefix on one worker)


def flame(store, worker: str | None = None, label: str | None = None, span: str | None = None) -> dict:
    rows = store.named_events(EVENT, limit=MAX_RECORDS)
    if worker:
        rows = [r for r in rows if r.get("process") == worker]
    ss = samples(rows)
    if span:
        ss = [s for s in ss if s.span_id == span]
    totals: dict = {}
    for s in ss:
        totals[s.label] = totals.get(s.label, 0) + s.ns
    labels = sorted(totals, key=lambda k: -totals[k])
    if label not in totals:
        label = labels[0] if labels else None
    chosen = [s for s in ss if s.label == label]
    return {
        "labels": [{"label": k, "ms": round(totals[k] / 1e6, 3)} for k in labels],
        "label": label,
        "samples": sum(s.count for s in chosen),
        "tree": tree(label or "", chosen),
    }


def tree(root: str, ss) -> dict:
    """Samples (stacks leaf first) -> nested ``{"name", "value", "children"}``, root first, in ms."""
    top = {"name": root, "value": 0.0, "kids": {}}
    for s in ss:
        ms = s.ns / 1e6
        node = top
        node["value"] += ms
        for fn, file, line in reversed(s.stack):
            name = f"{fn} ({os.path.basename(file)}:{line})" if file else fn
            kids = node["kids"]
            child = kids.get(name)
            if child is None:
                child = kids[name] = {"name": name, "value": 0.0, "kids": {}}
            child["value"] += ms
            node = child
    return _plain(top)


def _plain(node: dict) -> dict:
    out = {"name": node["name"], "value": round(node["value"], 3)}
    if node["kids"]:
        out["children"] = [_plain(k) for k in sorted(node["kids"].values(), key=lambda k: -k["value"])]
    return out
