"""Built-in consumers: Dagger's TimespanLogging.Events and Dagger.Events, on evlog.Event.

A consumer is any callable taking one ``evlog.Event`` (a span start or finish) and returning a
sub-event, appended to its own stream of a ``MultiEventLog``. The stateful ones keep their state in
the object; a log calls its consumers one event at a time (under its lock), in order.

    ml = evlog.MultiEventLog()
    ml["wsat"] = evlog.consumers.WorkerSaturation()
"""
from __future__ import annotations

import time

from evlog.processors.sampling import Readings, dask_state
from evlog.processors.spans import COMPUTE

__all__ = [
    "CoreMetrics", "IDMetrics", "TimelineMetrics", "FullMetrics", "CPULoadAverages", "MemoryFree",
    "EventSaturation", "WorkerSaturation", "ProcessorSaturation", "BytesAllocd", "BUILTIN",
]

_OPEN_MAX = 100_000  # open spans remembered for pairing a finish with its start; cleared past this


class CoreMetrics:
    """Timestamp, category and kind of each event (TimespanLogging.Events.CoreMetrics)."""

    def __call__(self, ev):
        return {"timestamp": ev.timestamp, "category": ev.category, "kind": ev.kind}


class IDMetrics:
    """The id of each event: task key or span id (TimespanLogging.Events.IDMetrics)."""

    def __call__(self, ev):
        return ev.id


class TimelineMetrics:
    """The timeline of each event: (pid, thread, worker) (TimespanLogging.Events.TimelineMetrics)."""

    def __call__(self, ev):
        return ev.timeline


class FullMetrics:
    """The whole Event (TimespanLogging.Events.FullMetrics)."""

    def __call__(self, ev):
        return ev


class CPULoadAverages:
    """The host's 1-minute CPU load average (TimespanLogging.Events.CPULoadAverages)."""

    def __call__(self, ev):
        return Readings.loadavg()


class MemoryFree:
    """Fraction of the host's memory that is free, 0..1, read at most every max_age_s (TimespanLogging.Events.MemoryFree)."""

    def __init__(self, max_age_s: float = 0.2):
        self.max_age_s = max_age_s
        self._readings = Readings(max_age_s)

    def init_similar(self):
        return MemoryFree(self.max_age_s)

    def __call__(self, ev):
        return self._readings.mem_free(time.monotonic_ns())


class EventSaturation:
    """Open spans per category, {category: n} for n > 0 (TimespanLogging.Events.EventSaturation)."""

    def __init__(self):
        self.saturation: dict[str, int] = {}

    def init_similar(self):
        return EventSaturation()

    def __call__(self, ev):
        sat = self.saturation
        sat[ev.category] = sat.get(ev.category, 0) + (1 if ev.kind == "start" else -1)
        return {c: n for c, n in sat.items() if n > 0}


class WorkerSaturation:
    """Tasks running in this process: open compute spans (Dagger.Events.WorkerSaturation)."""

    def __init__(self):
        self.saturation = 0

    def init_similar(self):
        return WorkerSaturation()

    def __call__(self, ev):
        if ev.category == COMPUTE:
            self.saturation += 1 if ev.kind == "start" else -1
        return self.saturation


class ProcessorSaturation:
    """Tasks running per processor (pid, thread), [(processor, n)] for n > 0 (Dagger.Events.ProcessorSaturation)."""

    def __init__(self):
        self.saturation: dict[tuple, int] = {}
        self._open: dict[int, tuple] = {}  # span id -> processor it started on

    def init_similar(self):
        return ProcessorSaturation()

    def __call__(self, ev):
        if ev.category == COMPUTE:
            sat = self.saturation
            if ev.kind == "start":
                proc = ev.timeline[:2]
                if len(self._open) >= _OPEN_MAX:
                    self._open.clear()
                self._open[ev.span_id] = proc
                sat[proc] = sat.get(proc, 0) + 1
            else:
                proc = self._open.pop(ev.span_id, None) or ev.timeline[:2]
                n = sat.get(proc, 0) - 1
                if n:
                    sat[proc] = n
                else:
                    sat.pop(proc, None)
        return [(p, n) for p, n in self.saturation.items() if n > 0]


class BytesAllocd:
    """Bytes of task results held by this process's running Dask workers (WorkerState.nbytes), else
    the process's resident bytes; both looked at again at most every max_age_s (Dagger.Events.BytesAllocd)."""

    def __init__(self, max_age_s: float = 0.2):
        self.max_age_s = max_age_s
        self._readings = Readings(max_age_s)
        self._state = None
        self._looked = -(1 << 62)

    def init_similar(self):
        return BytesAllocd(self.max_age_s)

    def __call__(self, ev):
        now = time.monotonic_ns()
        if now - self._looked >= self._readings.max_age_ns:  # looked for again: workers start and close
            self._looked = now
            self._state = dask_state()
        if self._state is not None:
            return self._state.nbytes
        return self._readings.rss(now)


# EVLOG_CONSUMERS names -> consumer classes (names as in DaggerWebDash's examples)
BUILTIN = {
    "core": CoreMetrics,
    "id": IDMetrics,
    "timeline": TimelineMetrics,
    "full": FullMetrics,
    "loadavg": CPULoadAverages,
    "mem": MemoryFree,
    "esat": EventSaturation,
    "wsat": WorkerSaturation,
    "psat": ProcessorSaturation,
    "bytes": BytesAllocd,
}

