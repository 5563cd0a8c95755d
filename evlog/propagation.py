"""Trace context between processes: the configured propagators, with dict carriers.

Wherever evlog takes a context to another process (a Dask graph and its tasks, a pool task, a torchrun
worker's environment, a parent's TRACEPARENT), it writes and reads it with OpenTelemetry's global
textmap propagator (``opentelemetry.propagate``: what ``OTEL_PROPAGATORS`` names, tracecontext,baggage
by default, or what the program set with ``set_global_textmap``), so the span, its tracestate and the
baggage travel in the format the program configured. A carrier is a dict of str, a marshal atom
(it rides in Dask's messages and in evlog's records as it is); ``key(carrier)`` is its hashable form.

Extracting is the costly half and the same carrier comes with many tasks: ``Contexts`` keeps one
result per distinct carrier. The OpenTelemetry API only, no SDK: observed processes import this.
"""
from __future__ import annotations

import os

from opentelemetry import context as _ctx
from opentelemetry import trace

from evlog import notices

_EMPTY = _ctx.Context()
_api: list = []  # opentelemetry.propagate, once imported


def _propagate():
    """opentelemetry.propagate, or None when OTEL_PROPAGATORS names one that is not installed (its import
    fails: the program's own import of it fails as it would without evlog)."""
    if _api:
        return _api[0]
    try:
        from opentelemetry import propagate
    except Exception as exc:
        notices.warn_once("propagators", f"OTEL_PROPAGATORS={os.environ.get('OTEL_PROPAGATORS')!r} cannot be "
                          f"loaded ({exc}); trace context does not travel with tasks to other processes")
        return None
    _api.append(propagate)
    return propagate


def inject(context=None) -> dict | None:
    """The carrier of ``context`` (the current one if None), or None when it holds nothing to carry."""
    propagate = _propagate()
    if propagate is None:
        return None
    carrier: dict = {}
    propagate.inject(carrier, context)
    return carrier or None


def extract(carrier) -> object:
    """The Context of a carrier (a remote parent span, tracestate, baggage); empty for None or a bad one."""
    if type(carrier) is not dict or not carrier:
        return _EMPTY
    propagate = _propagate()
    return propagate.extract(carrier, _EMPTY) if propagate is not None else _EMPTY


def key(carrier) -> tuple:
    """A carrier's hashable form (for caches)."""
    return tuple(sorted(carrier.items()))


def read(carrier) -> tuple:
    """(Context, its parent SpanContext or None) of a carrier."""
    ctx = extract(carrier)
    sc = trace.get_current_span(ctx).get_span_context()
    return ctx, (sc if sc.is_valid else None)


class Contexts:
    """Carrier -> (Context, its parent SpanContext or None), extracted once per distinct carrier: tasks
    of one client call come one after another with equal carriers (each its own dict on a worker)."""

    def __init__(self, size: int = 4096):
        self._size = size
        self._by_key: dict = {}
        self._last: tuple = (None, (_EMPTY, None))  # the last carrier asked for, and its result

    def get(self, carrier) -> tuple:
        last = self._last
        if carrier == last[0]:
            return last[1]
        if type(carrier) is not dict or not carrier:
            return _EMPTY, None
        try:
            k = key(carrier)
            hit = self._by_key.get(k)
        except TypeError:  # values that do not hash or sort: not a carrier evlog wrote
            return _EMPTY, None
        if hit is None:
            hit = read(carrier)
            if len(self._by_key) >= self._size:
                self._by_key.clear()
            self._by_key[k] = hit
        self._last = (carrier, hit)
        return hit


# ---- the environment as a carrier (a parent's TRACEPARENT, torchrun's workers) ---------------------

def env_name(field: str) -> str:
    """The environment variable of a carrier field: ``traceparent`` -> ``TRACEPARENT``, ``x-b3-traceid`` ->
    ``X_B3_TRACEID`` (OpenTelemetry's environment carriers: upper case, other characters as ``_``)."""
    return "".join(c if c.isalnum() else "_" for c in field.upper())


def to_environ(carrier: dict) -> dict:
    return {env_name(k): v for k, v in carrier.items()}


def from_environ(environ=os.environ) -> dict:
    """The carrier the environment holds for the configured propagators' fields ({} if none)."""
    propagate = _propagate()
    if propagate is None:
        return {}
    out = {}
    for field in propagate.get_global_textmap().fields:
        value = environ.get(env_name(field))
        if value:
            out[field] = value
    return out


# ---- the run's exporter process ---------------------------------------------------------------

def configure(env: dict) -> None:
    """In the run's exporter process: the global textmap as ``OTEL_PROPAGATORS`` of the program's settings
    (``env``, from its hello) names it, so carriers from the program are read as they were written."""
    from importlib.metadata import entry_points

    from opentelemetry.propagators.composite import CompositePropagator

    value = (env.get("OTEL_PROPAGATORS") or "").strip()
    propagate = _propagate() if value else None
    if propagate is None:
        return  # the default (tracecontext,baggage), as opentelemetry.propagate builds it
    found = []
    for name in value.split(","):
        name = name.strip()
        if name.lower() == "none":
            found = []
            break
        try:
            found.append(next(iter(entry_points(group="opentelemetry_propagator", name=name))).load()())
        except Exception as exc:  # StopIteration: not installed
            notices.warn_once(f"propagator-{name}", f"OTEL_PROPAGATORS names {name!r}, which evlog's exporter "
                              f"process cannot load ({exc!r}): its carriers give the tasks' spans no parents")
    propagate.set_global_textmap(CompositePropagator(found))
