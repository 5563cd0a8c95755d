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

from opentelemetry.trace import SpanKind

from evlog.version import __version__
from evlog.wire import kinds
from evlog.builders import sdk_rebuild

KIND = kinds.POOL_TASK
_CONSUMER = SpanKind.CONSUMER.value


class PoolSpans(sdk_rebuild.Spans):
    """One process's task records -> spans (a builder of the exporter process: feed() -> spans): the
    program's span records (sdk_rebuild.Spans) with the kind and scope version every pool task span has."""

    def feed(self, batch, now: float, final: bool = False) -> list:
        return super().feed([(rec[0], _CONSUMER, (rec[1], __version__, None, None)) + tuple(rec[2:]) for rec in batch],
                            now, final)
