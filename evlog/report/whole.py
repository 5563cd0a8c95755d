"""What of a run is whole enough to analyse: a run folder being written (a live run, or one cut short
by a kill) holds computations whose spans are not all there yet. `evlog report` and the dashboard's
report panel analyse only whole computations and say how many they left out and why.
"""
from __future__ import annotations

from typing import Any

from evlog.report.model import Computation, build

# A computation whose last task ended this close to the end of the recorded spans may still be
# running: one with fewer results than its call asked for is left out only then. Earlier ones are
# done: a shortfall there is outputs an earlier call computed and still holds (not run again).
TAIL_NS = 5_000_000_000


def whole_computations(spans: list[dict]) -> tuple[list[dict], dict[str, int], list[Computation]]:
    """The span rows without those of the Dask computations that are not whole yet, why each left-out
    one is not ({reason: computations}), and the whole computations (evlog.report.model).

    A computation is whole when its client call's ``dask.compute`` span is there (when its tasks' spans
    name a parent not stored: a client's call span arrives when its process exports, often after its
    tasks' spans; tasks recorded without any call are a computation per trace); every task of it has
    its scheduler span (when the run has any) and, if it was sent to a worker and ended in memory, its
    execution (when the run has any); and, near the end of what was recorded (TAIL_NS), it has as many
    results as the call asked for (``dask.task.count``: the keys of a map or submit, the outputs of a
    graph, the first of which, ``dask.task.key``, must be there). Spans are stored as they end, so a
    computation still running, or one whose spans are not all read yet, misses some of these. (A task's
    dependencies ran before it, and the exporter sends their scheduler spans before its own,
    evlog/builders/dask_lives.py; a dependency with no span at all is data the program scattered.)"""
    comps = build(spans)
    if not comps:
        return spans, {}, comps
    has_sched = any(t.span is not None for c in comps for t in c.tasks.values())
    has_exec = any(t.executions for c in comps for t in c.tasks.values())
    stored = _Ids(spans)
    left: dict[str, int] = {}
    drop: set[int] = set()
    dropped_keys: set[str] = set()
    kept: set[int] = set()  # the lives that stand for a key in a whole computation
    whole = []
    last = max(r["end"] for r in spans)
    for c in comps:
        recent = c.end is None or last - c.end <= TAIL_NS
        why = _not_whole(c, stored, has_sched, has_exec, recent)
        if why is None:
            whole.append(c)
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
        return spans, {}, comps
    for r in spans:  # its keys' other lives (results let go later, attempts before) would stand for them
        if r["name"].startswith("dask.task") and id(r) not in drop and id(r) not in kept:
            if str(r["attributes"].get("dask.task.key") or "") in dropped_keys:
                drop.add(id(r))
    return [r for r in spans if id(r) not in drop], left, whole


class _Ids:
    """The span ids of the rows, made the first time they are asked about (only for a computation without
    its client call's span)."""

    def __init__(self, rows: list):
        self.rows = rows
        self.ids: set | None = None

    def __contains__(self, sid: object) -> bool:
        if self.ids is None:
            self.ids = {r["span_id"] for r in self.rows}
        return sid in self.ids


def _not_whole(c: Any, stored: _Ids, has_sched: bool, has_exec: bool, recent: bool) -> str | None:
    """Why the computation is not whole yet (a short phrase), or None when it is. ``stored``: the span
    ids; ``recent``: the computation's last task ended near the end of what was recorded."""
    if c.span is None and any(r["parent_span_id"] and r["parent_span_id"] not in stored for t in c.tasks.values()
                              for r in ([t.span] if t.span is not None else []) + [e.row for e in t.executions]):
        return "its client call's span is not stored yet"  # its tasks' parent: the call, or its batch
    needed: set[str] = set()
    for t in c.tasks.values():
        if has_sched and t.span is None:
            return "executions whose scheduler spans are not stored yet"
        if has_exec and t.state == "memory" and not t.executions and t.ran:
            return "tasks whose executions are not stored yet"
        needed.update(t.deps)
    count = c.span["attributes"].get("dask.task.count") if c.span is not None else None
    if recent and isinstance(count, int) and not isinstance(count, bool):
        keys = c.method in ("map", "submit", "graph")  # results: its tasks; else its graph's outputs
        results = len(c.tasks) if keys else len(set(c.tasks) - needed)
        # An output not stored yet makes its dependencies look like outputs (nothing stored depends on them),
        # so the count alone passes a graph cut before its last task; the call names its first output key,
        # which must be there. (Its span goes out after its dependencies', and late: a result the client
        # holds waits out its grace, dask_lives.GRACE.)
        if results < count or (not keys and c.first_key and c.first_key not in c.tasks):
            return "fewer results than the call asked for"
    return None
