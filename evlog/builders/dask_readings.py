"""A scheduler's readings of Dask's own vocabulary -> ``dask.span {tag}`` spans and ``dask.worker.*`` metrics
(in the exporter process).

The scheduler (evlog/observed/dask/readings.py) records the Dask spans the program named with
``distributed.span``, the client calls that put tasks in them, their times, and the changes of Dask's fine
performance metrics (records: evlog/wire/dask.py, kind ``dask.readings``). Here:

- **Spans.** Each Dask span is one ``dask.span {last tag}`` span, from ``Span.start`` (its first task's
  start) to ``Span.stop`` (its last task's end), attributes ``dask.span.id`` and ``dask.span.name``. A
  tree of Dask spans (a root span and the spans opened inside it) is a trace of its own, each span the
  child of its enclosing span's, linked to the ``dask.compute`` spans of the client calls that put
  tasks in it (up to wire.MAX_CALLS): one Dask span can hold many client calls, each in its own trace
  (or in the program's), and a big call's tasks are split into batch traces, so the tree cannot be
  inside any one of them. The client calls and their tasks stay where they are; every ``dask.task``
  span names its innermost Dask span by ``dask.span.id`` (dask_lives).
  Dask cannot say when the program leaves a ``with span(...)`` block, only when the span's tasks are
  done (and more may come): a span goes out once it is done and either a span that is not inside it
  came later (the program went on to other work) or it stayed done for QUIET seconds, or when the
  scheduler closes. A span Dask reopens after that (a lost worker's results recomputed) does not change.
- **Metrics.** Each entry of ``Scheduler.cumulative_worker_metrics`` (and of each Dask span's
  ``Span.cumulative_worker_metrics``, with ``dask.span.id`` and ``dask.span.name``) is a cumulative
  monotonic sum: Dask's ``(context, prefix, activity, unit)`` keys by unit as ``dask.worker.time``
  (seconds), ``dask.worker.bytes``, ``dask.worker.count``, other units (a program's own
  ``context_meter`` figures) as ``dask.worker.value`` with ``dask.unit``; attributes ``dask.context``,
  ``dask.task.prefix`` (the ``execute`` context's) and ``dask.activity`` (the rest of the key, joined with
  "/"). Dask's scalar keys (``latency``, ``tick-duration``, ``transfer-bandwidth``, ...) are running
  totals too, summed over heartbeats: ``dask.worker.digest`` with ``dask.digest``. A point goes out when
  its value changed, stamped with the time the scheduler read it, its start the scheduler's start; a
  span's figures include its sub-spans' (as Dask's), so they are not summed over ``dask.span.id``.

Spans are SpanData (evlog/builders/span_data.py); the metrics are the SDK's MetricsData, handed to the
exporter process's metrics pipeline (``metrics.add``).
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, SpanKind

from evlog import propagation
from evlog.builders.dask_spans import SAMPLED, SCOPE, UNSET
from evlog.builders.span_data import SpanData, SpanLink
from evlog.wire import dask as wire

KIND = wire.READINGS
QUIET = 60.0  # seconds a finished Dask span waits for more tasks when nothing else tells it is over
UNITS = {"seconds": (wire.METRIC_TIME, "s"), "bytes": (wire.METRIC_BYTES, "By"), "count": (wire.METRIC_COUNT, "1")}
DESCRIPTIONS = {
    wire.METRIC_TIME: "Dask's fine performance metrics: seconds spent, by context, task prefix and activity",
    wire.METRIC_BYTES: "Dask's fine performance metrics: bytes, by context, task prefix and activity",
    wire.METRIC_COUNT: "Dask's fine performance metrics: counts, by context, task prefix and activity",
    wire.METRIC_VALUE: "Dask's fine performance metrics in other units (dask.unit)",
    wire.METRIC_DIGEST: "Dask's scalar worker metrics (latency, tick-duration, ...), summed over heartbeats",
}
_getrandbits = random.getrandbits


def point_of(key) -> tuple[str, str, dict]:
    """(metric name, unit, attributes) of one key of Dask's cumulative_worker_metrics."""
    if type(key) is not tuple or len(key) < 3:
        name = "/".join(str(p) for p in key) if type(key) is tuple else str(key)
        return wire.METRIC_DIGEST, "", {wire.ATTR_DIGEST: name}
    context, unit = str(key[0]), str(key[-1])
    middle = [str(p) for p in key[1:-1]]
    attrs = {wire.ATTR_CONTEXT: context}
    if context == "execute" and len(middle) >= 2:
        attrs[wire.ATTR_PREFIX] = middle.pop(0)
    attrs[wire.ATTR_ACTIVITY] = "/".join(middle)
    metric, u = UNITS.get(unit, (wire.METRIC_VALUE, ""))
    if metric == wire.METRIC_VALUE:
        attrs[wire.ATTR_UNIT] = unit
    return metric, u, attrs


class _Span:
    __slots__ = ("id", "name", "parent", "context", "seen", "start", "stop", "done", "done_since", "links", "out")

    def __init__(self, sid, name, parent, context, seen):
        self.id, self.name, self.parent, self.context, self.seen = sid, name, parent, context, seen
        self.start = self.stop = None
        self.done = False
        self.done_since = None  # the exporter's clock when it was last seen done
        self.links: list = []
        self.out = False


class Readings:
    """One scheduler's readings: ``feed`` returns the finished ``dask.span`` spans and hands the metric
    points to ``metrics`` (the metrics pipeline; None: no metrics)."""

    def __init__(self, meta, resource, metrics=None):
        self.resource = resource
        self.metrics = metrics
        self.start_ns = int(float((meta or {}).get("start") or 0) * 1e9)
        self._spans: dict = {}  # Dask span id -> _Span, in the order seen
        self._last = None  # the Dask span seen last
        self._points: dict = {}  # (metric, attributes' items) -> [unit, attributes, value, time ns]
        self._parents = propagation.Contexts()
        self._closed = None  # when the scheduler closed
        self._latest = 0.0  # the latest reading's time: the end of a span still running at the final flush

    def feed(self, batch, now: float, final: bool = False) -> list:
        changed: list = []
        for rec in batch:
            tag, t = rec[0], rec[1]  # every readings record starts (tag, time read): wire.dask.SpanSeen, ...
            if t > self._latest:
                self._latest = t
            if tag == wire.FIGURES:
                self._figures(rec, changed)
            elif tag == wire.TIMES:
                _, t, sid, start, stop, done = rec  # wire.dask.SpanTimes
                s = self._spans.get(sid)
                if s is not None:
                    s.start, s.stop = start or None, stop
                    if done and not s.done:
                        s.done_since = now
                    s.done = bool(done)
            elif tag == wire.SEEN:
                self._seen(rec)
            elif tag == wire.CALL:
                _, _t, sid, carrier = rec  # wire.dask.SpanCall
                s = self._spans.get(sid)
                parent = self._parents.get(carrier)[1] if carrier else None
                if s is not None and parent is not None and len(s.links) < wire.MAX_CALLS:
                    s.links.append(SpanLink(SpanContext(parent.trace_id, parent.span_id, False, parent.trace_flags)))
            elif tag == wire.CLOSED:
                self._closed = t
        if changed and self.metrics is not None:
            self._export(changed)
        out: list = []
        closing = final or self._closed is not None
        for s in self._spans.values():
            if not s.out and (closing or self._over(s, now)):
                span = self._span(s)
                s.out = True
                if span is not None:
                    out.append(span)
        return out

    def _seen(self, rec) -> None:
        _, t, sid, name, pid = rec  # wire.dask.SpanSeen
        if sid in self._spans:
            return
        parent = self._spans.get(pid) if pid is not None else None
        if parent is not None:
            ctx = SpanContext(parent.context.trace_id, _getrandbits(64) or 1, False, SAMPLED)
        else:
            ctx = SpanContext(_getrandbits(128) or 1, _getrandbits(64) or 1, False, SAMPLED)
        s = self._spans[sid] = _Span(sid, tuple(name), parent, ctx, t)
        self._last = s

    def _over(self, s: _Span, now: float) -> bool:
        """A done span is over once a span that is not inside it came later, or after QUIET seconds."""
        if not s.done or s.done_since is None:
            return False
        last = self._last
        while last is not None and last is not s:
            last = last.parent
        return last is None or now - s.done_since >= QUIET

    def _span(self, s: _Span):
        start = s.start or s.seen
        end = s.stop if s.done and s.stop else (self._closed or self._latest)
        parent = s.parent.context if s.parent is not None else None
        return SpanData(
            f"{wire.SPAN_NAME} {s.name[-1]}", context=s.context, parent=parent, resource=self.resource(),
            attributes={wire.ATTR_SPAN_ID: s.id, wire.ATTR_SPAN_NAME: s.name}, links=tuple(s.links),
            kind=SpanKind.INTERNAL, status=UNSET, start_time=int(start * 1e9), end_time=int(max(end, start) * 1e9),
            instrumentation_scope=SCOPE)

    # ---- metrics -------------------------------------------------------------------------------

    def _figures(self, rec, changed: list) -> None:
        _, t, sid, items = rec  # wire.dask.Figures
        extra = {}
        if sid is not None:
            s = self._spans.get(sid)
            if s is None:
                return
            extra = {wire.ATTR_SPAN_ID: sid, wire.ATTR_SPAN_NAME: s.name}
        t_ns = int(t * 1e9)
        points = self._points
        for key, value in items:
            metric, unit, attrs = point_of(key)
            if extra:
                attrs.update(extra)
            pk = (metric, tuple(sorted((k, v) for k, v in attrs.items() if k != wire.ATTR_SPAN_NAME)))
            p = points.get(pk)
            if p is None:
                p = points[pk] = [metric, unit, attrs, value, t_ns]
            else:
                p[3], p[4] = value, t_ns
            changed.append(pk)

    def _export(self, changed: list) -> None:
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Metric,
            MetricsData,
            NumberDataPoint,
            ResourceMetrics,
            ScopeMetrics,
            Sum,
        )

        by_metric: dict = {}
        for pk in dict.fromkeys(changed):
            metric, unit, attrs, value, t_ns = self._points[pk]
            if metric in (wire.METRIC_TIME, wire.METRIC_VALUE, wire.METRIC_DIGEST):
                value = float(value)
            elif type(value) is float and value.is_integer():
                value = int(value)
            by_metric.setdefault((metric, unit), []).append(
                NumberDataPoint(attrs, min(self.start_ns, t_ns) or t_ns, t_ns, value))
        metrics = [Metric(name, DESCRIPTIONS[name], unit or None,
                          Sum(pts, AggregationTemporality.CUMULATIVE, True)) for (name, unit), pts in by_metric.items()]
        n = sum(len(pts) for pts in by_metric.values())
        self.metrics.add([(MetricsData([ResourceMetrics(self.resource(), [ScopeMetrics(SCOPE, metrics, "")], "")]), n)])
