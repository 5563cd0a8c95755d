"""Pool task records -> SDK spans (in the run's exporter process).

A pool task's span (``futures.task {function}``, ``multiprocessing.task {function}`` and their chunk
forms) is recorded in the process that ran it (_taskspan.TaskSpan.end) as one tuple of atoms:
``(name, scope, trace_id, span_id, flags, tracestate, parent, start, end, attributes, events, links,
status)`` with
- parent: ``(trace_id, span_id, flags, is_remote)`` or None;
- events: ``((name, attributes, time), ...)`` or None; links: ``((trace_id, span_id, flags,
  attributes), ...)`` or None; status: ``(StatusCode value, description)`` or None (unset).
Here it becomes a ``ReadableSpan`` with the process's resource (from its hello).
"""
from __future__ import annotations

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from evlog import __version__

KIND = "pool.task"  # the records' kind
_UNSET = Status(StatusCode.UNSET)


class PoolSpans:
    """One process's task records -> spans (a builder of the exporter process: feed() -> spans)."""

    def __init__(self, resource):
        self.resource = resource  # callable -> the process's current Resource
        self._scopes: dict = {}
        self._states: dict = {}

    def feed(self, batch, now: float, final: bool = False) -> list:
        res = self.resource()
        return [self._span(rec, res) for rec in batch]

    def _scope(self, name: str) -> InstrumentationScope:
        scope = self._scopes.get(name)
        if scope is None:
            scope = self._scopes[name] = InstrumentationScope(name, __version__)
        return scope

    def _state(self, header: str):
        if not header:
            return None
        state = self._states.get(header)
        if state is None:
            if len(self._states) > 1024:
                self._states.clear()
            state = self._states[header] = TraceState.from_header([header])
        return state

    def _span(self, rec, resource) -> ReadableSpan:
        name, scope, trace_id, span_id, flags, state, parent, start, end, attrs, events, links, status = rec
        if parent is not None:
            parent = SpanContext(parent[0], parent[1], parent[3], TraceFlags(parent[2]))
        return ReadableSpan(
            name,
            context=SpanContext(trace_id, span_id, False, TraceFlags(flags), self._state(state)),
            parent=parent,
            resource=resource,
            attributes=attrs,
            events=[Event(n, a, t) for n, a, t in events] if events else (),
            links=[Link(SpanContext(t, s, True, TraceFlags(f)), a) for t, s, f, a in links] if links else (),
            kind=SpanKind.CONSUMER,
            status=Status(StatusCode(status[0]), status[1]) if status is not None else _UNSET,
            start_time=start,
            end_time=end,
            instrumentation_scope=self._scope(scope),
        )
