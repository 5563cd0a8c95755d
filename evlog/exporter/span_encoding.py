"""Spans -> OTLP ``ExportTraceServiceRequest`` protobuf bytes, in one step.

The stock encoder (opentelemetry.exporter.otlp.proto.common.trace_encoder) builds a protobuf object per
span, event, attribute and value, then serializes them: most of the exporter process's CPU for Dask's
spans. Here the bytes are written directly, and what repeats is written once: a resource's and a scope's
bytes per object, a span or event name's bytes per name, an attribute's bytes per (key, value) for
string, int and bool values (a task's prefix, state and worker), and an event's name and attributes
per (name, attributes) when all are strings. A task span's transitions (dask_spans.TransitionEvents) are
written from the builder's tuples, without the SpanEvents they stand for: their name, start, finish and
worker once per (start, finish, worker), their stimulus id as any attribute. The message is exactly the
stock encoder's, field for field, in the same order (protobuf serializes by field number);
tests/test_span_encoding.py proves it on generated spans.

Input: spans with ReadableSpan's attributes: evlog.builders.span_data.SpanData, or the SDK's ReadableSpan.
As in the stock encoder (1.45):
- spans are grouped by resource, then by instrumentation scope, each compared by value (their ``==`` and
  hash), in first-seen order; the group's bytes are those of the first resource or scope seen;
- a span's ``flags`` carry only "has is_remote" (0x100) and the parent's is_remote (0x200), a link's the
  same of its own context; the W3C trace flags are not exported; a link has no trace state;
- the kind is SpanKind's value + 1; a status is always written (an empty one when unset), its message
  when it has one; dropped counts when not zero; times when not zero;
- an attribute value: bool, str, int (int64), float (double), bytes, a mapping (kvlist, keys made str), a
  sequence (an array of those, nested as given), None (an empty value). An attribute whose value cannot
  be encoded (another type, an int beyond int64, a string with lone surrogates) is left out, the others
  kept; it is said once.
A name, trace state or status message with lone surrogates is written with U+FFFD in their place (the
stock encoder fails the whole batch).
"""
from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from opentelemetry.trace import SpanKind

from evlog import notices
from evlog.builders.dask_spans import STIMULUS_ID, TRANSITION, TransitionEvents, transition_head
from evlog.text import utf8 as _utf8

_Q = struct.Struct("<Q").pack
_D = struct.Struct("<d").pack
_I32 = struct.Struct("<I").pack
_INT64_MIN, _INT64_MAX, _U64 = -(1 << 63), (1 << 63) - 1, (1 << 64) - 1
_SMALL = [bytes((i,)) for i in range(128)]
# every varint of one or two bytes, made once: most lengths (an attribute, an event, a span) are under 16 KiB
_V2 = 1 << 14
_VARINT = _SMALL + [bytes((n & 0x7F | 0x80, n >> 7)) for n in range(128, _V2)]
CACHE_LIMIT = 4096  # entries per cache, then it starts again: values unique to a task pass through, the repeated
# ones come back at once (65,536 entries were up to 13 MB of tasks' keys and stimulus ids, none faster: measured)

_KIND = {k: b"\x30" + _SMALL[k.value + 1] for k in SpanKind}  # Span.kind (6)
_FLAGS = b"\x85\x01" + _I32(0x100)  # Span.flags (16): SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_FLAGS_REMOTE = b"\x85\x01" + _I32(0x300)  # ... | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_LINK_FLAGS = b"\x35" + _I32(0x100)  # Span.Link.flags (6)
_LINK_FLAGS_REMOTE = b"\x35" + _I32(0x300)
_EMPTY_SCOPE = b"\x0a\x00"  # ScopeSpans.scope: an empty InstrumentationScope (the stock encoder's for no scope)


def varint(n: int) -> bytes:
    """``n`` (0 <= n < 2**64) as a protobuf varint."""
    if n < _V2:
        return _VARINT[n]
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field."""
    n = len(payload)
    return tag + (_VARINT[n] if n < _V2 else varint(n)) + payload


# ---- attributes ------------------------------------------------------------------------------------

def _any(v) -> bytes:
    """An AnyValue's bytes; raises (TypeError, ValueError, UnicodeEncodeError) where the stock encoder does."""
    t = type(v)
    if t is str:
        return _field(b"\x0a", v.encode())
    if t is bool:
        return b"\x10\x01" if v else b"\x10\x00"
    if t is int:
        return b"\x18" + _int64(v)
    if t is float:
        return b"\x21" + _D(v)
    if t is tuple or t is list:  # an ArrayValue, as the Sequence check below makes it, without its ABC check
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any(x)) for x in v]))
    # the stock encoder's order of isinstance checks, for every other type
    if v is None:
        return b""
    if isinstance(v, bool):
        return b"\x10\x01" if v else b"\x10\x00"
    if isinstance(v, str):
        return _field(b"\x0a", str.encode(v))
    if isinstance(v, int):
        return b"\x18" + _int64(int(v))
    if isinstance(v, float):
        return b"\x21" + _D(v)
    if isinstance(v, bytes):
        return _field(b"\x3a", bytes(v))
    if isinstance(v, Sequence):  # ArrayValue (5)
        return _field(b"\x2a", b"".join([_field(b"\x0a", _any(x)) for x in v]))
    if isinstance(v, Mapping):  # KeyValueList (6)
        return _field(b"\x32", b"".join([_field(b"\x0a", _kv(str(k), x)) for k, x in v.items()]))
    raise TypeError(f"Invalid type {type(v)} of value {v}")


def _int64(v: int) -> bytes:
    if v < _INT64_MIN or v > _INT64_MAX:
        raise ValueError(f"Value out of range: {v}")
    return varint(v & _U64)


def _kv(key: str, v) -> bytes:
    """A KeyValue's bytes."""
    if type(key) is not str:
        raise TypeError(f"an attribute key must be a str, not {type(key).__name__}")
    return (_field(b"\x0a", key.encode()) if key else b"") + _field(b"\x12", _any(v))


_kv_cache: dict = {}  # (field tag, key, value, type of the value) -> the field's bytes


def _attributes(tag: bytes, attributes, out: list) -> None:
    """Append each attribute of ``attributes`` as a ``tag`` field (a KeyValue) to ``out``."""
    get = _kv_cache.get
    append = out.append
    for k, v in attributes.items():
        t = type(v)
        if t is str or t is int or t is bool:  # not float: -0.0 == 0.0, and NaN is never found again
            key = (tag, k, v, t)
            b = get(key)
            if b is None:
                b = _kv_made(key, tag, k, v)
                if b is None:
                    continue
            append(b)
        else:
            b = _kv_field(tag, k, v)
            if b is not None:
                append(b)


def _kv_made(key: tuple, tag: bytes, k, v) -> bytes | None:
    """What _kv_cache did not have under ``key``: the field's bytes, kept there (None: left out, and said)."""
    b = _kv_field(tag, k, v)
    if b is not None:
        if len(_kv_cache) >= CACHE_LIMIT:
            _kv_cache.clear()
        _kv_cache[key] = b
    return b


def _kv_field(tag: bytes, k, v) -> bytes | None:
    if type(v) is str and type(k) is str and k:  # most values met once (a task's key): the bytes without calls
        try:
            kb, vb = k.encode(), v.encode()
        except UnicodeEncodeError:
            pass  # _kv below raises it again, and the attribute is left out with its reason
        else:
            n = len(vb)
            value = b"\x0a" + (_VARINT[n] if n < _V2 else varint(n)) + vb  # AnyValue.string_value (1)
            n, m = len(kb), len(value)
            kv = (b"\x0a" + (_VARINT[n] if n < _V2 else varint(n)) + kb  # KeyValue.key (1)
                  + b"\x12" + (_VARINT[m] if m < _V2 else varint(m)) + value)  # KeyValue.value (2)
            n = len(kv)
            return tag + (_VARINT[n] if n < _V2 else varint(n)) + kv
    try:
        return _field(tag, _kv(k, v))
    except Exception as exc:  # as the stock encoder: this attribute is left out, the others kept
        notices.warn_once(f"span-attribute-{type(exc).__name__}",
                          f"a span attribute cannot be exported ({k!r}: {exc}); it is left out")
        return None


def _attributes_bytes(tag: bytes, attributes) -> bytes:
    out: list = []
    if attributes:
        _attributes(tag, attributes, out)
    return b"".join(out)


_events: dict = {}  # (name, attribute items but the last) -> an event's name and those attributes' fields


def _event_rest(name: str, attrs, dropped: int) -> bytes:
    """An Event's fields after its time: name, attributes, dropped count. Where every value is a str, from
    two cached parts: the name and every attribute but the last, once per (name, those attributes) (a
    transition's start, finish and worker repeat from task to task), then the last attribute, once per
    (key, value) as any attribute (its stimulus id: a graph's, shared by its tasks, or the task's own, met
    once). Str only, as 1 == True == 1.0 would find one another's bytes; others are written each time."""
    if attrs and not dropped:
        for v in attrs.values():
            if type(v) is not str:
                break
        else:
            items = list(attrs.items())
            k, v = items.pop()
            key = (name, *items)
            head = _events.get(key)
            if head is None:
                head = _event_fields(name, dict(items), 0)
                if len(_events) >= CACHE_LIMIT:
                    _events.clear()
                _events[key] = head
            key = (b"\x1a", k, v, str)
            last = _kv_cache.get(key)
            if last is None:
                last = _kv_made(key, b"\x1a", k, v)
                if last is None:  # left out, as _attributes leaves out what cannot be encoded
                    return head
            return head + last
    return _event_fields(name, attrs, dropped)


_transition_heads: dict = {}  # (start, finish, worker or None) -> a transition event's name and those attributes


def _transitions(trans, p: list) -> None:
    """A task span's transition events (dask_spans.TransitionEvents), written from its ``(start, finish,
    stimulus id, worker, time)`` tuples as _event_rest writes the SpanEvents they stand for, without making
    them: the name, start, finish and worker from one cached part, the stimulus id as any attribute. A value
    not a str (never from Dask) goes by the SpanEvent."""
    heads = _transition_heads
    for tr in trans:
        start, finish, stim, w, t = tr
        stim = stim or ""
        if type(start) is not str or type(finish) is not str or type(stim) is not str or (w and type(w) is not str):
            [e] = TransitionEvents([tr])
            rest = _event_rest(e.name, e.attributes, 0)
        else:
            w = w or None
            head = heads.get((start, finish, w))
            if head is None:
                head = _event_fields(TRANSITION, transition_head(start, finish, w), 0)
                if len(heads) >= CACHE_LIMIT:
                    heads.clear()
                heads[(start, finish, w)] = head
            key = (b"\x1a", STIMULUS_ID, stim, str)
            last = _kv_cache.get(key)
            if last is None:
                last = _kv_made(key, b"\x1a", STIMULUS_ID, stim) or b""  # b"": left out, as _attributes does
            rest = head + last
        ns = int(t * 1e9)
        body = b"\x09" + _Q(ns) + rest if ns else rest
        n = len(body)
        p += (b"\x5a", _VARINT[n] if n < _V2 else varint(n), body)


def _event_fields(name: str, attrs, dropped: int) -> bytes:
    ep = [_name(b"\x12", name)] if name else []
    if attrs:
        _attributes(b"\x1a", attrs, ep)
    if dropped:
        ep += (b"\x20", varint(dropped))
    return b"".join(ep)


# ---- what is written once per object or name -------------------------------------------------------

_names: dict = {}  # (field tag, name) -> the field's bytes
_objects: dict = {}  # id(resource, scope, trace state or status) -> (the object, its bytes)


def _name(tag: bytes, name: str) -> bytes:
    key = (tag, name)
    b = _names.get(key)
    if b is None:
        b = _field(tag, _utf8(name))
        if len(_names) >= CACHE_LIMIT:
            _names.clear()
        _names[key] = b
    return b


def _once(obj, make) -> bytes:
    """``make(obj)``, kept while ``obj`` is the object it was made for (the cache holds it, so its id is not
    reused meanwhile)."""
    hit = _objects.get(id(obj))
    if hit is not None and hit[0] is obj:
        return hit[1]
    b = make(obj)
    if len(_objects) >= 4096:
        _objects.clear()
    _objects[id(obj)] = (obj, b)
    return b


def _resource_field(resource) -> bytes:
    """ResourceSpans.resource (1): the Resource's attributes."""
    return _field(b"\x0a", _attributes_bytes(b"\x0a", resource.attributes))


def _scope_field(scope) -> bytes:
    """ScopeSpans.scope (1): name, version, attributes."""
    body = b""
    if scope.name:
        body += _field(b"\x0a", _utf8(scope.name))
    if scope.version:
        body += _field(b"\x12", _utf8(scope.version))
    return _field(b"\x0a", body + _attributes_bytes(b"\x1a", scope.attributes))


def _trace_state_field(state) -> bytes:
    """Span.trace_state (3), as the stock encoder writes it."""
    return _field(b"\x1a", _utf8(",".join([f"{key}={value}" for key, value in state.items()])))


def _status_field(status) -> bytes:
    """Span.status (15): its message (2) and code (3), each when set."""
    body = b""
    if status.description:
        body += _field(b"\x12", _utf8(status.description))
    code = status.status_code.value
    if code:
        body += b"\x18" + varint(code)
    return _field(b"\x7a", body)


# ---- spans --------------------------------------------------------------------------------------------

def span_bytes(s) -> bytes:
    """One Span message."""
    ctx = s.context
    p = [b"\x0a\x10", ctx.trace_id.to_bytes(16, "big"), b"\x12\x08", ctx.span_id.to_bytes(8, "big")]
    state = ctx.trace_state
    if state:
        p.append(_once(state, _trace_state_field))
    parent = s.parent
    if parent is not None:
        p += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    if s.name:
        p.append(_name(b"\x2a", s.name))
    p.append(_KIND[s.kind])
    t = s.start_time
    if t:
        p += (b"\x39", _Q(t))
    t = s.end_time
    if t:
        p += (b"\x41", _Q(t))
    attrs = s.attributes
    if attrs:
        _attributes(b"\x4a", attrs, p)
    n = s.dropped_attributes
    if n:
        p += (b"\x50", varint(n))
    events = s.events
    if type(events) is TransitionEvents:
        _transitions(events.trans, p)
        events = events.tail
    for e in events:
        t = e.timestamp
        rest = _event_rest(e.name, e.attributes, e.dropped_attributes)
        body = b"\x09" + _Q(t) + rest if t else rest
        n = len(body)
        p += (b"\x5a", _VARINT[n] if n < _V2 else varint(n), body)
    n = s.dropped_events
    if n:
        p += (b"\x60", varint(n))
    for link in s.links:
        c = link.context
        lp = [b"\x0a\x10", c.trace_id.to_bytes(16, "big"), b"\x12\x08", c.span_id.to_bytes(8, "big")]
        attrs = link.attributes
        if attrs:
            _attributes(b"\x22", attrs, lp)
        n = link.dropped_attributes
        if n:
            lp += (b"\x28", varint(n))
        lp.append(_LINK_FLAGS_REMOTE if c.is_remote else _LINK_FLAGS)
        body = b"".join(lp)
        p += (b"\x6a", varint(len(body)), body)
    n = s.dropped_links
    if n:
        p += (b"\x70", varint(n))
    status = s.status
    if status is not None:
        p.append(_once(status, _status_field))
    p.append(_FLAGS_REMOTE if parent is not None and parent.is_remote else _FLAGS)
    return b"".join(p)


def encode(spans) -> bytes:
    """The ExportTraceServiceRequest of ``spans``, serialized."""
    groups: dict = {}  # resource (by value) -> {scope (by value) or None: [ScopeSpans.spans fields]}
    lists: dict = {}  # (id(resource), id(scope)) -> the list of its group: the values are compared once per object
    for s in spans:
        r, sc = s.resource, s.instrumentation_scope
        out = lists.get((id(r), id(sc)))
        if out is None:
            scopes = groups.get(r)
            if scopes is None:
                scopes = groups[r] = {}
            sc_key = sc or None
            out = scopes.get(sc_key)
            if out is None:
                out = scopes[sc_key] = []
            lists[(id(r), id(sc))] = out
        b = span_bytes(s)
        n = len(b)
        out += (b"\x12", _VARINT[n] if n < _V2 else varint(n), b)
    request = []
    for r, scopes in groups.items():
        rs = [_once(r, _resource_field)]
        for sc, items in scopes.items():
            ss = _once(sc, _scope_field) if sc is not None else _EMPTY_SCOPE
            ss += b"".join(items)
            url = sc.schema_url if sc is not None else None
            if url:
                ss += _field(b"\x1a", _utf8(url))
            rs.append(_field(b"\x12", ss))
        if r.schema_url:
            rs.append(_field(b"\x1a", _utf8(r.schema_url)))
        request.append(_field(b"\x0a", b"".join(rs)))
    return b"".join(request)
