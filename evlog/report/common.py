"""Small helpers the report's parts share: units, process labels (interval merging: evlog.data.intervals)."""
from __future__ import annotations

NS = 1_000_000_000
STRAGGLER_RATIO = 5.0  # slower than this many times the median of its prefix ...
STRAGGLER_MIN_S = 0.1  # ... and than this
STRAGGLER_MIN_COUNT = 5  # a prefix needs this many tasks for a median to mean something
MAX_LISTED = 20  # stragglers and failures with their story, per computation
MAX_STORY = 200  # entries of one story


def secs(ns: int | None) -> float | None:
    return None if ns is None else round(ns / NS, 6)


def dur(ns: int | float) -> float:
    return round(ns / NS, 6)


def pct(x: float) -> str:
    return f"{round(100 * x):d}%"


def ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def label(resource: dict) -> str:
    """A process's label, as the store (evlog.data.store) names it: worker address, else service role pid@host."""
    w = resource.get("dask.worker.address")
    if w:
        return str(w)
    return process_name(resource)


def process_name(resource: dict) -> str:
    """service role pid@host, a Dask worker's too (stories: the worker has its own column)."""
    service, role, host = (str(resource.get(k) or "") for k in ("service.name", "dask.role", "host.name"))
    pid = resource.get("process.pid")
    return " ".join(x for x in (service, role if role and role not in service else "",
                                f"{pid}@{host}" if pid else host) if x) or "unknown"
