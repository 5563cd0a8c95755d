"""A Dask worker's executions and transfers -> ``dask.execute {prefix}`` and ``dask.transfer`` spans.

The worker side (evlog/observed/dask/worker.py) records each execution and each fetch of dependencies as
a tuple of atoms and ships it (evlog.observed.records); the run's exporter process turns them into spans
here (SpanData, evlog/builders/span_data.py).

Records: evlog/wire/dask.py (kind ``dask.worker``).
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from evlog.builders import sdk_rebuild
from evlog.builders.dask_spans import SAMPLED, SCOPE, UNSET
from evlog.builders.span_data import SpanData, SpanEvent
from evlog.wire import dask as wire

KIND = wire.WORKER
_TOP = wire.Execution.TOP.value
EXECUTE, TRANSFER = wire.EXECUTE, wire.TRANSFER


_state = sdk_rebuild.Cache().state  # tracestate header -> TraceState, made once (one per client call)


def _parent(p) -> SpanContext | None:
    if p is None:
        return None
    return SpanContext(p[0], p[1], True, TraceFlags(p[2]), _state(p[3]) if len(p) > 3 else None)


class Executions:
    """One worker process's records -> spans (a builder of the exporter process: feed() -> spans)."""

    def __init__(self, resource):
        self.resource = resource  # callable -> the worker process's current Resource
        self._names: dict = {}

    def feed(self, batch, now: float, final: bool = False) -> list:
        res = self.resource()
        out = []
        for rec in batch:
            out.append(execute_span(rec, res, self._names) if rec[wire.Execution.TAG] == EXECUTE else transfer_span(rec, res))
        return out


def execute_span(rec, resource, names: dict | None = None) -> SpanData:
    # the fields of wire.dask.Execution, in order
    _, key, prefix, trace_id, span_id, parent, start, stop, thread, thread_name, err, startstops, address = rec[:_TOP]
    name = names.get(prefix) if names is not None else None
    if name is None:
        name = f"dask.execute {prefix}"
        if names is not None:
            if len(names) > 4096:
                names.clear()
            names[prefix] = name
    attrs = {
        "dask.task.key": key if type(key) is str else str(key),
        "dask.task.prefix": prefix,
        "dask.worker.address": address,
    }
    if thread is not None:
        attrs["thread.id"] = thread
        attrs["thread.name"] = thread_name
    if len(rec) > _TOP and rec[_TOP]:  # the task's hottest functions, from the worker's profiler
        attrs["evlog.profile.top"] = rec[_TOP]
    events = []
    lo, hi = start, stop
    for action, s0, s1, source in startstops:
        lo, hi = min(lo, s0), max(hi, s1)
        ev = {"dask.startstop.duration": float(s1 - s0)}
        if source:
            ev["dask.transfer.source"] = source
        events.append(SpanEvent(action, int(s0 * 1e9), ev))
    status = UNSET
    if err is not None:
        text, tb = err
        status = Status(StatusCode.ERROR, text)
        ev = {"exception.message": text}
        if tb:
            ev["exception.stacktrace"] = tb
        events.append(SpanEvent("exception", int(stop * 1e9), ev))
    events.sort(key=_timestamp)
    parent_sc = _parent(parent)
    return SpanData(
        name,
        context=SpanContext(trace_id, span_id, False, SAMPLED, parent_sc.trace_state if parent_sc is not None else None),
        parent=parent_sc,
        resource=resource,
        attributes=attrs,
        events=events,
        kind=SpanKind.CONSUMER,
        status=status,
        start_time=int(lo * 1e9),
        end_time=int(hi * 1e9),
        instrumentation_scope=SCOPE,
    )


def transfer_span(rec, resource) -> SpanData:
    _, source, keys, nbytes, parent, t0, t1, ok, outcome, address = rec
    parent_sc = _parent(parent)
    attrs = {
        "dask.transfer.source": str(source),
        "dask.transfer.bytes": int(nbytes),
        "dask.task.key": str(keys[0]) if keys else "",
        "dask.worker.address": address,
    }
    return SpanData(
        "dask.transfer",
        context=SpanContext(parent_sc.trace_id if parent_sc is not None else random.getrandbits(128) or 1,
                            random.getrandbits(64) or 1, False, SAMPLED),
        parent=parent_sc,
        resource=resource,
        attributes=attrs,
        kind=SpanKind.CLIENT,
        status=UNSET if ok else Status(StatusCode.ERROR, outcome),
        start_time=int(t0 * 1e9),
        end_time=int(t1 * 1e9),
        instrumentation_scope=SCOPE,
    )


def _timestamp(ev: SpanEvent) -> int:
    return ev.timestamp
