"""Ids and trace context shared by the Dask scheduler, worker and client sides (in observed processes).

The spans themselves are built in the run's exporter process (evlog/builders/dask_lives.py for the
scheduler's task lives, dask_executions.py for the workers' executions and transfers); what is left here is what a
process needs to
make a task's span context before its span exists: the task's execute span is current while the task
runs, and its ids travel in the records.
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, TraceFlags

from evlog import propagation
from evlog.version import __version__
from evlog.wire import dask as _wire

SCOPE_NAME, VERSION = _wire.SCOPE_NAME, __version__  # the tracers' and meters' scope
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
CARRIER = "evlog.context"  # the annotation key of the trace context on the wire (a carrier: evlog.propagation)
CONTEXTS = propagation.Contexts()  # carrier -> (Context, parent SpanContext): extracted once per client call
_getrandbits = random.getrandbits


def new_span_id() -> int:
    return _getrandbits(64) or 1


def new_trace_id() -> int:
    return _getrandbits(128) or 1


def context(trace_id: int, span_id: int, trace_state=None) -> SpanContext:
    """A sampled local SpanContext (with its parent's tracestate, as the SDK gives a child span)."""
    return SpanContext(trace_id, span_id, False, SAMPLED, trace_state)


trace_of_group = _wire.trace_of_group  # shared by the scheduler's spans (built elsewhere) and the workers'


def resource():
    """This process's resource, for spans made here for the consumers (its attributes only: no SDK)."""
    from evlog.observed import resource

    resource.attributes()  # made, if nothing asked for them yet
    return resource.view
