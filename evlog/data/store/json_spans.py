"""Spans of a run folder kept as their OTLP/JSON line, as `evlog serve` keeps protobuf ones (protobuf.py).

``columns(request)`` reads from one decoded line (``json.loads``) only what the store's columns hold
(ids, name, kind, times, status, task key, prefix, worker, thread, dependencies, state, the number of
events, the scope; the resource of each group), and ``RawJsonTraces`` hands them to the writer with the
line, which is stored once, compressed, in ``requests`` (each span's place in it: ``req``, ``idx``).
otlp_decode makes a span's row dict when its task is looked at, or when the report reads the store.

Decoding every span and event of a big run into row dicts, to write their attributes and events back
as JSON, was most of what `evlog view` spent on a run folder. A line ``columns`` does not find plain
(a value of an unexpected type, a bad id) raises: the reader then decodes it whole, as before, so a
corrupt line is reported with the place and the problem, and anything valid is stored as rows.
"""
from __future__ import annotations

import json
import zlib
from typing import Any

from evlog.data import otlp_decode

from .codec import dumps
from .schema import WHOLE_SPANS

MARK = b"\x00"  # the first byte of a stored JSON request: never the first byte of a protobuf message (tag 0)
_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_CODES = ("UNSET", "OK", "ERROR")
_WANTED = frozenset(("dask.task.key", "dask.task.prefix", "dask.worker.address", "thread.name", "thread.id",
           "dask.task.dependencies", "dask.task.state"))  # what ingest.span_columns reads


class RawJsonTraces:
    """One run-folder line of spans: its groups ``[(resource dict, [span, ...])]`` and its bytes; a span is
    ``(trace id, span id, parent span id, name, kind, start, end, status code, status message, the wanted
    attributes (a dict: ingest.span_columns reads them), events, scope, index in the line, (attributes JSON,
    events JSON) of a span of schema.WHOLE_SPANS, else None)``."""

    __slots__ = ("groups", "body", "n")

    def __init__(self, groups: list, body: bytes, n: int):
        self.groups = groups
        self.body = body
        self.n = n

    def __len__(self) -> int:
        return self.n


def columns(request: Any, line: bytes) -> RawJsonTraces:
    """The store's columns of every span of a decoded OTLP/JSON traces request; raises on anything not plain."""
    groups = []
    whole: list = []  # (its group's spans, its place there, the span) of each span of WHOLE_SPANS
    n = 0
    hex32, hex16, any_value = otlp_decode.hex32, otlp_decode.hex16, otlp_decode.any_value
    share = otlp_decode.shared_strings()
    for rs in request["resourceSpans"]:
        resource = otlp_decode.resource_of(rs, "resourceSpans")
        spans = []
        for ss in rs.get("scopeSpans") or ():
            scope = ss.get("scope")
            scope = scope.get("name", "") if scope else ""
            for sp in ss.get("spans") or ():
                tid, sid, pid = sp["traceId"], sp["spanId"], sp.get("parentSpanId")
                if pid is None:
                    pid = ""
                name = sp.get("name", "")
                kind = sp.get("kind", 0)
                start, end = sp.get("startTimeUnixNano", 0), sp.get("endTimeUnixNano", 0)
                if (type(tid) is not str or len(tid) != 32 or not hex32(tid) or type(sid) is not str or len(sid) != 16
                        or not hex16(sid) or type(pid) is not str or (pid and (len(pid) != 16 or not hex16(pid)))
                        or type(name) is not str or type(kind) is not int or not 0 <= kind <= 5
                        or type(scope) is not str):
                    raise ValueError("not a plain span")
                start, end = int(start) if type(start) is str else start, int(end) if type(end) is str else end
                if type(start) is not int or type(end) is not int or not 0 <= start < 1 << 64 or not 0 <= end < 1 << 64:
                    raise ValueError("not a plain span")
                status = sp.get("status")
                code, message = 0, ""
                if status:
                    code, message = status.get("code", 0), status.get("message", "")
                    if type(code) is not int or not 0 <= code <= 2 or type(message) is not str:
                        raise ValueError("not a plain status")
                found = _attributes(sp.get("attributes"), True)
                events = sp.get("events") or ()
                links = sp.get("links") or ()
                if (events and type(events) is not list) or (links and type(links) is not list):
                    raise ValueError("not a plain span")
                for ln in links:
                    lt, ls = ln.get("traceId"), ln.get("spanId")
                    if type(lt) is not str or len(lt) != 32 or not hex32(lt) or type(ls) is not str or len(ls) != 16 \
                            or not hex16(ls):
                        raise ValueError("not a plain link")
                    _attributes(ln.get("attributes"), False)
                for ev in events:  # checked as otlp_decode would read them later, without building them
                    en, t = ev.get("name", ""), ev.get("timeUnixNano", 0)
                    t = int(t) if type(t) is str else t
                    if type(en) is not str or type(t) is not int or not 0 <= t < 1 << 64:
                        raise ValueError("not a plain event")
                    kvs = ev.get("attributes")
                    if not kvs:
                        if kvs is None or kvs == []:
                            continue
                        raise ValueError("not plain attributes")
                    for kv in kvs:  # _attributes(kvs, False) inline: a run has several events to a span
                        k, v = kv["key"], kv["value"]
                        if type(k) is not str or type(v) is not dict:
                            raise ValueError("not plain attributes")
                        if type(v.get("stringValue")) is not str:
                            any_value(v)  # raises on a bad value
                tid = tid.lower()
                if name.startswith(WHOLE_SPANS):
                    whole.append((spans, len(spans), sp))
                spans.append((share(tid, tid), sid.lower(), pid.lower(), share(name, name), _KINDS[kind], start, end,
                              _CODES[code], message, found, len(events), scope, n, None))
                n += 1
        groups.append((resource, spans))
    if whole:  # (attributes JSON, events JSON) as the store's columns hold a span stored as rows; decoded together
        for (spans, i, _sp), row in zip(whole, rows([sp for _s, _i, sp in whole])):
            a, e = row["attributes"], row["events"]
            spans[i] = spans[i][:-1] + ((dumps(a) if a else "{}", dumps(e) if e else "[]"),)
    return RawJsonTraces(groups, line, n)


def _attributes(kvs: Any, wanted: bool) -> dict:
    """The wanted attributes' values (``wanted``) of a KeyValue list, every value checked as otlp_decode's
    ``_attrs`` reads it; raises on anything else."""
    found: dict = {}
    if not kvs:
        if kvs is None or kvs == []:
            return found
        raise ValueError("not plain attributes")
    any_value = otlp_decode.any_value
    for kv in kvs:
        k, v = kv["key"], kv["value"]
        if type(k) is not str or type(v) is not dict:
            raise ValueError("not plain attributes")
        x = v.get("stringValue")
        if type(x) is not str:
            x = any_value(v)  # raises on a bad value
        if wanted and k in _WANTED:
            found[k] = x
    return found


def pack(line: bytes) -> bytes:
    """A line as the ``requests`` table keeps it."""
    return MARK + zlib.compress(line, 1)


def is_json(body: bytes) -> bool:
    return body[:1] == MARK


def line_of(body: bytes) -> bytes:
    """A stored line as it was read."""
    return zlib.decompress(body[len(MARK):])


def request_of(body: bytes) -> dict:
    """The OTLP/JSON request of a stored line."""
    return json.loads(line_of(body))


def spans_of(body: bytes) -> list:
    """The span dicts of a stored line, in order (what ``idx`` counts)."""
    request = request_of(body)
    return [sp for rs in request.get("resourceSpans") or () for ss in rs.get("scopeSpans") or ()
            for sp in ss.get("spans") or ()]


def rows(spans: list) -> list[dict]:
    """otlp_decode's rows of these span dicts (without resource or scope, as protobuf.Requests gives them)."""
    return otlp_decode.decode_spans({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})
