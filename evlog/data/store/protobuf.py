"""Spans kept as their protobuf request: ``decode_for_store`` (the receiver's decoder under `evlog serve`)
checks a request and hands it on whole (RawTraces); ``Requests`` parses stored requests back when a
task is looked at, into otlp_decode's row dicts."""
from __future__ import annotations

import sqlite3
import threading
from typing import Any

from evlog.data import otlp_decode

from . import json_spans
from .codec import dumps


class RawTraces:
    """A parsed ExportTraceServiceRequest and its bytes, handed to the store as is (see decode_for_store)."""

    __slots__ = ("message", "body", "n")

    def __init__(self, message: Any, body: bytes, n: int):
        self.message = message
        self.body = body
        self.n = n

    def __len__(self) -> int:
        return self.n


def decode_for_store(signal: str, body: Any) -> Any:
    """The receiver's protobuf decoder for `evlog serve`: traces are parsed and checked here (so a
    malformed request still gets INVALID_ARGUMENT / 400 with decode_proto's message) and handed on
    as RawTraces; logs and metrics become rows as usual."""
    if signal != "traces":
        return otlp_decode.decode_proto(signal, body)
    cls = otlp_decode.request_class(signal)
    if isinstance(body, cls):
        message, body = body, body.SerializeToString()
    else:
        body = bytes(body)
        try:
            message = cls.FromString(body)
        except Exception:
            return otlp_decode.decode_proto(signal, body)  # raises DecodeError saying why
    n = 0
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if (len(sp.trace_id) != 16 or len(sp.span_id) != 8 or len(sp.parent_span_id) not in (0, 8)
                        or not 0 <= sp.kind <= 5 or not 0 <= sp.status.code <= 2):
                    otlp_decode.decode_proto(signal, message)  # raises DecodeError naming the span
                    raise otlp_decode.DecodeError(f"resourceSpans: malformed span {sp.name[:60]!r}")
                n += 1
    return RawTraces(message, body, n)


def whole(span: Any) -> tuple[str, str]:
    """(attributes JSON, events JSON) of one protobuf span, as the store's columns hold a span stored as rows
    (schema.WHOLE_SPANS)."""
    req = otlp_decode.request_class("traces")()
    req.resource_spans.add().scope_spans.add().spans.append(span)
    row = otlp_decode.decode_proto("traces", req)[0]
    return dumps(row["attributes"]) if row["attributes"] else "{}", dumps(row["events"]) if row["events"] else "[]"


class Requests:
    """Stored protobuf requests, parsed on demand (a few kept: clicks tend to stay in one batch)."""

    def __init__(self, size: int = 8):
        self.size = size
        self._cache: dict[int, list] = {}
        self._lock = threading.Lock()

    def spans(self, conn: sqlite3.Connection, req: int) -> list:
        with self._lock:
            got = self._cache.get(req)
        if got is not None:
            return got
        row = conn.execute("SELECT body FROM requests WHERE id = ?", (req,)).fetchone()
        body = row[0] if row else b""
        if json_spans.is_json(body):  # a run folder's line (json_spans): span dicts
            got = json_spans.spans_of(body)
        else:
            msg = otlp_decode.request_class("traces").FromString(body)
            got = [sp for rs in msg.resource_spans for ss in rs.scope_spans for sp in ss.spans]
        with self._lock:
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[req] = got
        return got

    def rows(self, conn: sqlite3.Connection, places: list[tuple[int, int]]) -> list[dict]:
        """Row dicts (otlp_decode's) of the spans at these (request, index) places, in order."""
        if not places:
            return []
        req = otlp_decode.request_class("traces")()
        out = req.resource_spans.add().scope_spans.add().spans
        dicts: list = []  # spans of run-folder lines, and where they go among the rows
        at: list = []
        for n, (r, i) in enumerate(places):
            sp = self.spans(conn, r)[i]
            if type(sp) is dict:
                dicts.append(sp)
                at.append(n)
            else:
                out.append(sp)
        if not dicts:
            return otlp_decode.decode_proto("traces", req)
        rows = otlp_decode.decode_proto("traces", req) if len(out) else []
        for n, row in zip(at, json_spans.rows(dicts)):
            rows.insert(n, row)
        return rows

