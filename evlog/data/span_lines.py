"""A run folder's traces line straight to span rows, for a reader that reads a whole big run (`evlog report`).

``rows(line)`` gives the rows ``otlp_decode.decode_spans(json.loads(line))`` gives, in about half its time
(measured on the 520 lines of a 157k-task Dask run, on a shared 2-core machine: 2.4-3.0 s CPU against
4.5-4.8 s): msgspec parses the line into typed records in one step, checking what the full decoder checks (ids
as lowercase hex, times and enums in range, AnyValues with one known field), so only building the rows is left
to Python. A line with anything else in it (upper-case ids, enum names, negative times, a bad
value, a malformed line) raises, and its reader decodes it with otlp_decode, which names what is wrong.

The rows hold what otlp_decode's hold, in less memory (the 157k-task run's 178,000 spans and 440,000 span
events: 120 MB less than as dicts): each span and span event is a slotted record (``SpanRow``, ``SpanEvent``) read as
a dict is read, ``r["name"]`` and ``r.get("name")``; equal strings are one object (as otlp_decode's fast path
gives them); span events whose attributes are written alike share one attributes dict (Dask's transitions:
385,000 events of a 57,000-task run hold 128,000 different ones). Read them, do not change them.
``as_dicts(rows)`` gives otlp_decode's dicts, for a reader that needs those.
"""
from __future__ import annotations

from typing import Annotated, Any

import msgspec
from msgspec import UNSET, Meta, Raw, Struct, UnsetType

from evlog.data.otlp_decode import any_value, shared_strings

__all__ = ["SpanEvent", "SpanRow", "as_dicts", "forget", "rows"]

_SPAN_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")  # otlp_decode's, by number
_STATUS_CODES = ("UNSET", "OK", "ERROR")
_Time = int | str  # a 64-bit integer as the JSON mapping writes it: int() of it, as otlp_decode reads it
_UINT_MAX = (1 << 64) - 1
_INT_MIN = -(1 << 63)  # an intValue is int64; otlp_decode reads uint64 too
_TraceId = Annotated[str, Meta(pattern="^[0-9a-f]{32}$")]
_SpanId = Annotated[str, Meta(pattern="^[0-9a-f]{16}$")]
_ParentId = Annotated[str, Meta(pattern="^(?:[0-9a-f]{16})?$")]


class _Value(Struct, gc=False, forbid_unknown_fields=True):
    """An AnyValue: a string, an integer or an array read here, any other kind left to otlp_decode.any_value as
    written."""

    stringValue: str | UnsetType = UNSET  # noqa: N815 (OTLP/JSON's names)
    intValue: int | str | UnsetType = UNSET  # noqa: N815
    doubleValue: Any = UNSET  # noqa: N815
    boolValue: Any = UNSET  # noqa: N815
    arrayValue: _Array | UnsetType = UNSET  # noqa: N815
    kvlistValue: Any = UNSET  # noqa: N815
    bytesValue: Any = UNSET  # noqa: N815


class _Array(Struct, gc=False):
    """An ArrayValue. Typed, so that msgspec reads the ``dask.task.priority`` and ``dask.task.dependencies`` arrays
    every ``dask.task`` span has: read as plain dicts and decoded by otlp_decode.any_value, they took a third of the
    reading of a big run. Other fields are ignored, as otlp_decode ignores them; ``"values": null`` (an empty
    array to otlp_decode) is left to it with the line."""

    values: list[_Value] = []


_VALUE_FIELDS = _Value.__struct_fields__


class _KeyValue(Struct, gc=False):
    key: str
    value: _Value


class _Event(Struct, gc=False):
    name: str = ""
    timeUnixNano: _Time = 0  # noqa: N815
    attributes: Raw = Raw(b"")  # decoded once per distinct text (_event_attrs)


class _Status(Struct, gc=False):
    code: Annotated[int, Meta(ge=0, le=2)] = 0
    message: str = ""


class _Link(Struct, gc=False):
    traceId: _TraceId  # noqa: N815
    spanId: _SpanId  # noqa: N815
    attributes: list[_KeyValue] = []


class _Span(Struct, gc=False):
    traceId: _TraceId  # noqa: N815
    spanId: _SpanId  # noqa: N815
    name: str = ""
    parentSpanId: _ParentId = ""  # noqa: N815
    kind: Annotated[int, Meta(ge=0, le=5)] = 0
    startTimeUnixNano: _Time = 0  # noqa: N815
    endTimeUnixNano: _Time = 0  # noqa: N815
    attributes: list[_KeyValue] = []
    events: list[_Event] = []
    links: list[_Link] = []
    status: _Status | None = None


class _Scope(Struct, gc=False):
    name: str = ""


class _ScopeSpans(Struct, gc=False):
    scope: _Scope | None = None
    spans: list[_Span] = []


class _Resource(Struct, gc=False):
    attributes: list[_KeyValue] = []


class _ResourceSpans(Struct, gc=False):
    resource: _Resource | None = None
    scopeSpans: list[_ScopeSpans] = []  # noqa: N815


class _Request(Struct, gc=False):
    resourceSpans: list[_ResourceSpans]  # noqa: N815 (required: a line without it is otlp_decode's to name)


_request = msgspec.json.Decoder(_Request).decode
_key_values = msgspec.json.Decoder(list[_KeyValue]).decode
_EVENT_ATTRS_MAX = 1 << 16  # distinct event attribute texts kept for sharing; cleared past it (between lines)
_event_attrs_seen: dict[bytes, dict] = {}


class _NotPlain(Exception):
    """A value otlp_decode's full decoder reads (or names as wrong), not this one."""


def forget() -> None:
    """Let go of the event attributes kept for sharing (a reader done with its lines)."""
    _event_attrs_seen.clear()


def _attrs(kvs: list[_KeyValue], share) -> dict:
    out = {}
    unset = UNSET
    for kv in kvs:
        key = kv.key
        v = kv.value
        s = v.stringValue
        if s is not unset:
            out[share(key, key)] = share(s, s)
        elif (i := v.intValue) is not unset and v.doubleValue is v.boolValue is v.arrayValue is v.kvlistValue \
                is v.bytesValue is unset:
            n = int(i)  # a string as otlp_decode reads it
            if not _INT_MIN <= n <= _UINT_MAX:
                raise _NotPlain
            out[share(key, key)] = n
        elif (a := v.arrayValue) is not unset and i is v.doubleValue is v.boolValue is v.kvlistValue \
                is v.bytesValue is unset:
            out[share(key, key)] = _array(a.values, share)
        else:
            out[share(key, key)] = _value(v, share)
    return out


def _value(v: _Value, share) -> Any:
    """otlp_decode.any_value of a value that is not a string (or of an array's element, any kind)."""
    d = {f: x for f in _VALUE_FIELDS if (x := getattr(v, f)) is not UNSET}
    if len(d) > 1:  # otlp_decode reads the first written, which this one cannot know
        raise _NotPlain
    a = d.get("arrayValue")
    return _array(a.values, share) if a is not None else any_value(d)


def _array(values: list[_Value], share) -> list:
    """otlp_decode.any_value of an array: its strings and integers read here, in line (the arrays of a Dask run
    hold only those), other elements by ``_value``; strings shared (a task's dependencies are other tasks' keys)."""
    out = []
    append = out.append
    unset = UNSET
    for v in values:
        if v.doubleValue is v.boolValue is v.arrayValue is v.kvlistValue is v.bytesValue is unset:
            s, i = v.stringValue, v.intValue
            if i is unset:
                append(None if s is unset else share(s, s))  # otlp_decode reads an empty AnyValue as None
                continue
            if s is unset:
                n = int(i)  # a string as otlp_decode reads it
                if not _INT_MIN <= n <= _UINT_MAX:
                    raise _NotPlain
                append(n)
                continue
        append(_value(v, share))
    return out


class SpanRow(Struct, gc=False):
    """A span row (otlp_decode's keys, as fields); ``row[key]`` and ``row.get(key)`` read it as a dict."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: str
    start: int
    end: int
    attributes: dict
    events: list | tuple  #: () where it has none (one object for all: read them, do not change them)
    links: list | tuple  #: () where it has none
    status_code: str
    status_message: str
    resource: dict
    scope: str

    def __getitem__(self, key: str) -> Any:  # faster than ``__getitem__ = object.__getattribute__`` (a slot wrapper)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


class SpanEvent(Struct, gc=False):
    """A span event (name, time, attributes); ``event[key]`` and ``event.get(key)`` read it as a dict."""

    name: str
    time: int
    attributes: dict

    def __getitem__(self, key: str) -> Any:  # faster than ``__getitem__ = object.__getattribute__`` (a slot wrapper)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def as_dicts(rows: list) -> list[dict]:
    """otlp_decode's dicts of these rows."""
    out = []
    for r in rows:
        d = {f: getattr(r, f) for f in SpanRow.__struct_fields__}
        d["events"] = [{"name": e.name, "time": e.time, "attributes": e.attributes} for e in r.events]
        d["links"] = r.links or []
        out.append(d)
    return out


_NONE: tuple = ()  # a span's events or links when it has none: one object, not an empty list per span


def _no_share(s: str, _same: str) -> str:
    return s


def rows(line: bytes) -> list[SpanRow]:
    """The span rows of one OTLP/JSON ExportTraceServiceRequest line; raises (msgspec's errors, or
    otlp_decode.DecodeError) on a line that is not plain, for otlp_decode to decode."""
    req = _request(line)
    share = shared_strings()
    seen = _event_attrs_seen
    if len(seen) > _EVENT_ATTRS_MAX:
        seen.clear()
    out: list[SpanRow] = []
    append = out.append
    kinds = _SPAN_KINDS
    for rs in req.resourceSpans:
        resource = _attrs(rs.resource.attributes, _no_share) if rs.resource is not None else {}
        for ss in rs.scopeSpans:
            scope = ss.scope.name if ss.scope is not None else ""
            for sp in ss.spans:
                events = [] if sp.events else _NONE
                for ev in sp.events:
                    raw = bytes(ev.attributes)
                    a = seen.get(raw)
                    if a is None:
                        a = seen[raw] = _attrs(_key_values(raw), share) if raw and raw != b"null" else {}
                    name = ev.name
                    t = int(ev.timeUnixNano)  # a string as otlp_decode's fast path reads it
                    if not 0 <= t <= _UINT_MAX:
                        raise _NotPlain
                    events.append(SpanEvent(share(name, name), t, a))
                status = sp.status
                start, end = int(sp.startTimeUnixNano), int(sp.endTimeUnixNano)
                if not 0 <= start <= _UINT_MAX or not 0 <= end <= _UINT_MAX:
                    raise _NotPlain
                tid, pid, name = sp.traceId, sp.parentSpanId, sp.name
                append(SpanRow(
                    share(tid, tid),
                    sp.spanId,
                    share(pid, pid),
                    share(name, name),
                    kinds[sp.kind],
                    start,
                    end,
                    _attrs(sp.attributes, share) if sp.attributes else {},
                    events,
                    [{"trace_id": ln.traceId, "span_id": ln.spanId, "attributes": _attrs(ln.attributes, share)}
                     for ln in sp.links] if sp.links else _NONE,
                    _STATUS_CODES[status.code] if status is not None else "UNSET",
                    status.message if status is not None else "",
                    resource,
                    scope,
                ))
    return out
