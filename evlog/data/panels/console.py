"""The console panel: the captured streams per process, and the newest lines matching a search."""
from __future__ import annotations

from evlog.data.jsonsafe import finite
from evlog.data.store import Store


def console(st: Store, q: str, stream: str | None, pid: int | None, limit: int) -> dict:
    """Lines containing ``q`` of one stream and process if given (``limit`` newest), with how many matched."""
    rows, total = st.console(q, stream, pid, limit)
    return finite({
        "streams": [{"process": label or "", "process_id": p, "stream": name, "lines": n}
                    for label, p, name, n in st.console_streams()],
        "lines": [{"time": r["time"] / 1e9, "body": r["body"], "stream": r["attributes"].get("log.iostream"),
                   "process": r["process"], "repeated": r["attributes"].get("evlog.console.repeated"),
                   "dropped": r["attributes"].get("evlog.console.dropped")} for r in rows],
        "matched": total, "shown": len(rows)})
