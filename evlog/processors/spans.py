"""From OTel spans to Dagger's events: what a span is (category), which thing (id), where (timeline).

Dagger's scheduler calls ``timespan_start(ctx, category, id, timeline)`` and ``timespan_finish`` around
what it does; evlog gets the same two moments from the SDK (a span processor's ``on_start`` and
``on_end``). The mapping, also written down in docs/conventions.md:

- category: ``compute`` for a task execution (``dask.execute {prefix}``, ``futures.task {function}``,
  ``multiprocessing.task {function}``, and their chunk forms ``futures.chunk {function}`` and
  ``multiprocessing.chunk {function}``), ``move`` for a transfer (``dask.transfer``), otherwise the span
  name without its template part (``dask.task {prefix}`` -> ``dask.task``; ``my span`` -> ``my``).
- id: the task key (attribute ``dask.task.key``) where there is one, else the span id (16 hex digits).
- timeline: ``(pid, thread, worker)``: this process, the thread that started or ended the span
  (``threading.get_ident()``), the Dask worker address (span attribute or resource attribute
  ``dask.worker.address``) or None.
- timestamp: the span's start or end time (ns since the epoch, as the SDK records it).
"""
from __future__ import annotations

import threading

COMPUTE = "compute"
MOVE = "move"
COMPUTE_PREFIXES = ("dask.execute", "futures.task", "multiprocessing.task", "futures.chunk", "multiprocessing.chunk")
MOVE_PREFIXES = ("dask.transfer",)
_CACHE_MAX = 4096  # distinct span names remembered; past that the cache is cleared (names are low-cardinality)


class Kind:
    """What a span name stands for: its category, and whether it is a compute or a move."""

    __slots__ = ("category", "compute", "move", "record", "n")

    def __init__(self, category: str, record_all: bool = True):
        self.category = category
        self.compute = category == COMPUTE
        self.move = category == MOVE
        self.record = record_all or self.compute or self.move  # does the default log keep its events
        self.n = 0  # spans of this category open now (kept by the default log, for esat)

    def __repr__(self) -> str:
        return f"Kind({self.category!r})"


def category_of(name: str) -> str:
    """The Dagger category of a span name."""
    if name.startswith(COMPUTE_PREFIXES):
        return COMPUTE
    if name.startswith(MOVE_PREFIXES):
        return MOVE
    return name.split(" ", 1)[0] or name


class Classifier:
    """Span name -> Kind, remembered (one dict lookup per span on the hot path)."""

    __slots__ = ("kinds", "record_all", "_by_category", "_lock")

    def __init__(self, record_all: bool = True):
        self.kinds: dict[str, Kind] = {}
        self.record_all = record_all
        self._by_category: dict[str, Kind] = {}
        self._lock = threading.Lock()

    def classify(self, name: str) -> Kind:
        """The Kind of a span name not seen yet (one Kind object per category, shared)."""
        cat = category_of(name)
        with self._lock:
            kind = self._by_category.get(cat)
            if kind is None:
                if len(self._by_category) >= _CACHE_MAX:  # keep those with open spans: their counts live on
                    self._by_category = {c: k for c, k in self._by_category.items() if k.n}
                kind = self._by_category[cat] = Kind(cat, self.record_all)
            if len(self.kinds) >= _CACHE_MAX:
                self.kinds.clear()
            self.kinds[name] = kind
        return kind

    def categories(self) -> list[Kind]:
        return list(self._by_category.values())


def span_id_hex(span) -> str:
    ctx = span.get_span_context()
    return format(ctx.span_id, "016x") if ctx is not None else ""


def task_id(span, attributes) -> str:
    """Dagger's id: the task key, else the span id."""
    key = attributes.get("dask.task.key") if attributes else None
    return str(key) if key is not None else span_id_hex(span)


def worker_of(span, attributes):
    """The Dask worker address of a span (its attribute, else its resource's), or None."""
    addr = attributes.get("dask.worker.address") if attributes else None
    if addr is None:
        try:
            addr = span.resource.attributes.get("dask.worker.address")
        except Exception:
            addr = None
    return addr

