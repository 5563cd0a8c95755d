"""The client side: a ``dask.compute`` span around each call that submits work, and its carrier.

``Client.submit``, ``map``, ``compute``, ``persist`` and ``get`` (what ``dask.compute()`` and
``.compute()`` call with a distributed client) run inside one PRODUCER span ``dask.compute``, child
of whatever span the program has open. For ``get`` (blocking) the span covers the whole
computation; for the others it covers the submission, and the tasks' spans follow after it, as
for any producer. Nested calls (``map`` in batches, ``compute`` calling ``get``) make one span. It is one
of evlog's own spans (own_spans.py: recorded at its end, no SDK), so a program that makes no telemetry of
its own loads no ``opentelemetry.sdk`` for it (nor for the scheduler a LocalCluster runs beside it).

``Client._graph_to_futures``, where every one of them sends its graph, sends the current context (the
span, its tracestate and the baggage, as the configured propagators write them: evlog.propagation) with
the graph, on the wire only (context.py): no task gets an annotation.
"""
from __future__ import annotations

from contextvars import ContextVar

from opentelemetry import context as _ctx
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from evlog import notices, propagation
from evlog.observed.dask import context as dc
from evlog.observed.dask import spans as ds

METHODS = ("submit", "map", "compute", "persist", "get")
_current: ContextVar = ContextVar("evlog_dask_compute", default=None)
_tracer = None


def _get_tracer():
    global _tracer
    if _tracer is None:
        from evlog.observed import own_spans  # a span of evlog's own: no SDK for it

        _tracer = own_spans.tracer(ds.SCOPE_NAME, ds.VERSION)
    return _tracer


def compute_call(method: str):
    """A wrapper for ``Client.<method>``: the call runs inside one ``dask.compute`` span."""
    attrs = {"dask.client.method": method}

    def wrapper(wrapped, instance, args, kwargs):
        if _current.get() is not None:
            return wrapped(*args, **kwargs)
        try:
            span = _get_tracer().start_span("dask.compute", kind=SpanKind.PRODUCER, attributes=attrs)
            token = _ctx.attach(trace.set_span_in_context(span))
            mark = _current.set(span)
        except Exception as exc:
            notices.warn_once("dask-compute-span", f"a Dask client call runs without its span: {exc!r}")
            return wrapped(*args, **kwargs)
        try:
            return wrapped(*args, **kwargs)
        except BaseException as exc:
            try:
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
            except Exception:
                pass
            raise
        finally:
            try:
                _current.reset(mark)
                _ctx.detach(token)
                span.end()
            except Exception as exc:
                notices.warn_once("dask-compute-span-end", f"a Dask client span could not end: {exc!r}")

    return wrapper


def graph_to_futures(wrapped, instance, args, kwargs):
    """``Client._graph_to_futures``: the graph goes out with the trace context (context.send_to_scheduler
    puts it in the message, not in anything the client or the scheduler keeps)."""
    token = None
    try:
        sc = trace.get_current_span().get_span_context()
        if sc.is_valid:
            keys = args[1] if len(args) > 1 else kwargs.get("keys")
            span = _current.get()
            if span is not None and keys is not None and span.is_recording():
                span.set_attribute("dask.task.count", len(keys))
                for first in keys:
                    span.set_attribute("dask.task.key", first if type(first) is str else str(first))
                    break
            carrier = propagation.inject()  # the current span, its tracestate and baggage (OTEL_PROPAGATORS)
            if carrier is not None:
                token = dc.sending(carrier)
    except Exception as exc:
        token = None
        notices.warn_once("dask-carrier", f"a Dask graph goes out without its trace context: {exc!r}")
    try:
        return wrapped(*args, **kwargs)
    finally:
        if token is not None:
            dc.sent(token)
