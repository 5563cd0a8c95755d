"""One task's panel: its spans, its story (transitions across processes) and the events inside it."""
from __future__ import annotations

from evlog.data.exception_text import split_exception
from evlog.data.jsonsafe import finite
from evlog.data.store import Store


def task_detail(store: Store, key: str | None = None, row_id: int | None = None) -> dict:
    span = None
    if row_id is not None:
        span = store.span_by_id(row_id)
        if span is None:
            return {"found": False, "error": f"no span {row_id}"}
        key = span["task_key"] or None
    spans = store.task_spans(key=key) if key is not None else ([span] if span else [])
    if not spans:
        return {"found": False, "error": f"no task {key!r}"}
    story = store.story(key) if key is not None else [
        {"time": e.get("time", 0), "event": e.get("name", ""), "start": None, "finish": None, "stimulus": None,
         "worker": spans[0]["worker"], "process": spans[0]["process"], "span": spans[0]["name"]}
        for e in spans[0]["events"]]
    logs = store.span_logs([s["span_id"] for s in spans], key=key)
    for s in spans:
        s["exceptions"] = span_exceptions(s)
        s.pop("events", None)
        s["start"] /= 1e9
        s["end"] /= 1e9
    for e in story:
        e["time"] /= 1e9
    for e in logs:
        e["time"] /= 1e9
    return finite({"found": True, "key": key, "spans": spans, "story": story, "events": logs})


def span_exceptions(span: dict) -> list[dict]:
    """The span's ``exception`` events as {type, message, stacktrace} (the type from the event, else
    from the text, as `evlog report` splits it), for the task story."""
    out = []
    for ev in span.get("events") or ():
        if ev.get("name") != "exception":
            continue
        a = ev.get("attributes") or {}
        etype, msg = split_exception(str(a.get("exception.message") or span.get("status_message") or ""))
        out.append({"type": str(a.get("exception.type") or etype), "message": msg,
                    "stacktrace": str(a.get("exception.stacktrace") or ""), "time": (ev.get("time") or 0) / 1e9})
    return out
