"""SDK telemetry -> OTLP/JSON export requests (the protobuf JSON mapping, ids in hex).

This is the format the Collector's file exporter writes and its otlpjsonfile receiver reads: camelCase
keys, 64-bit integers as strings, enums as numbers, trace and span ids as lowercase hex. Written by hand
because the SDK's encoders go through protobuf objects (an import and a copy per item that the run
folder does not need) and protobuf's JSON printer writes ids in base64, which OTLP/JSON forbids.

Spans (SpanData or ReadableSpans) carry what their protobuf message carries (exporter/span_encoding.py):
flags, dropped counts, link flags, scope attributes and schema URLs too; an unset status is left out (an
empty message); an int attribute beyond int64 is left out, as the protobuf encoders leave it out. The
run folder's lines and evlog's OTLP/JSON over HTTP (exporter/otlp_send.py) are this JSON.
"""
from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec
from opentelemetry.trace import StatusCode

from evlog.builders.dask_spans import STIMULUS_ID, TRANSITION, TransitionEvents, transition_head

_UNSET = StatusCode.UNSET

_STATUS = {"UNSET": 0, "OK": 1, "ERROR": 2}
_fast = msgspec.json.Encoder(enc_hook=str).encode
_stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=str).encode


def dumps(obj: Any) -> str:
    """Compact JSON text of ``obj`` (the dicts, lists and atoms built here). msgspec writes it about ten times
    faster than the standard library's encoder, which was a third of the exporter process's CPU on a
    157k-task Dask run writing its run folder; the text is the same but for floats in exponent form (1e-05 is
    written 0.00001, 1e+16 as 1e16: the same values). What msgspec refuses, the standard library's encoder
    writes: a string with a lone surrogate (the run folder's writer then puts U+FFFD in its place)."""
    try:
        return _fast(obj).decode()
    except Exception:
        return _stdlib(obj)


def any_value(v: Any) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": _double(v)}
    if isinstance(v, str):
        return {"stringValue": v}
    if isinstance(v, (bytes, bytearray)):
        return {"bytesValue": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, Mapping):
        return {"kvlistValue": {"values": [{"key": str(k), "value": any_value(x)} for k, x in v.items()]}}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    if v is None:
        return {}
    return {"stringValue": str(v)}


def _double(v: float):
    """Proto3 JSON spells the non-finite doubles as strings; a bare NaN is not JSON."""
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def attributes(attrs: Mapping[str, Any] | None) -> list:
    if not attrs:
        return []
    return [{"key": k, "value": any_value(v)} for k, v in attrs.items() if not _beyond_int64(v)]


def _beyond_int64(v) -> bool:
    """An int no OTLP message can carry (the protobuf encoders leave such an attribute out)."""
    return type(v) is int and not -(1 << 63) <= v < (1 << 63)


def _resource(resource) -> dict:
    return {"attributes": attributes(resource.attributes if resource is not None else None)}


def _scope(scope) -> dict:
    if scope is None:
        return {"name": ""}
    out = {"name": scope.name}
    if scope.version:
        out["version"] = scope.version
    attrs = getattr(scope, "attributes", None)
    if attrs:
        out["attributes"] = attributes(attrs)
    return out


def _schema(out: dict, obj) -> dict:
    """``out`` with the schema URL of ``obj`` (a resource or scope), if it has one."""
    url = getattr(obj, "schema_url", None) if obj is not None else None
    if url:
        out["schemaUrl"] = url
    return out


def _group(items, key_resource, key_scope):
    """[(resource, [(scope, [item])])] preserving first-seen order."""
    groups: dict = {}
    for item in items:
        r = key_resource(item)
        s = key_scope(item)
        groups.setdefault(id(r), (r, {}))[1].setdefault(id(s), (s, []))[1].append(item)
    return [(r, list(scopes.values())) for r, scopes in groups.values()]


# ---- traces ------------------------------------------------------------------------------------

def span(sp) -> dict:
    ctx = sp.context
    out = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": sp.name,
        "kind": sp.kind.value + 1,  # SDK INTERNAL=0..CONSUMER=4; proto adds UNSPECIFIED=0
        "startTimeUnixNano": str(sp.start_time or 0),
        "endTimeUnixNano": str(sp.end_time or 0),
        "attributes": attributes(sp.attributes),
    }
    if sp.parent is not None:
        out["parentSpanId"] = f"{sp.parent.span_id:016x}"
    ts = ctx.trace_state
    if ts:
        out["traceState"] = ts.to_header()
    if sp.events:
        out["events"] = [_dropped({"timeUnixNano": str(e.timestamp), "name": e.name,
                                   "attributes": attributes(e.attributes)}, e.dropped_attributes)
                         for e in sp.events]
    if sp.links:
        out["links"] = _links(sp.links)
    status = _status(sp.status)
    if status:
        out["status"] = status
    for key, n in (("droppedAttributesCount", sp.dropped_attributes), ("droppedEventsCount", sp.dropped_events),
                   ("droppedLinksCount", sp.dropped_links)):
        if n:
            out[key] = n
    out["flags"] = _flags(sp.parent)
    return out


def _links(links) -> list:
    return [
        {
            "traceId": f"{link.context.trace_id:032x}",
            "spanId": f"{link.context.span_id:016x}",
            "attributes": attributes(link.attributes),
            **({"droppedAttributesCount": link.dropped_attributes} if link.dropped_attributes else {}),
            "flags": _flags(link.context),
        }
        for link in links
    ]


def _status(status) -> dict:
    """A span's status, {} when unset (left out)."""
    code = _STATUS.get(status.status_code.name, 0)
    return {**({"code": code} if code else {}), **({"message": status.description} if status.description else {})}


def _flags(context) -> int:
    """Span.flags as the protobuf encoders write it: "has is_remote", and the context's is_remote."""
    return 0x300 if context is not None and context.is_remote else 0x100


def _dropped(out: dict, n: int) -> dict:
    if n:
        out["droppedAttributesCount"] = n
    return out


def _span_resource(s):
    return s.resource


def _span_scope(s):
    return s.instrumentation_scope


def encode_spans(spans: Sequence) -> dict:
    return {
        "resourceSpans": [
            _schema({
                "resource": _resource(res),
                "scopeSpans": [_schema({"scope": _scope(sc), "spans": [span(s) for s in items]}, sc)
                               for sc, items in scopes],
            }, res)
            for res, scopes in _group(spans, _span_resource, _span_scope)
        ]
    }


# ---- traces as text: the run folder's line ------------------------------------------------------
# dumps(encode_spans(spans)), the same text, written from fragments instead of dicts (a Dask task's two spans:
# 27 us of CPU against 60, benchmarks/task_encoding.py's run_folder line): a name and kind, and an attribute of a str,
# int or bool value, are formatted once per value (a task's prefix, state and worker repeat; its key passes
# through the cache); a Dask task span's transitions (dask_spans.TransitionEvents) are written from the
# builder's tuples, their name, start, finish and worker once per (start, finish, worker), without the
# SpanEvents they stand for, as exporter/span_encoding.py writes their protobuf bytes. Everything else
# (an attribute of another type, a link, a status) goes through the dict functions above and dumps.
# Public ReadableSpan properties only.

_text_cache: dict = {}  # id(resource or scope) -> (the object, its JSON text)
_heads: dict = {}  # (name, kind) -> '"name":..,"kind":..'
_kv_text: dict = {}  # (key, value, type of the value) -> '{"key":..,"value":{..}}'
_transition_heads: dict = {}  # (start, finish, worker) -> a transition event's text from its name to its stimulus id
_CACHE_LIMIT = 4096  # entries per cache, then it starts again: values unique to a task pass through, the
# repeated ones come back at once (65,536 entries were up to 15 MB of tasks' keys and stimulus ids: the exporter's
# peak 92 MB against 74 on a 157k-task run)


def memo(cache: dict, key, obj, make, arg, limit: int = 4096):
    """``make(arg)``, kept under ``key`` while ``obj`` (whose id the key holds) is still the one it was made for."""
    hit = cache.get(key)
    if hit is not None and hit[0] is obj:
        return hit[1]
    value = make(arg)
    if len(cache) > limit:
        cache.clear()
    cache[key] = (obj, value)
    return value


def _resource_text(res) -> str:
    return memo(_text_cache, id(res), res, lambda x: dumps(_resource(x)), res, 256)


def _schema_text(obj) -> str:
    url = getattr(obj, "schema_url", None) if obj is not None else None
    return f',"schemaUrl":{dumps(url)}' if url else ""


def _scope_text(scope) -> str:
    return memo(_text_cache, id(scope), scope, lambda x: dumps(_scope(x)), scope, 256)


def _head(name, kind) -> str:
    key = (name, kind)
    text = _heads.get(key)
    if text is None:
        text = f'"name":{dumps(name)},"kind":{kind.value + 1}'
        if len(_heads) >= _CACHE_LIMIT:
            _heads.clear()
        _heads[key] = text
    return text


def _attributes_text(attrs) -> str:
    """dumps(attributes(attrs))."""
    if not attrs:
        return "[]"
    get = _kv_text.get
    parts = []
    for k, v in attrs.items():
        t = type(v)
        if t is str or t is int or t is bool:  # not float: -0.0 == 0.0, and NaN is never found again
            text = get((k, v, t)) or _kv_made(k, v, t)
            if text:
                parts.append(text)
        else:
            parts.append(dumps({"key": k, "value": any_value(v)}))
    return "[" + ",".join(parts) + "]"


def _kv_made(k, v, t) -> str:
    """The text of an attribute of a str, int or bool value, kept in _kv_text ("": an int beyond int64, left out)."""
    if t is int and _beyond_int64(v):
        return ""
    if len(_kv_text) >= _CACHE_LIMIT:
        _kv_text.clear()
    text = _kv_text[(k, v, t)] = dumps({"key": k, "value": any_value(v)})
    return text


def _event_text(e) -> str:
    """dumps() of span(s)'s dict for the event ``e``."""
    dropped = e.dropped_attributes
    return (f'{{"timeUnixNano":"{e.timestamp}","name":{dumps(e.name)},"attributes":{_attributes_text(e.attributes)}'
            + (f',"droppedAttributesCount":{dropped}}}' if dropped else "}"))


def _transitions_text(trans, out: list) -> None:
    """The text of a task span's ``(start, finish, stimulus id, worker, time)`` transitions, each as its SpanEvent
    (dask_spans.TransitionEvents) is written; a value not a str (never from Dask) goes by the SpanEvent."""
    heads = _transition_heads
    for tr in trans:
        start, finish, stim, w, t = tr
        stim = stim or ""
        if type(start) is not str or type(finish) is not str or type(stim) is not str or (w and type(w) is not str):
            out.extend(_event_text(e) for e in TransitionEvents([tr]))
            continue
        w = w or None
        head = heads.get((start, finish, w))
        if head is None:
            head = f',"name":"{TRANSITION}","attributes":{_attributes_text(transition_head(start, finish, w))[:-1]},'
            if len(heads) >= _CACHE_LIMIT:
                heads.clear()
            heads[(start, finish, w)] = head
        last = _kv_text.get((STIMULUS_ID, stim, str)) or _kv_made(STIMULUS_ID, stim, str)
        out.append(f'{{"timeUnixNano":"{int(t * 1e9)}"{head}{last}]}}')


def span_text(s) -> str:
    """dumps(span(s))."""
    ctx = s.context
    parent = s.parent
    p = [f'{{"traceId":"{ctx.trace_id:032x}","spanId":"{ctx.span_id:016x}",{_head(s.name, s.kind)},'
         f'"startTimeUnixNano":"{s.start_time or 0}","endTimeUnixNano":"{s.end_time or 0}",'
         f'"attributes":{_attributes_text(s.attributes)}']
    if parent is not None:
        p.append(f',"parentSpanId":"{parent.span_id:016x}"')
    ts = ctx.trace_state
    if ts:
        p.append(f',"traceState":{dumps(ts.to_header())}')
    events = s.events
    if events:
        texts: list = []
        if type(events) is TransitionEvents:
            _transitions_text(events.trans, texts)
            events = events.tail
        texts.extend([_event_text(e) for e in events])
        p.append(',"events":[' + ",".join(texts) + "]")
    if s.links:  # a few spans (a big computation's groups and batches, a dask.span's calls): the dicts
        p.append(f',"links":{dumps(_links(s.links))}')
    status = s.status
    if status.status_code is not _UNSET or status.description:
        p.append(f',"status":{dumps(_status(status))}')
    for key, n in (("droppedAttributesCount", s.dropped_attributes), ("droppedEventsCount", s.dropped_events),
                   ("droppedLinksCount", s.dropped_links)):
        if n:
            p.append(f',"{key}":{n}')
    p.append(f',"flags":{_flags(parent)}}}')
    return "".join(p)


def encode_spans_text(spans: Sequence) -> str:
    """dumps(encode_spans(spans)), the same JSON (whitespace and key order included)."""
    out = []
    for res, scopes in _group(spans, _span_resource, _span_scope):
        groups = [f'{{"scope":{_scope_text(sc)},"spans":[' + ",".join([span_text(s) for s in items]) + "]"
                  + _schema_text(sc) + "}" for sc, items in scopes]
        out.append(f'{{"resource":{_resource_text(res)},"scopeSpans":[' + ",".join(groups) + "]" + _schema_text(res) + "}")
    return '{"resourceSpans":[' + ",".join(out) + "]}"


# ---- logs --------------------------------------------------------------------------------------

def log_record(readable) -> dict:
    rec = readable.log_record
    out: dict[str, Any] = {
        "timeUnixNano": str(rec.timestamp or 0),
        "observedTimeUnixNano": str(rec.observed_timestamp or rec.timestamp or 0),
    }
    if rec.severity_number is not None:
        out["severityNumber"] = rec.severity_number.value
    if rec.severity_text:
        out["severityText"] = rec.severity_text
    if rec.body is not None:
        out["body"] = any_value(rec.body)
    out["attributes"] = attributes(rec.attributes)
    if rec.trace_id:
        out["traceId"] = f"{rec.trace_id:032x}"
    if rec.span_id:
        out["spanId"] = f"{rec.span_id:016x}"
    if rec.trace_flags:
        out["flags"] = int(rec.trace_flags)
    name = getattr(rec, "event_name", None)
    if name:
        out["eventName"] = name
    return out


def encode_logs(batch: Sequence) -> dict:
    return {
        "resourceLogs": [
            {
                "resource": _resource(res),
                "scopeLogs": [{"scope": _scope(sc), "logRecords": [log_record(r) for r in items]} for sc, items in scopes],
            }
            for res, scopes in _group(batch, lambda r: r.resource, lambda r: r.instrumentation_scope)
        ]
    }


# ---- metrics -----------------------------------------------------------------------------------

def _number_point(p) -> dict:
    out = {
        "attributes": attributes(p.attributes),
        "startTimeUnixNano": str(p.start_time_unix_nano or 0),
        "timeUnixNano": str(p.time_unix_nano),
    }
    if isinstance(p.value, int) and not isinstance(p.value, bool):
        out["asInt"] = str(p.value)
    else:
        out["asDouble"] = _double(float(p.value))
    return out


def _histogram_point(p) -> dict:
    out = {
        "attributes": attributes(p.attributes),
        "startTimeUnixNano": str(p.start_time_unix_nano or 0),
        "timeUnixNano": str(p.time_unix_nano),
        "count": str(p.count),
        "sum": _double(float(p.sum)),
        "bucketCounts": [str(c) for c in p.bucket_counts],
        "explicitBounds": [_double(float(b)) for b in p.explicit_bounds],
    }
    if p.count:
        out["min"] = _double(float(p.min))
        out["max"] = _double(float(p.max))
    return out


def _exp_histogram_point(p) -> dict:
    return {
        "attributes": attributes(p.attributes),
        "startTimeUnixNano": str(p.start_time_unix_nano or 0),
        "timeUnixNano": str(p.time_unix_nano),
        "count": str(p.count),
        "sum": _double(float(p.sum)),
        "scale": p.scale,
        "zeroCount": str(p.zero_count),
        "positive": {"offset": p.positive.offset, "bucketCounts": [str(c) for c in p.positive.bucket_counts]},
        "negative": {"offset": p.negative.offset, "bucketCounts": [str(c) for c in p.negative.bucket_counts]},
        **({"min": _double(float(p.min)), "max": _double(float(p.max))} if p.count else {}),
    }


def metric(m) -> dict:
    from opentelemetry.sdk.metrics.export import ExponentialHistogram, Gauge, Histogram, Sum

    out: dict[str, Any] = {"name": m.name}
    if m.description:
        out["description"] = m.description
    if m.unit:
        out["unit"] = m.unit
    d = m.data
    if isinstance(d, Gauge):
        out["gauge"] = {"dataPoints": [_number_point(p) for p in d.data_points]}
    elif isinstance(d, Sum):
        out["sum"] = {
            "dataPoints": [_number_point(p) for p in d.data_points],
            "aggregationTemporality": int(d.aggregation_temporality),
            "isMonotonic": bool(d.is_monotonic),
        }
    elif isinstance(d, Histogram):
        out["histogram"] = {
            "dataPoints": [_histogram_point(p) for p in d.data_points],
            "aggregationTemporality": int(d.aggregation_temporality),
        }
    elif isinstance(d, ExponentialHistogram):
        out["exponentialHistogram"] = {
            "dataPoints": [_exp_histogram_point(p) for p in d.data_points],
            "aggregationTemporality": int(d.aggregation_temporality),
        }
    return out


def encode_metrics(metrics_data) -> dict:
    return {
        "resourceMetrics": [
            {
                "resource": _resource(rm.resource),
                "scopeMetrics": [
                    {"scope": _scope(sm.scope), "metrics": [metric(m) for m in sm.metrics]}
                    for sm in rm.scope_metrics
                ],
            }
            for rm in metrics_data.resource_metrics
        ]
    }
