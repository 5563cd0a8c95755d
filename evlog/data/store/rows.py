"""A whole store back as otlp_decode's rows (spans and event log records), for `evlog report`'s analysis."""
from __future__ import annotations

import json

from evlog.data import otlp_decode, span_lines

from . import json_spans


def store_rows(store) -> tuple[list, list]:
    """(spans, logs) of an open Store, as otlp_decode rows: spans stored as their protobuf request are
    decoded request by request, a run folder's lines as `evlog report` reads them (span_lines' records, read
    as dicts are), the others from their JSON columns. `evlog report --db` and the
    dashboard's report panel read a store through this."""
    conn = store.reader()
    resources = {pid: json.loads(r or "{}") for pid, r in conn.execute("SELECT id, resource FROM processes")}
    spans: list = []
    for (body,) in conn.execute("SELECT body FROM requests ORDER BY id"):
        if json_spans.is_json(body):  # a run folder's line, as `evlog view` stores it: rows as `evlog report` reads it
            line = json_spans.line_of(body)
            try:
                spans.extend(span_lines.rows(line))
            except Exception:  # not plain (stored as it was read): the full decoder reads it
                spans.extend(otlp_decode.decode_spans(json.loads(line)))
        else:
            spans.extend(otlp_decode.decode_proto("traces", body))
    span_lines.forget()
    run = getattr(store, "run", None)  # a store scoped to one run (Store.scoped): its requests' spans only
    if run is not None:
        spans = [s for s in spans if str(s["resource"].get("evlog.run.id", "")) == run]
    share = otlp_decode.shared_strings()
    for (tid, sid, psid, name, kind, start, end, code, msg, attrs, events, links, proc,
         scope) in conn.execute(
            "SELECT trace_id, span_id, parent_span_id, name, kind, start, end, status_code, status_message, "
            "attributes, events, links, process, scope FROM spans WHERE req IS NULL ORDER BY id"):
        evs = json.loads(events) if events and events != "[]" else []
        for ev in evs:  # a run's events repeat their names and values: one object each (otlp_decode's sharing)
            a = ev.get("attributes")
            if a:
                ev["attributes"] = {share(k, k): share(v, v) if type(v) is str else v for k, v in a.items()}
            n = ev.get("name")
            if type(n) is str:
                ev["name"] = share(n, n)
        spans.append({"trace_id": share(tid, tid), "span_id": sid, "parent_span_id": share(psid, psid) if psid else "",
                      "name": share(name, name), "kind": kind, "start": start, "end": end,
                      "attributes": _shared_attrs(attrs, share), "events": evs,
                      "links": json.loads(links) if links and links != "[]" else [],
                      "status_code": code, "status_message": msg or "", "resource": resources.get(proc, {}),
                      "scope": scope or ""})
    logs = [{"time": t, "observed_time": ot, "event_name": name, "body": None if body is None else json.loads(body),
             "attributes": json.loads(attrs or "{}"), "resource": resources.get(proc, {})}
            for t, ot, name, body, attrs, proc in conn.execute(
                "SELECT time, observed_time, event_name, body, attributes, process FROM logs "
                "WHERE event_name != '' ORDER BY time, id")]
    otlp_decode.forget()  # the rows keep their strings; a server making a report now and then keeps none between
    return spans, logs


def _shared_attrs(text: str | None, share) -> dict:
    if not text or text == "{}":
        return {}
    return {share(k, k): share(v, v) if type(v) is str else v for k, v in json.loads(text).items()}


def store_points(store, names) -> list:
    """The metric points of these metric names in an open Store, as otlp_decode rows (name, unit, time, start,
    attributes, value, resource), in time order: what `evlog report --db` and the report panel read of them."""
    conn = store.reader()
    resources = {pid: json.loads(r or "{}") for pid, r in conn.execute("SELECT id, resource FROM processes")}
    names = list(names)
    marks = ",".join("?" * len(names))
    return [{"name": name, "unit": unit or "", "time": t, "start": start, "value": value,
             "attributes": json.loads(attrs or "{}"), "resource": resources.get(proc, {})}
            for name, unit, t, start, value, attrs, proc in conn.execute(
                "SELECT name, unit, time, start, value, attributes, process FROM points "
                f"WHERE name IN ({marks}) ORDER BY time, id", names)] if names else []
