"""Task profiles in the run's exporter process: profile records -> ``evlog.profile`` log records.

The builder of kind ``profile`` (evlog/wire/profile_records.py) makes, per shipping interval of
one process, one log record per Dask task prefix (or pool function) with that interval's samples as a
pprof profile, gzip'd and base64'd in the body (``pprof-gzip-base64``, as Splunk's profiler sends them):
each sample is one stack of one task span (labels ``span_id``, ``trace_id``, ``thread.id``), with two
values, samples (count) and wall time (nanoseconds). Any OTLP collector takes them as log records; the
run folder keeps them with the other log records, where the dashboard and ``evlog report`` read them
(evlog/report/profile.py).

The exporter process gives them a logs pipeline of their own, bounded (``process.PROFILES_PENDING``
records, the oldest dropped and counted as ``dropped.profiles``): a collector that refuses them (too
large, no logs) holds only them, never the console's log records or the spans.
"""
from __future__ import annotations

import time

from evlog import pprof
from evlog.version import __version__
from evlog.wire.profile_records import KIND as KIND  # the records' kind (process._builders)
from evlog.wire.profile_records import Frames, Interval, Rec, Samples, Task

EVENT = "evlog.profile"
LABELS = {Task.DASK.value: "dask.task.prefix", Task.POOL.value: "code.function.name"}
SAMPLE_TYPES = (("samples", "count"), ("wall", "nanoseconds"))
# Dask's own frames between the task's start and the task's function (distributed's _run_task, dask's
# Task.__call__): left out of the stacks, from the root, so a prefix's profile starts at its function
_MACHINERY = ("/distributed/", "/dask/")
_UNKNOWN = ("?", "", 0)

class ProfileLogs:
    """One process's profile records -> log records (a builder of the exporter process: feed() -> no spans)."""

    def __init__(self, meta, resource, add):
        self.resource = resource  # callable -> the process's current Resource
        self.interval = float((meta or {}).get("interval") or 0.01)
        self.frames: list = []  # the process's frame table
        self.machinery: list = []  # per frame: one of Dask's own
        self.span = (0, 0)  # (start ns, end ns) of the interval being fed
        self.add = add  # where the log records go: the profiles' pipeline (exporter/process.py), or a test's list
        self._scope = None

    def feed(self, batch, now: float, final: bool = False) -> list:
        groups: dict = {}
        for rec in batch:
            kind = rec[Samples.REC]  # the first field of every profile record
            if kind == Rec.SAMPLES:
                groups.setdefault((rec[Samples.KIND], rec[Samples.LABEL]), []).append(rec)
            elif kind == Rec.FRAMES:
                self._frames(rec[Frames.FIRST], rec[Frames.NEW])
            elif kind == Rec.INTERVAL:
                self.span = (rec[Interval.START_NS], rec[Interval.END_NS])
        if groups:
            out = [self._record(kind, label, recs) for (kind, label), recs in groups.items()]
            self.add(out)
        return []

    def _frames(self, first: int, new) -> None:
        if first == 0:
            self.frames, self.machinery = [], []
        while len(self.frames) < first:  # entries lost on the way (frames dropped): unknown
            self.frames.append(_UNKNOWN)
            self.machinery.append(False)
        for fn, file, line in new:
            self.frames.append((fn, file, line))
            self.machinery.append(any(m in file for m in _MACHINERY))

    def _stack(self, kind: int, idx: tuple) -> tuple:
        frames, n = self.frames, len(self.frames)
        end = len(idx)
        if kind == Task.DASK:
            mach = self.machinery
            while end > 1 and idx[end - 1] < n and mach[idx[end - 1]]:
                end -= 1
        return tuple(frames[i] if i < n else _UNKNOWN for i in idx[:end])

    def _record(self, kind: int, label: str, recs: list):
        from opentelemetry._logs import LogRecord
        from opentelemetry.sdk._logs import ReadableLogRecord

        samples, total, spans = [], 0, set()
        for rec in recs:
            trace_id, span_id = rec[Samples.TRACE_ID], rec[Samples.SPAN_ID]
            spans.add(span_id)
            labels = {"trace_id": f"{trace_id:032x}", "span_id": f"{span_id:016x}", "thread.id": int(rec[Samples.THREAD])}
            for idx, n, ns in rec[Samples.STACKS]:
                samples.append((self._stack(kind, idx), (n, ns), labels))
                total += n
        start, end = self.span
        period = int(self.interval * 1e9)
        body = pprof.to_body(pprof.encode(samples, SAMPLE_TYPES, SAMPLE_TYPES[1], period, start, max(0, end - start)))
        attrs: dict[str, str | int | float] = {
            LABELS.get(kind, "code.function.name"): label,
            "evlog.profile.samples": total,
            "evlog.profile.tasks": len(spans),
            "evlog.profile.interval": self.interval,
            "profiling.data.format": pprof.FORMAT,
            "profiling.data.type": "cpu",
            "com.splunk.sourcetype": "otel.profiling",
        }
        if self._scope is None:
            from opentelemetry.sdk.util.instrumentation import InstrumentationScope

            self._scope = InstrumentationScope("evlog.profile", __version__)
        return ReadableLogRecord(LogRecord(timestamp=end or time.time_ns(), observed_timestamp=time.time_ns(),
                                           body=body, attributes=attrs, event_name=EVENT),
                                 resource=self.resource(), instrumentation_scope=self._scope)

