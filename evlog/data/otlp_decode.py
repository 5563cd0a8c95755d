"""OTLP export requests -> flat Python rows (one dict per span, log record or metric point).

Two inputs, one set of rows:

- the OTLP/JSON form (protobuf JSON mapping as OTLP/JSON requires it: lowerCamelCase keys, 64-bit
  integers as strings or numbers, enums as integers or names, trace and span ids as hex strings,
  other bytes as base64). One line of a run folder's ``traces*.jsonl`` / ``logs*.jsonl`` /
  ``metrics*.jsonl`` file is one such request, and so is an OTLP/HTTP JSON body:
  ``decode_spans(d)``, ``decode_logs(d)``, ``decode_metrics(d)``;
- protobuf ``Export{Trace,Logs,Metrics}ServiceRequest`` messages (or their serialized bytes), as
  the receiver gets them over gRPC and OTLP/HTTP protobuf: ``decode_proto(signal, message)``.

Why two decoders for one set of rows: each reads its input directly, and one code path would have to
convert one form into the other first. Measured (benchmarks/_decode_paths.py, 5,000 Dask execute
spans, on a shared 2-core machine): a run folder's JSON line through ``json_format.ParseDict`` then
the protobuf decoder takes 3 to 14 times the JSON decoder's time; a receiver's protobuf body through
``MessageToDict`` then the JSON decoder 3 to 6 times the protobuf decoder's. The JSON decoder also
names the place and the problem in a bad line, where ParseDict would not. So both stay; they build
rows with the same shapes and the same values, and tests/test_receiver.py checks that they agree on
the same request. ``to_otlp_json(message)`` gives the OTLP/JSON dict of a protobuf message
(MessageToDict with hex ids), for files and tests.

Row shapes (the keys are a contract of the read side: the store, the report, the panels):

- span: trace_id, span_id, parent_span_id ("" for a root), name, kind (INTERNAL, SERVER, CLIENT,
  PRODUCER, CONSUMER), start, end (int ns), attributes (dict), events ([{name, time, attributes}]),
  links ([{trace_id, span_id, attributes}]), status_code (UNSET, OK, ERROR), status_message,
  resource (dict), scope (name);
- log: time, observed_time, severity_number, severity_text, event_name, body, attributes,
  trace_id, span_id ("" when absent), resource, scope;
- metric point: name, unit, kind (gauge, sum, histogram, exponential_histogram, summary), time,
  start, attributes, value (gauge, sum), count, sum, min, max (histograms; summary min/max are its
  0 and 1 quantiles), bucket_counts, explicit_bounds (explicit histograms), monotonic (sum),
  temporality ("delta", "cumulative", "unspecified"; None for gauge and summary), resource, scope.
  Keys that do not apply to a kind are None.

Attribute values and log bodies are plain Python values: str, int, float, bool, bytes, None, list,
dict. The ``resource`` dict is shared by all rows of one resource: read it, do not mutate it.

Bad input raises ``DecodeError`` (a ValueError) naming the place and the problem; nothing else.
"""
from __future__ import annotations

import base64
import binascii
import re
from typing import Any

__all__ = [
    "DecodeError",
    "decode_spans",
    "decode_logs",
    "decode_metrics",
    "decode_proto",
    "decode",
    "to_otlp_json",
    "shared_strings",
    "forget",
    "SIGNALS",
]

SIGNALS = ("traces", "logs", "metrics")


class DecodeError(ValueError):
    """An OTLP request that cannot be decoded; the message says where and why."""


_SPAN_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_SPAN_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": "INTERNAL",
    "SPAN_KIND_INTERNAL": "INTERNAL",
    "SPAN_KIND_SERVER": "SERVER",
    "SPAN_KIND_CLIENT": "CLIENT",
    "SPAN_KIND_PRODUCER": "PRODUCER",
    "SPAN_KIND_CONSUMER": "CONSUMER",
}
_STATUS_CODES = ("UNSET", "OK", "ERROR")
_STATUS_NAMES = {"STATUS_CODE_UNSET": "UNSET", "STATUS_CODE_OK": "OK", "STATUS_CODE_ERROR": "ERROR"}
_TEMPORALITIES = ("unspecified", "delta", "cumulative")
_TEMPORALITY_NAMES = {
    "AGGREGATION_TEMPORALITY_UNSPECIFIED": "unspecified",
    "AGGREGATION_TEMPORALITY_DELTA": "delta",
    "AGGREGATION_TEMPORALITY_CUMULATIVE": "cumulative",
}
_SEVERITY_NAMES = {
    "SEVERITY_NUMBER_UNSPECIFIED": 0,
    **{
        f"SEVERITY_NUMBER_{level}{'' if i == 0 else i + 1}": base + i
        for base, level in ((1, "TRACE"), (5, "DEBUG"), (9, "INFO"), (13, "WARN"), (17, "ERROR"), (21, "FATAL"))
        for i in range(4)
    },
}
_METRIC_KINDS = (
    ("gauge", "gauge"),
    ("sum", "sum"),
    ("histogram", "histogram"),
    ("exponentialHistogram", "exponential_histogram"),
    ("summary", "summary"),
)

# Also used by the store (json_spans), which checks a run folder's ids and values as this module reads them.
hex32 = re.compile(r"[0-9a-fA-F]{32}").fullmatch
hex16 = re.compile(r"[0-9a-fA-F]{16}").fullmatch


# ---------------------------------------------------------------------------------------------
# scalar fields of the JSON form


_INT_MIN, _UINT_MAX = -(1 << 63), (1 << 64) - 1  # the 64-bit fields: int64 and uint64 / fixed64


def _int(v: Any, field: str) -> int:
    t = type(v)
    if t is str:
        try:
            v = int(v)
        except ValueError:
            raise DecodeError(f"{field}: not an integer: {v[:40]!r}") from None
    elif t is float and v.is_integer():
        v = int(v)
    elif t is not int:
        raise DecodeError(f"{field}: expected an integer (number or string), got {_tname(v)}")
    if _INT_MIN <= v <= _UINT_MAX:
        return v
    raise DecodeError(f"{field}: {str(v)[:40]} is out of the 64-bit range")


def _float(v: Any, field: str) -> float:
    t = type(v)
    if t is float:
        return v
    if t is int:
        return float(v)
    if t is str:
        try:
            return float(v)  # also "NaN", "Infinity", "-Infinity" as the JSON mapping writes them
        except ValueError:
            raise DecodeError(f"{field}: not a number: {v[:40]!r}") from None
    raise DecodeError(f"{field}: expected a number, got {_tname(v)}")


def _str(v: Any, field: str) -> str:
    if type(v) is str:
        return v
    raise DecodeError(f"{field}: expected a string, got {_tname(v)}")


def _tname(v: Any) -> str:
    if v is None:
        return "null"
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(v), type(v).__name__
    )


def _trace_id(v: Any, field: str, required: bool) -> str:
    if type(v) is str and len(v) == 32 and hex32(v):
        return v.lower()
    if (v is None or v == "") and not required:
        return ""
    raise DecodeError(f"{field}: expected a trace id as 32 hex digits, got {_shown(v)}")


def _span_id(v: Any, field: str, required: bool) -> str:
    if type(v) is str and len(v) == 16 and hex16(v):
        return v.lower()
    if (v is None or v == "") and not required:
        return ""
    raise DecodeError(f"{field}: expected a span id as 16 hex digits, got {_shown(v)}")


def _shown(v: Any) -> str:
    if type(v) is str:
        return repr(v[:48])
    return _tname(v)


def _enum(v: Any, table: tuple, names: dict, field: str) -> str:
    if type(v) is int:
        if 0 <= v < len(table):
            return table[v]
    elif type(v) is str:
        r = names.get(v)
        if r is not None:
            return r
    raise DecodeError(f"{field}: unknown value {_shown(v) if type(v) is str else v!r}")


def _list(obj: dict, key: str, where: str) -> list:
    v = obj.get(key)
    if v is None:
        return []
    if type(v) is not list:
        raise DecodeError(f"{where}.{key}: expected an array, got {_tname(v)}")
    return v


def _obj(v: Any, where: str) -> dict:
    if type(v) is not dict:
        raise DecodeError(f"{where}: expected an object, got {_tname(v)}")
    return v


# ---------------------------------------------------------------------------------------------
# AnyValue and attributes of the JSON form


def any_value(v: Any) -> Any:
    """An OTLP/JSON AnyValue -> a plain Python value (None for an empty AnyValue)."""
    if type(v) is not dict:
        if v is None:
            return None
        raise DecodeError(f"value: expected an AnyValue object, got {_tname(v)}")
    for k, x in v.items():
        if k == "stringValue":
            if type(x) is str:
                return x
            raise DecodeError(f"stringValue: expected a string, got {_tname(x)}")
        if k == "intValue":
            return _int(x, "intValue")
        if k == "doubleValue":
            return _float(x, "doubleValue")
        if k == "boolValue":
            if type(x) is bool:
                return x
            raise DecodeError(f"boolValue: expected true or false, got {_tname(x)}")
        if k == "arrayValue":
            vals = _list(_obj(x, "arrayValue"), "values", "arrayValue")
            return [any_value(e) for e in vals]
        if k == "kvlistValue":
            return _attrs(_obj(x, "kvlistValue").get("values"))
        if k == "bytesValue":
            if type(x) is not str:
                raise DecodeError(f"bytesValue: expected a base64 string, got {_tname(x)}")
            try:  # standard or URL-safe alphabet, padding optional, as the JSON mapping allows
                x = x.replace("-", "+").replace("_", "/")
                return base64.b64decode(x + "=" * (-len(x) % 4), validate=True)
            except (binascii.Error, ValueError):
                raise DecodeError(f"bytesValue: not base64: {x[:40]!r}") from None
        raise DecodeError(f"value: unknown AnyValue field {k!r}")
    return None


def _attrs(kvs: Any) -> dict:
    """A list of OTLP/JSON KeyValue -> dict."""
    if not kvs:
        if kvs is None or kvs == []:
            return {}
        raise DecodeError(f"attributes: expected an array, got {_tname(kvs)}")
    if type(kvs) is not list:
        raise DecodeError(f"attributes: expected an array, got {_tname(kvs)}")
    out = {}
    for kv in kvs:
        if type(kv) is not dict:
            raise DecodeError(f"attributes: expected {{key, value}} objects, got {_tname(kv)}")
        key = kv.get("key", "")
        v = kv.get("value")
        if type(v) is dict:  # fast path: the common string attribute
            s = v.get("stringValue")
            if type(s) is str and type(key) is str:
                out[key] = s
                continue
        if type(key) is not str:
            raise DecodeError(f"attributes: key must be a string, got {_tname(key)}")
        try:
            out[key] = any_value(v)
        except DecodeError as e:
            raise DecodeError(f"attribute {key[:60]!r}: {e}") from None
    return out


def resource_of(container: dict, where: str) -> dict:
    r = container.get("resource")
    if r is None:
        return {}
    return _attrs(_obj(r, f"{where}.resource").get("attributes"))


def _scope(container: dict, where: str) -> str:
    s = container.get("scope")
    if s is None:
        return ""
    return _str(_obj(s, f"{where}.scope").get("name", ""), f"{where}.scope.name")


def _top(request: Any, key: str) -> list:
    if type(request) is not dict:
        raise DecodeError(f"expected an OTLP/JSON request object with {key!r}, got {_tname(request)}")
    v = request.get(key)
    if v is None:
        if request:
            found = ", ".join(sorted(map(str, request))[:5])
            raise DecodeError(f"missing {key!r} (found keys: {found})")
        return []  # the JSON mapping of an empty request
    if type(v) is not list:
        raise DecodeError(f"{key}: expected an array, got {_tname(v)}")
    return v


def _wrap(where: str, e: Exception) -> DecodeError:
    if isinstance(e, DecodeError):
        return DecodeError(f"{where}: {e}")
    return DecodeError(f"{where}: {type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------------------
# JSON form: spans


def _walk(request: Any, top: str, scopes: str, items: str):
    """Yield (item, resource, scope, where) for every item of an OTLP/JSON request, in order;
    a malformed resource or scope raises DecodeError naming where it is."""
    for i, r in enumerate(_top(request, top)):
        where = f"{top}[{i}]"
        r = _obj(r, where)
        try:
            resource = resource_of(r, where)
        except Exception as e:
            raise _wrap(where, e) from None
        for j, sc in enumerate(_list(r, scopes, where)):
            w2 = f"{where}.{scopes}[{j}]"
            sc = _obj(sc, w2)
            scope = _scope(sc, w2)
            for k, item in enumerate(_list(sc, items, w2)):
                yield item, resource, scope, f"{w2}.{items}[{k}]"


def decode_spans(request: Any) -> list[dict]:
    """An OTLP/JSON ExportTraceServiceRequest (``{"resourceSpans": [...]}``) -> span rows."""
    rows: list[dict] = []
    append = rows.append
    if len(_shared) > _SHARED_MAX:
        _shared.clear()
    for i, r in enumerate(_top(request, "resourceSpans")):
        where = f"resourceSpans[{i}]"
        r = _obj(r, where)
        try:
            resource = resource_of(r, where)
        except Exception as e:
            raise _wrap(where, e) from None
        for j, sc in enumerate(_list(r, "scopeSpans", where)):
            w2 = f"{where}.scopeSpans[{j}]"
            sc = _obj(sc, w2)
            scope = _scope(sc, w2)
            for k, sp in enumerate(_list(sc, "spans", w2)):
                try:
                    append(_span_fast(sp, resource, scope))
                except Exception:  # anything not plain (a status, links, a number, a bad value): the full decoder
                    try:
                        append(_span(sp, resource, scope))
                    except Exception as e:
                        raise _wrap(f"{w2}.spans[{k}]", e) from None
    return rows


# The rows of a big run hold the same strings many times (attribute names and values, event names, a
# trace's id in each of its spans): decoded, each would be a string of its own. The fast decoder gives
# equal strings one object (a dask.array run's 178,000 spans and 440,000 span events: 466 MB of rows
# instead of 835 MB); strings are immutable, so rows still share no state a reader could change.
_shared: dict = {}
_SHARED_MAX = 1 << 18  # strings kept for sharing; cleared past it (between requests)


def forget() -> None:
    """Let go of the strings kept for sharing (a reader done with its rows: those it made keep theirs)."""
    _shared.clear()


def shared_strings():
    """``share(s, s)``: ``s``, or the equal string met before (what the fast decoder gives rows), for a
    reader that builds rows of its own (evlog.data.store.rows)."""
    if len(_shared) > _SHARED_MAX:
        _shared.clear()
    return _shared.setdefault


class _NotPlain(Exception):
    """A span the fast decoder leaves to the full one."""


def _span_fast(sp: dict, resource: dict, scope: str) -> dict:
    """``_span``'s row of a span with no status, links or unusual values (the full decoder takes
    the others, and names what is wrong in a malformed one); strings shared through ``_shared``."""
    g = sp.get
    share = _shared.setdefault
    kind = g("kind", 0)
    if type(kind) is not int or not 0 <= kind <= 5 or g("status") or g("links"):
        raise _NotPlain
    name = g("name", "")
    tid = g("traceId")
    sid = g("spanId")
    pid = g("parentSpanId")
    if (type(name) is not str or type(tid) is not str or len(tid) != 32 or not hex32(tid)
            or type(sid) is not str or len(sid) != 16 or not hex16(sid)):
        raise _NotPlain
    if pid:
        if type(pid) is not str or len(pid) != 16 or not hex16(pid):
            raise _NotPlain
        pid = pid.lower()
        pid = share(pid, pid)
    elif pid is None or pid == "":
        pid = ""
    else:
        raise _NotPlain
    start = _uint(g("startTimeUnixNano", 0))
    end = _uint(g("endTimeUnixNano", 0))
    events = g("events")
    if events:
        out = []
        for ev in events:
            en = ev.get("name", "")
            t = _uint(ev.get("timeUnixNano", 0))
            if type(en) is not str:
                raise _NotPlain
            a = ev.get("attributes")
            out.append({"name": share(en, en), "time": t, "attributes": _attrs_fast(a, share) if a else _attrs(a)})
        events = out
    elif events is None or events == []:
        events = []
    else:
        raise _NotPlain
    a = g("attributes")
    tid = tid.lower()
    return {
        "trace_id": share(tid, tid),
        "span_id": sid.lower(),
        "parent_span_id": pid,
        "name": share(name, name),
        "kind": _SPAN_KINDS[kind],
        "start": start,
        "end": end,
        "attributes": _attrs_fast(a, share) if a else _attrs(a),
        "events": events,
        "links": [],
        "status_code": "UNSET",
        "status_message": "",
        "resource": resource,
        "scope": scope,
    }


def _uint(v: Any) -> int:
    """``_int(v)`` of a time (a string of digits or an int, in the uint64 range); raises on anything else."""
    if type(v) is str:
        v = int(v)
    elif type(v) is not int:
        raise _NotPlain
    if 0 <= v <= _UINT_MAX:
        return v
    raise _NotPlain


def _attrs_fast(kvs: list, share) -> dict:
    """``_attrs(kvs)`` with its strings shared; raises (for the full decoder) on anything unusual."""
    out = {}
    for kv in kvs:
        key = kv["key"]
        v = kv["value"]
        s = v.get("stringValue")
        if type(key) is not str:
            raise _NotPlain
        if type(s) is str:
            out[share(key, key)] = share(s, s)
        else:
            out[share(key, key)] = any_value(v)
    return out


def _span(sp: Any, resource: dict, scope: str) -> dict:
    if type(sp) is not dict:
        raise DecodeError(f"expected a span object, got {_tname(sp)}")
    g = sp.get
    kind = g("kind", 0)
    if type(kind) is int and 0 <= kind <= 5:
        kind = _SPAN_KINDS[kind]
    else:
        kind = _enum(kind, _SPAN_KINDS, _SPAN_KIND_NAMES, "kind")
    status = g("status")
    if status:
        status = _obj(status, "status")
        code = status.get("code", 0)
        code = _STATUS_CODES[code] if type(code) is int and 0 <= code <= 2 else _enum(
            code, _STATUS_CODES, _STATUS_NAMES, "status.code")
        message = _str(status.get("message", ""), "status.message")
    else:
        code, message = "UNSET", ""
    events = g("events")
    if events:
        if type(events) is not list:
            raise DecodeError(f"events: expected an array, got {_tname(events)}")
        events = [
            {
                "name": _str(ev.get("name", ""), "events.name"),
                "time": _int(ev.get("timeUnixNano", 0), "events.timeUnixNano"),
                "attributes": _attrs(ev.get("attributes")),
            }
            for ev in map(_event_obj, events)
        ]
    else:
        events = []
    links = g("links")
    if links:
        if type(links) is not list:
            raise DecodeError(f"links: expected an array, got {_tname(links)}")
        links = [
            {
                "trace_id": _trace_id(ln.get("traceId"), "links.traceId", True),
                "span_id": _span_id(ln.get("spanId"), "links.spanId", True),
                "attributes": _attrs(ln.get("attributes")),
            }
            for ln in map(_link_obj, links)
        ]
    else:
        links = []
    name = g("name", "")
    if type(name) is not str:
        raise DecodeError(f"name: expected a string, got {_tname(name)}")
    return {
        "trace_id": _trace_id(g("traceId"), "traceId", True),
        "span_id": _span_id(g("spanId"), "spanId", True),
        "parent_span_id": _span_id(g("parentSpanId"), "parentSpanId", False),
        "name": name,
        "kind": kind,
        "start": _int(g("startTimeUnixNano", 0), "startTimeUnixNano"),
        "end": _int(g("endTimeUnixNano", 0), "endTimeUnixNano"),
        "attributes": _attrs(g("attributes")),
        "events": events,
        "links": links,
        "status_code": code,
        "status_message": message,
        "resource": resource,
        "scope": scope,
    }


def _event_obj(v: Any) -> dict:
    return _obj(v, "events[]")


def _link_obj(v: Any) -> dict:
    return _obj(v, "links[]")


# ---------------------------------------------------------------------------------------------
# JSON form: logs


def decode_logs(request: Any) -> list[dict]:
    """An OTLP/JSON ExportLogsServiceRequest (``{"resourceLogs": [...]}``) -> log rows."""
    rows: list[dict] = []
    for lr, resource, scope, where in _walk(request, "resourceLogs", "scopeLogs", "logRecords"):
        try:
            rows.append(_log(lr, resource, scope))
        except Exception as e:
            raise _wrap(where, e) from None
    return rows


def _log(lr: Any, resource: dict, scope: str) -> dict:
    if type(lr) is not dict:
        raise DecodeError(f"expected a log record object, got {_tname(lr)}")
    g = lr.get
    sev = g("severityNumber", 0)
    if type(sev) is not int or not -(1 << 31) <= sev < (1 << 31):  # an enum: int32
        if type(sev) is str and sev in _SEVERITY_NAMES:
            sev = _SEVERITY_NAMES[sev]
        else:
            raise DecodeError(f"severityNumber: unknown value {_shown(sev) if type(sev) is not int else sev}")
    return {
        "time": _int(g("timeUnixNano", 0), "timeUnixNano"),
        "observed_time": _int(g("observedTimeUnixNano", 0), "observedTimeUnixNano"),
        "severity_number": sev,
        "severity_text": _str(g("severityText", ""), "severityText"),
        "event_name": _str(g("eventName", ""), "eventName"),
        "body": any_value(g("body")),
        "attributes": _attrs(g("attributes")),
        "trace_id": _trace_id(g("traceId"), "traceId", False),
        "span_id": _span_id(g("spanId"), "spanId", False),
        "resource": resource,
        "scope": scope,
    }


# ---------------------------------------------------------------------------------------------
# JSON form: metrics


def decode_metrics(request: Any) -> list[dict]:
    """An OTLP/JSON ExportMetricsServiceRequest (``{"resourceMetrics": [...]}``) -> point rows."""
    rows: list[dict] = []
    for m, resource, scope, where in _walk(request, "resourceMetrics", "scopeMetrics", "metrics"):
        try:
            _metric(m, resource, scope, rows)
        except Exception as e:
            raise _wrap(where, e) from None
    return rows


def _metric(m: Any, resource: dict, scope: str, rows: list) -> None:
    if type(m) is not dict:
        raise DecodeError(f"expected a metric object, got {_tname(m)}")
    name = _str(m.get("name", ""), "name")
    unit = _str(m.get("unit", ""), "unit")
    for key, kind in _METRIC_KINDS:  # noqa: B007 (the pair found is used after the loop)
        data = m.get(key)
        if data is not None:
            break
    else:
        return  # no data (e.g. metadata only): no points
    data = _obj(data, key)
    monotonic = temporality = None
    if kind != "gauge" and kind != "summary":
        t = data.get("aggregationTemporality", 0)
        temporality = _enum(t, _TEMPORALITIES, _TEMPORALITY_NAMES, f"{key}.aggregationTemporality")
    if kind == "sum":
        monotonic = data.get("isMonotonic", False)
        if type(monotonic) is not bool:
            raise DecodeError(f"sum.isMonotonic: expected true or false, got {_tname(monotonic)}")
    for n, dp in enumerate(_list(data, "dataPoints", key)):
        if type(dp) is not dict:
            raise DecodeError(f"{name!r} {key}.dataPoints[{n}]: expected an object, got {_tname(dp)}")
        g = dp.get
        value = count = total = lo = hi = buckets = bounds = None
        try:
            if kind == "gauge" or kind == "sum":
                if "asDouble" in dp:
                    value = _float(dp["asDouble"], "asDouble")
                elif "asInt" in dp:
                    value = _int(dp["asInt"], "asInt")
            else:
                count = _int(g("count", 0), "count")
                total = g("sum")
                if total is not None:
                    total = _float(total, "sum")
                elif kind == "summary":  # a plain double there, not optional: absent means 0
                    total = 0.0
                if kind == "summary":
                    for q in _list(dp, "quantileValues", "summary"):
                        q = _obj(q, "quantileValues[]")
                        qq = _float(q.get("quantile", 0), "quantile")
                        if qq == 0.0:
                            lo = _float(q.get("value", 0), "quantileValues.value")
                        elif qq == 1.0:
                            hi = _float(q.get("value", 0), "quantileValues.value")
                else:
                    lo = g("min")
                    lo = None if lo is None else _float(lo, "min")
                    hi = g("max")
                    hi = None if hi is None else _float(hi, "max")
                    if kind == "histogram":
                        buckets = [_int(c, "bucketCounts") for c in _list(dp, "bucketCounts", "histogram")]
                        bounds = [_float(b, "explicitBounds") for b in _list(dp, "explicitBounds", "histogram")]
            row = {
                "name": name,
                "unit": unit,
                "kind": kind,
                "time": _int(g("timeUnixNano", 0), "timeUnixNano"),
                "start": _int(g("startTimeUnixNano", 0), "startTimeUnixNano"),
                "attributes": _attrs(g("attributes")),
                "value": value,
                "count": count,
                "sum": total,
                "min": lo,
                "max": hi,
                "bucket_counts": buckets,
                "explicit_bounds": bounds,
                "monotonic": monotonic,
                "temporality": temporality,
                "resource": resource,
                "scope": scope,
            }
        except DecodeError as e:
            raise DecodeError(f"{name!r} {key}.dataPoints[{n}]: {e}") from None
        rows.append(row)


_JSON_DECODERS = {"traces": decode_spans, "logs": decode_logs, "metrics": decode_metrics}


def decode(signal: str, request: Any) -> list[dict]:
    """Decode an OTLP/JSON request dict of ``signal`` ("traces", "logs" or "metrics")."""
    try:
        fn = _JSON_DECODERS[signal]
    except (KeyError, TypeError):
        raise DecodeError(f"unknown signal {signal!r} (expected traces, logs or metrics)") from None
    return fn(request)


# ---------------------------------------------------------------------------------------------
# protobuf form


def _pb_classes() -> dict:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return {
        "traces": trace_service_pb2.ExportTraceServiceRequest,
        "logs": logs_service_pb2.ExportLogsServiceRequest,
        "metrics": metrics_service_pb2.ExportMetricsServiceRequest,
    }


_PB: dict | None = None


def request_class(signal: str) -> type:
    """The protobuf Export*ServiceRequest class of ``signal``."""
    global _PB
    if _PB is None:
        _PB = _pb_classes()
    try:
        return _PB[signal]
    except (KeyError, TypeError):
        raise DecodeError(f"unknown signal {signal!r} (expected traces, logs or metrics)") from None


def decode_proto(signal: str, message: Any) -> list[dict]:
    """A protobuf Export*ServiceRequest of ``signal`` (or its serialized bytes) -> rows."""
    cls = request_class(signal)
    if isinstance(message, (bytes, bytearray, memoryview)):
        try:
            message = cls.FromString(bytes(message))
        except Exception as e:  # google.protobuf.message.DecodeError and friends
            raise DecodeError(f"malformed protobuf {cls.__name__}: {e or type(e).__name__}") from None
    elif not isinstance(message, cls):
        raise DecodeError(f"{signal}: expected a {cls.__name__}, got {type(message).__name__}")
    try:
        if signal == "traces":
            return _pb_spans(message)
        if signal == "logs":
            return _pb_logs(message)
        return _pb_metrics(message)
    except DecodeError:
        raise
    except Exception as e:  # defensive: decoding must only ever raise DecodeError
        raise DecodeError(f"{signal}: {type(e).__name__}: {e}") from None


def pb_any_value(v: Any) -> Any:
    k = v.WhichOneof("value")
    if k == "string_value":
        return v.string_value
    if k is None:
        return None
    if k == "int_value":
        return v.int_value
    if k == "double_value":
        return v.double_value
    if k == "bool_value":
        return v.bool_value
    if k == "array_value":
        return [pb_any_value(e) for e in v.array_value.values]
    if k == "kvlist_value":
        return {kv.key: pb_any_value(kv.value) for kv in v.kvlist_value.values}
    if k == "bytes_value":
        return bytes(v.bytes_value)
    raise DecodeError(f"value: unknown AnyValue field {k!r}")


def _pb_attrs(kvs: Any) -> dict:
    if not kvs:
        return {}
    return {kv.key: pb_any_value(kv.value) for kv in kvs}


def _pb_id(b: bytes, n: int, field: str, required: bool) -> str:
    if len(b) == n:
        return b.hex()
    if not b and not required:
        return ""
    raise DecodeError(f"{field}: expected {n} bytes, got {len(b)}")


def _pb_spans(req: Any) -> list[dict]:
    rows: list[dict] = []
    append = rows.append
    kinds = _SPAN_KINDS
    for i, rs in enumerate(req.resource_spans):
        resource = _pb_attrs(rs.resource.attributes)
        for j, ss in enumerate(rs.scope_spans):
            scope = ss.scope.name
            for k, sp in enumerate(ss.spans):
                try:
                    tid = sp.trace_id
                    sid = sp.span_id
                    pid = sp.parent_span_id
                    kind = sp.kind
                    code = sp.status.code
                    append({
                        "trace_id": tid.hex() if len(tid) == 16 else _pb_id(tid, 16, "traceId", True),
                        "span_id": sid.hex() if len(sid) == 8 else _pb_id(sid, 8, "spanId", True),
                        "parent_span_id": pid.hex() if len(pid) == 8 else _pb_id(pid, 8, "parentSpanId", False),
                        "name": sp.name,
                        "kind": kinds[kind] if 0 <= kind <= 5 else _enum(kind, kinds, {}, "kind"),
                        "start": sp.start_time_unix_nano,
                        "end": sp.end_time_unix_nano,
                        "attributes": _pb_attrs(sp.attributes),
                        "events": [
                            {"name": ev.name, "time": ev.time_unix_nano, "attributes": _pb_attrs(ev.attributes)}
                            for ev in sp.events
                        ],
                        "links": [
                            {
                                "trace_id": _pb_id(ln.trace_id, 16, "links.traceId", True),
                                "span_id": _pb_id(ln.span_id, 8, "links.spanId", True),
                                "attributes": _pb_attrs(ln.attributes),
                            }
                            for ln in sp.links
                        ],
                        "status_code": _STATUS_CODES[code] if 0 <= code <= 2 else _enum(
                            code, _STATUS_CODES, {}, "status.code"),
                        "status_message": sp.status.message,
                        "resource": resource,
                        "scope": scope,
                    })
                except DecodeError as e:
                    raise DecodeError(f"resourceSpans[{i}].scopeSpans[{j}].spans[{k}]: {e}") from None
    return rows


def _pb_logs(req: Any) -> list[dict]:
    rows: list[dict] = []
    append = rows.append
    for i, rl in enumerate(req.resource_logs):
        resource = _pb_attrs(rl.resource.attributes)
        for j, sl in enumerate(rl.scope_logs):
            scope = sl.scope.name
            for k, lr in enumerate(sl.log_records):
                try:
                    append({
                        "time": lr.time_unix_nano,
                        "observed_time": lr.observed_time_unix_nano,
                        "severity_number": lr.severity_number,
                        "severity_text": lr.severity_text,
                        "event_name": lr.event_name,
                        "body": pb_any_value(lr.body) if lr.HasField("body") else None,
                        "attributes": _pb_attrs(lr.attributes),
                        "trace_id": _pb_id(lr.trace_id, 16, "traceId", False),
                        "span_id": _pb_id(lr.span_id, 8, "spanId", False),
                        "resource": resource,
                        "scope": scope,
                    })
                except DecodeError as e:
                    raise DecodeError(f"resourceLogs[{i}].scopeLogs[{j}].logRecords[{k}]: {e}") from None
    return rows


def _pb_metrics(req: Any) -> list[dict]:
    rows: list[dict] = []
    append = rows.append
    for rm in req.resource_metrics:
        resource = _pb_attrs(rm.resource.attributes)
        for sm in rm.scope_metrics:
            scope = sm.scope.name
            for m in sm.metrics:
                which = m.WhichOneof("data")
                if which is None:
                    continue
                data = getattr(m, which)
                monotonic = temporality = None
                if which == "sum":
                    monotonic = data.is_monotonic
                if which != "gauge" and which != "summary":
                    t = data.aggregation_temporality
                    temporality = _TEMPORALITIES[t] if 0 <= t <= 2 else _enum(
                        t, _TEMPORALITIES, {}, f"{m.name!r} aggregationTemporality")
                for dp in data.data_points:
                    value = count = total = lo = hi = buckets = bounds = None
                    if which == "gauge" or which == "sum":
                        vk = dp.WhichOneof("value")
                        if vk is not None:
                            value = getattr(dp, vk)
                    else:
                        count = dp.count
                        if which == "summary":
                            total = dp.sum
                            for q in dp.quantile_values:
                                if q.quantile == 0.0:
                                    lo = q.value
                                elif q.quantile == 1.0:
                                    hi = q.value
                        else:
                            total = dp.sum if dp.HasField("sum") else None
                            lo = dp.min if dp.HasField("min") else None
                            hi = dp.max if dp.HasField("max") else None
                            if which == "histogram":
                                buckets = list(dp.bucket_counts)
                                bounds = list(dp.explicit_bounds)
                    append({
                        "name": m.name,
                        "unit": m.unit,
                        "kind": "exponential_histogram" if which == "exponential_histogram" else which,
                        "time": dp.time_unix_nano,
                        "start": dp.start_time_unix_nano,
                        "attributes": _pb_attrs(dp.attributes),
                        "value": value,
                        "count": count,
                        "sum": total,
                        "min": lo,
                        "max": hi,
                        "bucket_counts": buckets,
                        "explicit_bounds": bounds,
                        "monotonic": monotonic,
                        "temporality": temporality,
                        "resource": resource,
                        "scope": scope,
                    })
    return rows


# ---------------------------------------------------------------------------------------------
# protobuf -> OTLP/JSON


def to_otlp_json(message: Any) -> dict:
    """The OTLP/JSON dict of a protobuf Export*ServiceRequest: MessageToDict with integer enums
    and trace/span ids re-encoded from base64 to hex, as OTLP/JSON requires. Slow; not for hot paths."""
    from google.protobuf.json_format import MessageToDict

    d = MessageToDict(message, use_integers_for_enums=True)
    for rs in d.get("resourceSpans", ()):
        for ss in rs.get("scopeSpans", ()):
            for sp in ss.get("spans", ()):
                _hexify(sp, ("traceId", "spanId", "parentSpanId"))
                for ln in sp.get("links", ()):
                    _hexify(ln, ("traceId", "spanId"))
    for rl in d.get("resourceLogs", ()):
        for sl in rl.get("scopeLogs", ()):
            for lr in sl.get("logRecords", ()):
                _hexify(lr, ("traceId", "spanId"))
    for rm in d.get("resourceMetrics", ()):
        for sm in rm.get("scopeMetrics", ()):
            for m in sm.get("metrics", ()):
                for key, kind in _METRIC_KINDS:  # noqa: B007 (the pair found is used after the loop)
                    for dp in m.get(key, {}).get("dataPoints", ()):
                        for ex in dp.get("exemplars", ()):
                            _hexify(ex, ("traceId", "spanId"))
    return d


def _hexify(obj: dict, keys: tuple) -> None:
    for k in keys:
        v = obj.get(k)
        if v:
            obj[k] = base64.b64decode(v).hex()
