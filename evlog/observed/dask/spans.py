"""Ids and trace context shared by the Dask scheduler, worker and client sides (in observed processes).

The spans themselves are built in the run's exporter process (evlog/builders/dask_lives.py for the
scheduler's task lives, dask_executions.py for the workers' executions and transfers); what is left here is what a process needs to
make a task's span context before its span exists: the task's execute span is current while the task
runs, and its ids travel in the records.
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, TraceFlags

from evlog import tracecontext
from evlog.version import __version__
from evlog.wire import dask as _wire

SCOPE_NAME, VERSION = _wire.SCOPE_NAME, __version__  # the tracers' and meters' scope
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
CARRIER = "evlog.traceparent"  # the task annotation that carries the trace context
_getrandbits = random.getrandbits


def new_span_id() -> int:
    return _getrandbits(64) or 1


def new_trace_id() -> int:
    return _getrandbits(128) or 1


def context(trace_id: int, span_id: int) -> SpanContext:
    """A sampled local SpanContext."""
    return SpanContext(trace_id, span_id, False, SAMPLED)


# ---- parents: the carrier -----------------------------------------------------------------------

_parsed: dict = {}


def parse_traceparent(tp) -> SpanContext | None:
    """The remote parent SpanContext of a W3C traceparent string, cached (one per client call)."""
    sc = _parsed.get(tp)
    if sc is None:
        sc = tracecontext.parse_traceparent(tp)
        if sc is None:
            return None
        if len(_parsed) > 4096:
            _parsed.clear()
        _parsed[tp] = sc
    return sc


format_traceparent = tracecontext.format_traceparent
trace_of_group = tracecontext.trace_of_group  # shared by the scheduler's spans (built elsewhere) and the workers'


def resource():
    """This process's Resource (the tracer provider's), for spans made here for the consumers."""
    from opentelemetry import trace

    return getattr(trace.get_tracer_provider(), "resource", None)
