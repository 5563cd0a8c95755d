"""Trace context helpers shared by the observed processes and the exporter process's builders (both
must read a carrier the same way). The OpenTelemetry API only.
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, TraceFlags


def parse_traceparent(tp) -> SpanContext | None:
    """The remote SpanContext of a W3C traceparent string, or None."""
    try:
        _v, trace_hex, span_hex, flags = tp.split("-")[:4]
        sc = SpanContext(int(trace_hex, 16), int(span_hex, 16), True, TraceFlags(int(flags, 16) & 0xFF))
    except Exception:
        return None
    return sc if sc.is_valid else None


def format_traceparent(sc: SpanContext) -> str:
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def trace_of_group(span_id) -> int:
    """A trace id for tasks with no carrier: from Dask's own span id (a uuid), shared by scheduler and
    workers, so tasks of one Dask span still land in one trace; random if there is none."""
    if span_id:
        try:
            return int(str(span_id).replace("-", ""), 16) & ((1 << 128) - 1) or 1
        except ValueError:
            pass
    return random.getrandbits(128) or 1
