"""The program's own telemetry as records: what evlog/observed/sdk_records.py writes and
evlog/builders/sdk_rebuild.py rebuilds. Standard library only.

Records (kinds ``otel.span``, ``otel.log``, ``otel.metrics``; a scope is ``(name, version, schema_url,
attributes or None)``; trace ids, span ids and flags are ints):
- span: ``(name, SpanKind value, scope, trace_id, span_id, flags, tracestate header, parent, start, end,
  attributes, events, links, status, dropped)``; parent ``(trace_id, span_id, flags, is_remote)`` or None; events
  ``((name, attributes, time), ...)`` or None; links ``((trace_id, span_id, flags, attributes, is_remote), ...)`` or
  None; status ``(StatusCode value, description)`` or None (unset);
- log: ``(time, observed time, trace_id, span_id, flags, severity text, SeverityNumber value or None, body,
  attributes, event name, scope, dropped attributes or None)``; dropped (span): ``(attributes, events, links)``
  the SDK's limits dropped, or None;
- metrics: ``(scopes, ...)``, each ``(scope, schema_url, metrics)``; a metric ``(name, description, unit,
  data)`` with data one of ``("gauge", points)``, ``("sum", temporality, monotonic, points)``,
  ``("histogram", temporality, points)``, ``("exponential", temporality, points)``; number points
  ``(attributes, start, time, value, exemplars)``, histogram points ``(attributes, start, time, count,
  sum, bucket counts, bounds, min, max, exemplars)``, exponential points ``(attributes, start, time,
  count, sum, scale, zero count, (offset, counts), (offset, counts), flags, min, max, exemplars)``; an
  exemplar ``(attributes, value, time, span_id, trace_id)``.
The resource is not in the records: each process's hello carries it (its current one).
"""
from enum import IntEnum


class Span(IntEnum):
    """Fields of an ``otel.span`` record."""
    NAME = 0
    KIND = 1
    SCOPE = 2
    TRACE_ID = 3
    SPAN_ID = 4
    FLAGS = 5
    TRACESTATE = 6
    PARENT = 7
    START = 8
    END = 9
    ATTRIBUTES = 10
    EVENTS = 11
    LINKS = 12
    STATUS = 13
    DROPPED = 14  # (attributes, events, links) the SDK's limits dropped, or None


class Log(IntEnum):
    """Fields of an ``otel.log`` record."""
    TIME = 0
    OBSERVED = 1
    TRACE_ID = 2
    SPAN_ID = 3
    FLAGS = 4
    SEVERITY_TEXT = 5
    SEVERITY = 6
    BODY = 7
    ATTRIBUTES = 8
    EVENT_NAME = 9
    SCOPE = 10
    DROPPED = 11  # attributes the SDK's limits dropped, or None


class PoolTask(IntEnum):
    """Fields of a ``pool.task`` record (observed/pools/taskspan.py; builders/pool_spans.py): a span
    record without its kind (CONSUMER) and its dropped counts (a task span drops nothing), and with its
    scope's name only (the version is evlog's)."""
    NAME = 0
    SCOPE_NAME = 1
    TRACE_ID = 2
    SPAN_ID = 3
    FLAGS = 4
    TRACESTATE = 5
    PARENT = 6
    START = 7
    END = 8
    ATTRIBUTES = 9
    EVENTS = 10
    LINKS = 11
    STATUS = 12
