"""Trace shaping: a big computation's tasks go into bounded traces, linked to its client call's trace.

A computation (the tasks one graph brings to the scheduler with one carrier) of up to LIMIT tasks
(EVLOG_DASK_TRACE_TASKS, default 2,000: about 3 MB of protobuf for trivial tasks) stays one trace, as
it always was. Past that, Jaeger's UI and Tempo's per-trace limit (5 MB by default) would choke on it,
so it is split by task group:

- the client call's trace gets one ``dask.group {prefix}`` span per task group of the computation,
  child of its ``dask.compute`` span, with exact counts and compute-time statistics of the group's
  tasks, a link to each batch (below) and a link to each erred task (both up to MAX_LINKS);
- the group's tasks are cut into batches of at most LIMIT tasks, in Dask's priority order; each batch
  is a trace of its own whose root is a ``dask.batch {prefix}`` span linked to the group span (the
  pattern of OpenTelemetry's messaging conventions for batches). The batch's tasks' ``dask.task``,
  ``dask.execute`` and ``dask.transfer`` spans are its children, so nothing is sampled away.

The split is decided on the scheduler, where the carrier of each task is made (``split`` in
evlog/observed/dask/shape.py): a task's carrier names its batch span instead of the client call's span, and the
worker puts the execution in the batch's trace from it as before. The scheduler also records one
shape record per batch; the exporter process (dask_lives.Lives) hands them to ``Shapes``, which
builds the batch and group spans once all their tasks' spans are out (or at the final flush), as
SpanData (evlog/builders/span_data.py).

The shape record: evlog/wire/dask.py.
"""
from __future__ import annotations

import random
from array import array

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from evlog import propagation
from evlog.builders.dask_spans import SCOPE, UNSET
from evlog.builders.span_data import SpanData, SpanLink

MAX_LINKS = 128  # links per group span to its batches, and to its erred tasks (the SDK's default limit)
_getrandbits = random.getrandbits


# ---- in the exporter process ----------------------------------------------------------------------

class _Group:
    __slots__ = ("parent", "span_id", "prefix", "group", "tasks", "batches", "open", "start", "end", "states",
                 "compute", "erred", "links")

    def __init__(self, parent, span_id, prefix, group, tasks, batches):
        self.parent, self.span_id, self.prefix, self.group = parent, span_id, prefix, group
        self.tasks, self.batches, self.open = tasks, batches, 0
        self.start = self.end = None
        self.states: dict = {}  # final state -> tasks
        self.compute = array("d")  # seconds of compute of each task that ran (8 bytes each: a group may be a million tasks)
        self.erred: list = []  # SpanLinks to erred tasks' spans (up to MAX_LINKS)
        self.links: list = []  # SpanLinks to the batch spans (up to MAX_LINKS)


class _Batch:
    __slots__ = ("group", "context", "index", "size", "keys", "start", "end")

    def __init__(self, group, context, index, size):
        self.group, self.context, self.index, self.size = group, context, index, size
        self.keys: set = set()
        self.start = self.end = None


class Shapes:
    """One scheduler's batches and groups, waiting for their tasks' spans (in the exporter process)."""

    def __init__(self):
        self.batches: dict = {}  # batch carrier's key (propagation.key) -> _Batch
        self._groups: dict = {}  # group span id -> _Group

    def add(self, shape) -> None:
        bc, carrier, group_span, prefix, group, index, nb, tasks, size = shape
        parent, context = propagation.read(carrier)[1], propagation.read(bc)[1]
        if parent is None or context is None:
            return
        g = self._groups.get(group_span)
        if g is None:
            g = self._groups[group_span] = _Group(parent, group_span, prefix, group, tasks, nb)
        g.open += 1
        self.batches[propagation.key(bc)] = _Batch(
            g, SpanContext(context.trace_id, context.span_id, False, context.trace_flags), index, size)

    def ended(self, bc, key, span, state, compute, out: list, resource) -> None:
        """A task span of batch carrier ``bc`` went out; ``out`` gets the batch's and the group's spans
        once all their tasks' spans are out."""
        bk = propagation.key(bc) if type(bc) is dict else None
        b = self.batches.get(bk)
        if b is None:
            return
        t0, t1 = span.start_time, span.end_time
        b.start = t0 if b.start is None or t0 < b.start else b.start
        b.end = t1 if b.end is None or t1 > b.end else b.end
        if key in b.keys:  # a later life of the same task (it ran again): counted once
            return
        b.keys.add(key)
        g = b.group
        state = state or "unfinished"
        g.states[state] = g.states.get(state, 0) + 1
        if compute is not None:
            g.compute.append(compute)
        if state == "erred" and len(g.erred) < MAX_LINKS:
            g.erred.append(SpanLink(span.context, {"dask.task.key": span.attributes.get("dask.task.key", str(key)),
                                               "exception.message": span.status.description or "erred"}))
        if len(b.keys) >= b.size:
            self._close(bk, b, out, resource)

    def flush(self, out: list, resource) -> None:
        """The final flush: every batch and group out, with what they have."""
        for bk, b in list(self.batches.items()):
            self._close(bk, b, out, resource)

    def _close(self, bk, b: _Batch, out: list, resource) -> None:
        del self.batches[bk]
        g = b.group
        group_ctx = SpanContext(g.parent.trace_id, g.span_id, False, g.parent.trace_flags)
        if b.start is not None:
            out.append(SpanData(
                f"dask.batch {g.prefix}", context=b.context, parent=None, resource=resource,
                attributes={"dask.task.prefix": g.prefix, "dask.task.group": g.group, "dask.batch.index": b.index,
                            "dask.batch.tasks": len(b.keys), "dask.group.batches": g.batches},
                links=(SpanLink(group_ctx),), kind=SpanKind.INTERNAL, status=UNSET,
                start_time=b.start, end_time=b.end, instrumentation_scope=SCOPE))
            g.start = b.start if g.start is None or b.start < g.start else g.start
            g.end = b.end if g.end is None or b.end > g.end else g.end
            if len(g.links) < MAX_LINKS:
                g.links.append(SpanLink(b.context, {"dask.batch.index": b.index}))
        g.open -= 1
        if g.open <= 0:
            self._groups.pop(g.span_id, None)
            if g.start is not None:
                out.append(_group_span(g, group_ctx, resource))


def _group_span(g: _Group, context, resource) -> SpanData:
    attrs = {"dask.task.prefix": g.prefix, "dask.task.group": g.group, "dask.group.tasks": g.tasks,
             "dask.group.batches": g.batches}
    for state, n in g.states.items():
        attrs[f"dask.group.{state}"] = n
    xs = sorted(g.compute)
    if xs:
        n = len(xs)
        attrs.update({"dask.group.compute.count": n, "dask.group.compute.sum": sum(xs),
                      "dask.group.compute.min": xs[0], "dask.group.compute.max": xs[-1],
                      "dask.group.compute.mean": sum(xs) / n, "dask.group.compute.p50": _rank(xs, 50),
                      "dask.group.compute.p95": _rank(xs, 95)})
    erred = g.states.get("erred", 0)
    status = Status(StatusCode.ERROR, f"{erred} of {g.tasks} tasks erred") if erred else UNSET
    return SpanData(
        f"dask.group {g.prefix}", context=context, parent=g.parent, resource=resource, attributes=attrs,
        links=tuple(g.links) + tuple(g.erred), kind=SpanKind.INTERNAL, status=status,
        start_time=g.start, end_time=g.end, instrumentation_scope=SCOPE)


def _rank(xs: list, q: int):
    """The q-th percentile of sorted ``xs`` by the nearest-rank method (a value that occurred)."""
    return xs[max(0, -(-q * len(xs) // 100) - 1)]
