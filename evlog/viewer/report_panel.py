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

import contextlib
import gc
import threading
from typing import Any

from evlog.data import heap
from evlog.data.jsonsafe import finite
from evlog.data.store import store_points, store_rows
from evlog.report import activity, whatif_run
from evlog.report.analysis import analyse_with_model
from evlog.report.whole import whole_computations

_CHUNK = 500  # keys per SQL IN (...)
_lock = threading.Lock()
_making = 0  # reports being made now
_was_enabled = True  # the collector's state when the first of them began


@contextlib.contextmanager
def _no_collections():
    """The garbage collector off while a report is made (as `evlog report` does): a big run's rows are
    millions of containers, all kept to the end, and the full collections they would set off find
    nothing to free but take as long as the analysis. Back as it was when the last report in the making ends."""
    global _making, _was_enabled
    with _lock:
        if _making == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _making += 1
    try:
        yield
    finally:
        with _lock:
            _making -= 1
            if _making == 0 and _was_enabled:
                gc.enable()
        heap.give_back()  # the report's rows, freed: the server keeps its own size between reports


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


def _analysed(store: Any, spans: list, logs: list, source: str) -> tuple[dict, list, list]:
    """(report dict, its spans, its whole computations), as `evlog report` makes them."""
    spans, left, comps = whole_computations(spans)
    rep, comps = analyse_with_model(spans, logs, source, comps, left)
    activity.attach(rep, spans, store_points(store, activity.METRICS))  # Dask's fine performance metrics
    return rep, spans, comps


def dashboard_what_if(store: Any, source: str = "", loading: dict | None = None) -> dict:
    """What more or fewer workers would buy: `evlog report --what-if` for 1 .. 2x the recorded workers
    (the HTML report's curve), asked for by a button of the report panel, as the replay of a big run
    takes seconds. {"curve": {threads, workers, predicted_s, recorded: {workers, seconds}}, "lines":
    the model's inputs, one line each}, or {"none": why not}."""
    if loading and loading.get("state") == "loading":
        return {"none": "the run folder is still being read"}
    with _no_collections():
        spans, logs = store_rows(store)
        try:
            rep, spans, comps = _analysed(store, spans, logs, source)
            if not any(c.start is not None and c.tasks for c in comps):
                return {"none": "this run has no whole Dask computation to replay"}
            workers, _threads = whatif_run.recorded_shape(comps)
            whatif_run.attach(rep, comps, spans, [whatif_run.parse_shape(f"workers={workers}")], curve=True)
        except Exception as e:  # data the replay did not expect: say so on the panel, keep serving
            return {"none": f"the prediction could not be made from this data: {e!r}"}
        del spans, logs, comps
    return finite({"curve": rep["what_if_curve"], "lines": whatif_run.model_words(rep["what_if_model"]),
                   "partial": bool(rep.get("partial"))})


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
    with _no_collections():
        spans, logs = store_rows(store)
        if not spans and not logs:
            return empty
        try:
            rep, _spans, _comps = _analysed(store, spans, logs, source)
        except Exception as e:  # data the analysis did not expect: say so on the panel, keep serving
            return {**empty, "error": f"the report could not be made from this data: {e!r}"}
        del spans, logs, _spans, _comps
    keys = [r["key"] for c in rep["computations"] for r in c["critical_path"]]
    ids = span_ids_of(store, keys)
    critical = sorted(i for k in set(keys) for i in ids.get(k, []))
    rep["marks"] = {"critical_keys": sorted(set(keys)), "critical_ids": critical,
                    "critical_spans": spans_of_ids(store, critical)}
    _link_pool_calls(store, rep.get("pools"))
    rep["empty"] = False
    return finite(rep)
