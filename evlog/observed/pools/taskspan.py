"""A pool task's span: an OpenTelemetry API span that becomes a record, built into an SDK span elsewhere.

A pool task of a trivial function costs a few microseconds of Python, so its span must cost less than
``Tracer.start_span`` and the batch processor's queue, encoder and export in the task's own process.
``start()`` decides the span's ids and sampling as the SDK would (the run's sampler, random ids) and
returns a ``TaskSpan``: an implementation of the API's ``Span`` (own_spans.RecordedSpan), current
while the task runs, so the user's spans nest under it and what the user writes on it (attributes,
events, status, an exception) is kept. ``end()`` appends one tuple of atoms to this process's records
(evlog.observed.records, kind pool.task); the run's exporter process turns it into an SDK ``ReadableSpan`` (pool_spans) and
exports it with the run's exporters. This process's consumers (evlog.processors) see the span start and
end in the thread that runs the task, as span processors see an SDK span.

Used only when the tracer provider is evlog's (``usable``); under any other provider a task gets an
ordinary ``tracer.start_span`` span.
"""
from __future__ import annotations

import os
import sys
import threading
from time import time_ns as _time_ns

from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanKind

from evlog.observed import records
from evlog.observed.own_spans import RecordedSpan
from evlog.observed.own_spans import consumers as _consumers
from evlog.observed.own_spans import decide as _decide
from evlog.observed.profiler import ends_tasks as _profile_ends_tasks
from evlog.observed.profiler import enter as _profile_enter
from evlog.observed.profiler import leave_span as _profile_leave
from evlog.wire import kinds
from evlog.wire.profile_records import Task as _Task  # the task profiler

_POOL = _Task.POOL.value
_getframe = sys._getframe
_BEGIN = ("begin", "_begin")  # _context's function that starts a task span for its caller

_log: list = [None]  # this process's records source (a deque), made at the first task span
_lock = threading.Lock()


def usable(provider) -> bool:
    """Is ``provider`` evlog's tracer provider (so task spans may take the records path)?"""
    from evlog.observed import sdk

    return isinstance(provider, sdk.LazyTracerProvider)


def _source():
    with _lock:
        if _log[0] is None:
            _log[0] = records.source(kinds.POOL_TASK)
        return _log[0]


class TaskSpan(RecordedSpan):
    """A recording span of a pool task, kept as plain fields; ``end()`` records it."""

    __slots__ = ()

    @property
    def kind(self):
        return SpanKind.CONSUMER

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else _time_ns()
        top = _profile_leave(self.context.span_id)  # the task's hottest functions, or None
        if top is not None:
            self._own()["evlog.profile.top"] = top
        for p in _consumers():
            p.on_end(self)
        sc, parent = self.context, self.parent
        (_log[0] or _source()).append((
            self.name, self.scope, sc.trace_id, sc.span_id, int(sc.trace_flags),
            sc.trace_state.to_header() if sc.trace_state else "",
            (parent.trace_id, parent.span_id, int(parent.trace_flags), parent.is_remote) if parent is not None else None,
            self.start_time, self.end_time, self.attributes,
            tuple(self.events) if self.events else None, tuple(self.links) if self.links else None, self.status))


_profile_ends_tasks(TaskSpan.end.__code__)  # a sample taken in end() is not the task's


def start(scope: str, name: str, attributes: dict, parent) -> trace.Span:
    """A started task span ``name`` under the Context ``parent`` (TaskSpan, or a non-recording span
    when the run's sampler says so)."""
    decided = _decide(name, SpanKind.CONSUMER, attributes, parent)
    if type(decided) is NonRecordingSpan:
        return decided
    sc, psc, attributes = decided
    span = TaskSpan(name, sc, psc, scope, attributes, _time_ns())
    # the task profiler samples this thread until end(); its stacks are cut at the frame that calls the
    # task (_context's Task.__call__ or a runner, which call this directly or through _context.begin)
    stop = _getframe(1)
    _profile_enter(_POOL, attributes.get("code.function.name") or name, sc.trace_id, sc.span_id,
                   stop.f_back if stop.f_code.co_name in _BEGIN else stop)
    for p in _consumers():
        p.on_start(span, parent_context=parent)
    return span


def _after_fork_in_child() -> None:
    global _lock
    _log[0] = None  # a forked child ships its own records (evlog.observed.records starts afresh there)
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
