"""Pool task records -> spans (SpanData, in the run's exporter process).

A pool task's span (``futures.task {function}``, ``multiprocessing.task {function}`` and their chunk
forms) is recorded in the process that ran it (observed/pools/taskspan.py, ``TaskSpan.end``) as one
tuple of atoms (its fields: evlog.wire.otel.PoolTask).
Here it becomes a ``SpanData`` (evlog/builders/span_data.py) with the process's resource (from its hello).
"""
from __future__ import annotations

from opentelemetry.trace import SpanKind

from evlog.builders import sdk_rebuild
from evlog.version import __version__
from evlog.wire import kinds
from evlog.wire.otel import PoolTask

KIND = kinds.POOL_TASK
_CONSUMER = SpanKind.CONSUMER.value
_NAME, _SCOPE_NAME, _REST = PoolTask.NAME.value, PoolTask.SCOPE_NAME.value, PoolTask.TRACE_ID.value  # plain ints: a hot loop


class PoolSpans(sdk_rebuild.Spans):
    """One process's task records -> spans (a builder of the exporter process: feed() -> spans): the
    program's span records (sdk_rebuild.Spans) with the kind and scope version every pool task span has."""

    def feed(self, batch, now: float, final: bool = False) -> list:
        return super().feed([(rec[_NAME], _CONSUMER, (rec[_SCOPE_NAME], __version__, None, None)) + tuple(rec[_REST:]) + (None,)
                            for rec in batch],
                            now, final)
