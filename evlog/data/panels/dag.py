"""The task graph: one node per task, or per task prefix (with counts) when too large.

Counts are of tasks, never of spans: a key whose result was let go later has a second ``dask.task``
span (a second life), which is no second task. A prefix node counts the prefix's executions (the tasks
its workers ran), or, in a run without executions, its keys."""
from __future__ import annotations

import collections
import json
from typing import Any

from evlog.data.store import Store

MAX_DAG_NODES = 1_500      # task graph drawn per task; above, per task prefix


def task_graph(store: Store, worker: str | None = None, max_nodes: int = MAX_DAG_NODES) -> dict:
    rows = _one_per_key(store.dependencies())
    if len(rows) > max_nodes:
        return _prefix_graph(rows, max_nodes, store.executions_per_prefix())
    index: dict[str, int] = {}
    nodes = []
    for key, prefix, status, w, _deps in rows:
        if key in index:
            continue
        index[key] = len(nodes)
        nodes.append({"key": key, "prefix": prefix or "", "error": status == "ERROR", "worker": w or ""})
    edges = set()
    for key, _p, _s, _w, deps in rows:
        for d in _dep_list(deps):
            if d in index and key in index:
                edges.add((index[d], index[key]))
    return {"mode": "tasks", "nodes": nodes, "edges": sorted(edges), "note": "",
            "selected_worker": worker or ""}


def _one_per_key(rows: list[tuple]) -> list[tuple]:
    """One row per task key: its first life's (in start order), with the dependencies any of its lives
    recorded (a second life, which only let the result go, may carry none) and erred if any life did."""
    out: dict[str, list] = {}
    for key, prefix, status, w, deps in rows:
        r = out.get(key)
        if r is None:
            out[key] = [key, prefix, status, w, deps]
            continue
        if not r[4] and deps:
            r[4] = deps
        if status == "ERROR":
            r[2] = status
    return [tuple(r) for r in out.values()]


def _dep_list(deps: Any) -> list[str]:
    if not deps:
        return []
    if isinstance(deps, str):
        try:
            deps = json.loads(deps)
        except ValueError:
            return [deps]
    if isinstance(deps, list):
        return [str(d) for d in deps]
    return [str(deps)]


def _prefix_graph(rows: list[tuple], max_nodes: int, executions: dict[str, int]) -> dict:
    """``rows``: one per key; ``executions``: {prefix: executions} (empty in a run without them)."""
    prefix_of: dict[str, str] = {}
    counts: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    for key, prefix, status, _w, _d in rows:
        p = prefix or key
        prefix_of[key] = p
        counts[p] += 1
        if status == "ERROR":
            errors[p] += 1
    if executions:  # the tasks run: a key run twice (a worker lost) is two, a key never run (scattered) none
        counts = collections.Counter({p: executions.get(p, 0) for p in counts})
        counts.update({p: n for p, n in executions.items() if p not in counts})
    names = [p for p, _ in counts.most_common(max_nodes)]
    index = {p: i for i, p in enumerate(names)}
    edges: collections.Counter = collections.Counter()
    for key, _p, _s, _w, deps in rows:
        b = index.get(prefix_of[key])
        for d in _dep_list(deps):
            a = index.get(prefix_of.get(d, ""))
            if a is not None and b is not None and a != b:
                edges[(a, b)] += 1
    nodes = [{"key": p, "prefix": p, "count": counts[p], "error": bool(errors[p]), "worker": ""} for p in names]
    return {"mode": "prefixes", "nodes": nodes, "edges": [[a, b, n] for (a, b), n in sorted(edges.items())],
            "note": (f"{sum(counts.values()):,} tasks: too many to draw one by one, so the graph shows one node per "
                     f"task prefix (with its count of tasks{' run' if executions else ''}) and the dependencies between "
                     f"prefixes.")}
