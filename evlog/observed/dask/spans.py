"""Ids and trace context shared by the Dask scheduler, worker and client sides (in observed processes).

The spans themselves are built in the run's exporter process (dask_lives for the scheduler's task lives,
dask_executions for the workers' executions and transfers); what is left here is what a process needs to
make a task's span context before its span exists: the task's execute span is current while the task
runs, and its ids travel in the records.
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, TraceFlags

from evlog.builders import dask_lives

SCOPE = dask_lives.SCOPE
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = dask_lives.UNSET
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
        sc = dask_lives.parse_traceparent(tp)
        if sc is None:
            return None
        if len(_parsed) > 4096:
            _parsed.clear()
        _parsed[tp] = sc
    return sc


def format_traceparent(sc: SpanContext) -> str:
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


trace_of_group = dask_lives.trace_of_group  # shared by the scheduler's spans (built elsewhere) and the workers'


def resource():
    """This process's Resource (the tracer provider's), for spans made here for the consumers."""
    from opentelemetry import trace

    return getattr(trace.get_tracer_provider(), "resource", None)
