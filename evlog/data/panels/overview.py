"""The page's header: the stored runs, the summary counts, the workers, processes and topics, and which
line plots there are."""
from __future__ import annotations

from evlog.data.jsonsafe import secs
from evlog.data.store import Store

from .gantt import task_category
from .plots import ALWAYS_PLOTTED, LINE_PLOTS


def runs(store: Store) -> list[dict]:
    """The runs stored, newest first, times in seconds."""
    return [{**r, "start": secs(r["start"]), "end": secs(r["end"])} for r in store.runs()]


def overview(s: Store, run: str | None, whole: Store, source: str) -> dict:
    """``s``: the store as the page sees it (one run, see Store.scoped); ``whole``: the store, whose
    version and runs the page is told."""
    summary = s.summary()
    for k in ("start", "end"):
        summary[k] = secs(summary[k])
    procs = s.processes()
    names = {n for n, _u, _c in s.metric_names()}
    return {
        "source": source, "version": whole.version, "summary": summary,
        "workers": s.lane_workers(task_category(s)[0]),  # each worker once, as the Gantt's lanes name it
        "processes": procs,
        "topics": [{"topic": t, "count": n} for t, n in s.topics()],
        "plots": [{"name": n, "title": t, "unit": u} for i, (n, t, u) in enumerate(LINE_PLOTS)
                  if i < ALWAYS_PLOTTED or n in names],
        "has_metadata": bool(s.named_events("evlog.metadata", limit=1)),
        "run": run, "runs": runs(whole),
    }
