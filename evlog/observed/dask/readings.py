"""Dask's own vocabulary, read on the scheduler: the spans its users name with ``distributed.span`` and
its fine performance metrics.

Dask measures where its workers' time goes anyway: every worker sums, per task prefix, activity and
Dask span, how long ``execute`` spent on the CPU, off it, (de)serializing, on disk, ..., and the same
for ``gather-dep`` and ``get-data``, and sends the sums with its heartbeats; the scheduler adds them up
in ``Scheduler.cumulative_worker_metrics`` and in each ``Span`` of its span tree
(``scheduler.extensions["spans"]``). ``Readings`` copies plain numbers out of both, on the scheduler's
event loop (where Dask changes them, so a reading is consistent), every INTERVAL seconds from the first
graph on and once more when the scheduler closes, and records what changed since the last reading for
the run's exporter process (kind ``dask.readings``: evlog/wire/dask.py), where
evlog/builders/dask_readings.py makes the ``dask.span`` spans and the ``dask.worker.*`` metrics.
Nothing runs per task, and no Dask object is kept between readings: only ids, names and numbers.

A graph that brings a new Dask span also gets the span announced in the transitions stream
(``graph()``, from the SchedulerPlugin's ``update_graph``, before the graph's tasks make their first
transitions), so every ``dask.task`` span of it carries the span's id. Dask's implicit ``default``
span (tasks submitted outside any ``span()``) is neither announced nor read: a cluster whose users
name no spans gets no span telemetry at all, and its figures are in the scheduler-wide metrics.

A Dask span that is finished and has not changed for SETTLE readings is read only every SETTLED_EVERY
readings (a recomputation after a lost worker may still change it), so a scheduler that has run
thousands of spans does not read them all every second; a graph with tasks in it makes it read every
time again. A graph that brings a new span first records the times of the spans recently done: the
exporter ends a done span when a span not inside it comes, with the times last recorded.
"""
from __future__ import annotations

import time

from evlog import notices
from evlog.observed import records
from evlog.observed.dask import context as dc
from evlog.wire import dask as wire

INTERVAL = 1.0  # seconds between readings (the metrics' export interval by default: OTEL_METRIC_EXPORT_INTERVAL)
SETTLE = 5  # readings a finished Dask span must stay unchanged before it is read less often
SETTLED_EVERY = 10  # a settled span is read every this many readings
DEFAULT = ("default",)  # the name of Dask's implicit span (distributed.spans: Span.annotation is None for it)
IDLE = ("execute", "N/A", "idle or other spans", "seconds")  # Span.cumulative_worker_metrics' synthetic key


def _interval() -> float:
    try:
        from evlog import config

        return max(0.1, config.get().sdk_numbers["OTEL_METRIC_EXPORT_INTERVAL"] / 1000)
    except Exception:
        return INTERVAL


def _atom(part):
    return part if type(part) in (str, int, float, bool) else str(part)


class _Span:
    """What was last recorded of one Dask span (plain values only)."""

    __slots__ = ("times", "figures", "quiet", "calls")

    def __init__(self):
        self.times = None  # (start, stop or None, done)
        self.figures: dict = {}  # Dask's key -> running total
        self.quiet = 0  # readings since it last changed
        self.calls = 0  # SpanCall records made


class Readings:
    """One scheduler's readings; ``graph()`` from update_graph, ``close()`` when the scheduler closes."""

    def __init__(self, scheduler):
        self.scheduler = scheduler
        self.start = time.time()
        self._log = None  # the records source, made at the first graph
        self._handle = None  # the event loop's timer
        self._closed = False
        self._seen = 0  # Dask spans looked at so far (the spans extension only ever adds them)
        self._spans: dict = {}  # Dask span id -> _Span (named spans only)
        self._default: set = set()  # ids of Dask's implicit spans
        self._wide: dict = {}  # Scheduler.cumulative_worker_metrics as last recorded
        self._keys: dict = {}  # Dask's key -> the same as atoms
        self._reads = 0
        self.interval = _interval()

    # ---- on the scheduler's event loop ---------------------------------------------------------

    def graph(self, annotations, tasks) -> list:
        """A graph arrived (update_graph, before its tasks' first transitions): the announcements of
        the Dask spans it brought, for the transitions stream. Records the span tree's news and the
        client call's link to its span, and starts the readings at the first graph."""
        try:
            if self._closed:
                return []
            if self._log is None:
                self._log = records.source(wire.READINGS, {"start": self.start})
                self._schedule()
            now = time.time()
            spans = getattr(self._extension(), "spans", None)
            if spans and len(spans) > self._seen:
                self._recent(spans, now)
            named = self._see(now)
            self._calls(annotations, tasks, now)
            return [(None, wire.NAMED, None, None, now, sid, None) for sid in named]
        except Exception as exc:
            notices.warn_once("dask-readings-graph", f"Dask's spans could not be read: {exc!r}")
            return []

    def _extension(self):
        return self.scheduler.extensions.get("spans")

    def _recent(self, spans, now: float) -> None:
        """The times of the spans last recorded done and still read every time, before a new span is
        announced: the exporter ends a done span when a span not inside it comes (the program went on),
        with the times last recorded, and a span can get more tasks and finish them all between two
        readings (``with span("etl")``: ``load``, then a short ``clean``, then ``reduce`` outside it), which
        moves its stop after the reading that saw it done."""
        for sid, st in self._spans.items():
            if st.times is not None and st.times[2] and st.quiet < SETTLE:
                sp = spans.get(sid)
                try:
                    if sp is not None:
                        self._times(sid, sp, st, now)
                except Exception as exc:  # read again at the next reading; the graph's news go on
                    notices.warn_once("dask-readings-span", f"a Dask span's figures could not be read: {exc!r}")

    def _see(self, now: float) -> list:
        """Record the Dask spans made since the last look (parents first, as Dask makes them); their ids."""
        ext = self._extension()
        spans = getattr(ext, "spans", None)
        if not spans or len(spans) <= self._seen:
            return []
        named = []
        n = 0
        for sp in list(spans.values())[self._seen:]:
            n += 1
            sid, name = sp.id, tuple(sp.name)
            if name == DEFAULT:
                self._default.add(sid)
                continue
            parent = sp.parent
            pid = parent.id if parent is not None and parent.id not in self._default else None
            self._spans[sid] = _Span()
            named.append(sid)
            self._log.append((wire.SEEN, now, sid, tuple(str(t) for t in name), pid))  # wire.dask.SpanSeen
        self._seen += n
        return named

    def _calls(self, annotations, tasks, now: float) -> None:
        """The client call's trace context, linked to the Dask span its graph's tasks are in (Dask gives
        the plugin the span of each of the graph's tasks: the first and last are looked at). The span
        and those it is in are read at every reading again, until they settle once more."""
        per_task = (annotations or {}).get("span") if isinstance(annotations, dict) else None
        if not per_task:
            return
        ids = set()
        for ann in (next(iter(per_task.values())), next(reversed(per_task.values()))):
            chain = ann.get("ids") if isinstance(ann, dict) else None
            if chain:
                ids.add(chain[-1])
                for sid in chain:
                    st = self._spans.get(sid)
                    if st is not None:
                        st.quiet = 0
        carrier = dc.graph_carrier()
        if carrier is None and tasks:  # a graph without one (a client without evlog): the one made for it
            ts = self.scheduler.tasks.get(tasks[0])
            carrier = dc.carrier_of(dc.carriers(self.scheduler), ts) if ts is not None else None
        if carrier is None:
            return
        for sid in ids:
            st = self._spans.get(sid)
            if st is not None and st.calls < wire.MAX_CALLS:
                st.calls += 1
                self._log.append((wire.CALL, now, sid, carrier))  # wire.dask.SpanCall

    def _schedule(self) -> None:
        import asyncio

        self._handle = asyncio.get_running_loop().call_later(self.interval, self._tick)

    def _tick(self) -> None:
        self._handle = None
        if self._closed:
            return
        self.read()
        self._schedule()

    def read(self, final: bool = False) -> None:
        """Record what changed since the last reading."""
        try:
            now = time.time()
            self._reads += 1
            self._see(now)
            self._figures(None, self.scheduler.cumulative_worker_metrics, self._wide, now)
            ext = self._extension()
            spans = getattr(ext, "spans", None) or {}
            for sid, st in self._spans.items():
                if not final and st.quiet >= SETTLE and (self._reads + hash(sid)) % SETTLED_EVERY:
                    continue
                sp = spans.get(sid)
                if sp is not None:
                    self._span(sid, sp, st, now)
        except Exception as exc:
            notices.warn_once("dask-readings", f"Dask's fine performance metrics could not be read: {exc!r}")

    def _span(self, sid, sp, st: _Span, now: float) -> None:
        """One Dask span's times and figures, when they changed (a span that cannot be read now is
        read again next time, the others go on)."""
        try:
            changed = self._times(sid, sp, st, now)
            figures = sp.cumulative_worker_metrics  # a new dict, summed over the span's tree
            figures.pop(IDLE, None)  # Dask's estimate from the cluster's threads, not a measurement
            changed |= self._figures(sid, figures, st.figures, now)
            st.quiet = 0 if changed or not st.times[2] else st.quiet + 1
        except Exception as exc:
            notices.warn_once("dask-readings-span", f"a Dask span's figures could not be read: {exc!r}")

    def _times(self, sid, sp, st: _Span, now: float) -> bool:
        """Record one Dask span's (start, stop, done) if they changed; whether they did."""
        done = sp.done
        times = (sp.start, sp.stop if done else None, done)
        if times == st.times:
            return False
        st.times = times
        self._log.append((wire.TIMES, now, sid) + times)  # wire.dask.SpanTimes
        return True

    def _figures(self, sid, current, last: dict, now: float) -> bool:
        """One Figures record of the entries of ``current`` that changed since ``last`` (updated)."""
        items = []
        keys = self._keys
        for k, v in dict(current).items():
            if last.get(k) != v:
                last[k] = v
                ak = keys.get(k)
                if ak is None:
                    ak = keys[k] = tuple(_atom(p) for p in k) if type(k) is tuple else _atom(k)
                items.append((ak, v if type(v) in (int, float) else float(v)))
        if items:
            self._log.append((wire.FIGURES, now, sid, tuple(items)))  # wire.dask.Figures
        return bool(items)

    def close(self) -> None:
        """The scheduler closes: a last reading, then everything goes to the exporter process."""
        if self._closed:
            return
        self._closed = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._log is None:
            return
        self.read(final=True)
        self._log.append((wire.CLOSED, time.time()))
        records.remove(self._log)
