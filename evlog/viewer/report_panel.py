"""The dashboard's report panel: `evlog report` on the dashboard's own store, plus what the page needs
to mark the report's findings in the Gantt (store row ids of the critical path's spans).

The analysis is evlog.report's (``store_rows`` + ``analyse``), on what is consistent: a run folder still
being read is not analysed until it is read (the panel says how far it has come), and a Dask
computation is analysed only once it is whole (``whole_computations``): its client call's span, every
task's scheduler span and execution, every dependency. A computation still running, or cut off by the
end of what is stored, is left out and the panel marked ``partial``, saying how many and why; so the
panel never shows a computation with half its tasks, or a start it does not have. On a whole run the
figures are those of `evlog report --format json` on the same data.
"""
from __future__ import annotations

from typing import Any

from evlog.data.jsonsafe import finite
from evlog.data.store import store_points, store_rows
from evlog.report import activity
from evlog.report.analysis import analyse
from evlog.report.model import build

_CHUNK = 500  # keys per SQL IN (...)


def span_ids_of(store: Any, keys: list[str]) -> dict[str, list[int]]:
    """{task key: [store row id, ...]} of every span of these task keys (what Gantt bars carry)."""
    out: dict[str, list[int]] = {}
    keys = sorted(set(keys))
    conn = store.reader()
    for i in range(0, len(keys), _CHUNK):
        part = keys[i:i + _CHUNK]
        marks = ",".join("?" * len(part))
        for rid, key in conn.execute(f"SELECT id, task_key FROM spans WHERE task_key IN ({marks})", part):
            out.setdefault(key, []).append(rid)
    return out


def spans_of_ids(store: Any, ids: list[int]) -> list[list]:
    """[[row id, start s, end s, lane worker, thread], ...]: where these spans sit in the Gantt (its
    lanes: worker, else the process's label; thread), for marking them when it draws time bins."""
    labels = {p["id"]: p["label"] for p in store.processes()}
    out = []
    conn = store.reader()
    for i in range(0, len(ids), _CHUNK):
        part = ids[i:i + _CHUNK]
        marks = ",".join("?" * len(part))
        for rid, start, end, worker, thread, proc in conn.execute(
                f"SELECT id, start, end, worker, thread, process FROM spans WHERE id IN ({marks})", part):
            out.append([rid, start / 1e9, end / 1e9, worker or labels.get(proc, "?"), thread or ""])
    return out


def _link_pool_calls(store: Any, pools: dict | None) -> None:
    """Give each pool straggler and failure the store row id of its span (``row_id``): the panel
    opens its story as a Gantt click does."""
    if not pools:
        return
    rows = [x for part in ("stragglers", "failures") for x in pools.get(part) or () if x.get("span_id")]
    ids = sorted({x["span_id"] for x in rows})
    found: dict[str, int] = {}
    conn = store.reader()
    for i in range(0, len(ids), _CHUNK):
        part = ids[i:i + _CHUNK]
        marks = ",".join("?" * len(part))
        for rid, sid in conn.execute(f"SELECT id, span_id FROM spans WHERE span_id IN ({marks})", part):
            found.setdefault(sid, rid)
    for x in rows:
        if x["span_id"] in found:
            x["row_id"] = found[x["span_id"]]


def whole_computations(spans: list[dict]) -> tuple[list[dict], dict[str, int]]:
    """The span rows without those of the Dask computations that are not whole yet, and why each left-out
    one is not ({reason: computations}).

    A computation is whole when its client call's ``dask.compute`` span is there (when its tasks' spans
    name a parent not stored: a client's call span arrives when its process exports, often after its
    tasks' spans; tasks recorded without any call are a computation per trace); every task of it has
    its scheduler span (when the run has any) and, if it was sent to a worker and ended in memory, its
    execution (when the run has any); every dependency of its tasks is a task stored; and it has as many
    results as the call asked for (``dask.task.count``: the keys of a map or submit, the outputs of a
    graph). Spans are stored as they end, so a computation still running, or one whose spans are not all
    read yet, misses some of these."""
    comps = build(spans)
    if not comps:
        return spans, {}
    has_sched = any(t.span is not None for c in comps for t in c.tasks.values())
    has_exec = any(t.executions for c in comps for t in c.tasks.values())
    known = {k for c in comps for k in c.tasks}
    stored = {r["span_id"] for r in spans}
    left: dict[str, int] = {}
    drop: set[int] = set()
    dropped_keys: set[str] = set()
    kept: set[int] = set()  # the lives that stand for a key in a whole computation
    for c in comps:
        why = _not_whole(c, known, stored, has_sched, has_exec)
        if why is None:
            kept.update(id(t.span) for t in c.tasks.values() if t.span is not None)
            continue
        left[why] = left.get(why, 0) + 1
        rows = [c.span] + c.transfers
        for t in c.tasks.values():
            rows.append(t.span)
            rows.extend(e.row for e in t.executions)
            dropped_keys.add(t.key)
        drop.update(id(r) for r in rows if r is not None)
    if not drop:
        return spans, {}
    for r in spans:  # its keys' other lives (results let go later, attempts before) would stand for them
        if r["name"].startswith("dask.task") and id(r) not in drop and id(r) not in kept:
            if str(r["attributes"].get("dask.task.key") or "") in dropped_keys:
                drop.add(id(r))
    return [r for r in spans if id(r) not in drop], left


def _not_whole(c: Any, known: set, stored: set, has_sched: bool, has_exec: bool) -> str | None:
    """Why the computation is not whole yet (a short phrase), or None when it is. ``known``: the task keys
    stored; ``stored``: the span ids."""
    if c.span is None and any(r["parent_span_id"] and r["parent_span_id"] not in stored for t in c.tasks.values()
                              for r in ([t.span] if t.span is not None else []) + [e.row for e in t.executions]):
        return "its client call's span is not stored yet"  # its tasks' parent: the call, or its batch
    needed: set[str] = set()
    for t in c.tasks.values():
        if has_sched and t.span is None:
            return "executions whose scheduler spans are not stored yet"
        if has_exec and t.state == "memory" and not t.executions and any(x[2] == "processing" for x in t.transitions):
            return "tasks whose executions are not stored yet"
        needed.update(t.deps)
    if needed - known:
        return "dependencies not stored yet"
    count = c.span["attributes"].get("dask.task.count") if c.span is not None else None
    if isinstance(count, int) and not isinstance(count, bool):
        results = len(c.tasks) if c.method in ("map", "submit", "graph") else len(set(c.tasks) - needed)
        if results < count:
            return "fewer results than the call asked for"
    return None


def dashboard_report(store: Any, source: str = "", loading: dict | None = None) -> dict:
    """The report's dict, with ``marks``: the critical paths' keys, their spans' row ids, and where
    those spans sit in the Gantt (``spans_of_ids``), for the Gantt and the DAG. ``empty`` when nothing is
    stored yet, or while a run folder is still being read (``loading``: how far, from `evlog view`);
    ``partial`` with ``left_out`` ({why: computations}) when computations not whole yet were left out;
    ``error`` when the analysis failed on the data."""
    empty = {"empty": True, "partial": False, "left_out": {}, "computations": [], "advice": [],
             "marks": {"critical_keys": [], "critical_ids": []}}
    if loading and loading.get("state") == "loading":
        return {**empty, "partial": True, "loading": loading}
    spans, logs = store_rows(store)
    if not spans and not logs:
        return empty
    try:
        spans, left = whole_computations(spans)
        rep = analyse(spans, logs, source)
        activity.attach(rep, spans, store_points(store, activity.METRICS))  # Dask's fine performance metrics
    except Exception as e:  # data the analysis did not expect: say so on the panel, keep serving
        return {**empty, "error": f"the report could not be made from this data: {e!r}"}
    for c in rep["computations"]:  # no start: no wall time either (never the time since 1970)
        if not c.get("start"):
            c["start"] = c["wall_s"] = None
    if not rep.get("start"):
        rep["start"] = rep["wall_s"] = None
    keys = [r["key"] for c in rep["computations"] for r in c["critical_path"]]
    ids = span_ids_of(store, keys)
    critical = sorted(i for k in set(keys) for i in ids.get(k, []))
    rep["marks"] = {"critical_keys": sorted(set(keys)), "critical_ids": critical,
                    "critical_spans": spans_of_ids(store, critical)}
    _link_pool_calls(store, rep.get("pools"))
    rep["empty"] = False
    rep["partial"] = bool(left)
    rep["left_out"] = left
    return finite(rep)
