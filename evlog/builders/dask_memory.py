"""Bytes of task results each Dask worker holds, as the scheduler's transitions say: exact step series.

In the exporter process, ``Lives`` (dask_lives) tells ``Held`` when a result goes to memory on a worker
(``stored``) and when it leaves it (``left``: released, forgotten, its worker lost). Every change is a
point: each worker's series goes out as ``dask.worker.memory`` spans, one per worker and WINDOW seconds,
with a ``dask.worker.memory`` span event per change carrying the worker's total then
(``dask.worker.nbytes``). Changes less than RESOLUTION_NS apart are one point (the last total), so a
worker finishing 10,000 tasks a second costs at most 1,000 events a second. One trace per worker.

What the scheduler does not see is not counted: replicas a worker received to run a dependent task,
and memory Dask does not manage (Dask's dashboard reads those from the workers).
"""
from __future__ import annotations

import random

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from evlog.builders.span_data import SpanData, SpanEvent

SPAN = "dask.worker.memory"  # span name and span event name (docs/conventions.md, section Dask)
NBYTES = "dask.worker.nbytes"
WINDOW = 1.0  # seconds of changes per span
RESOLUTION_NS = 1_000_000
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
_UNSET = Status(StatusCode.UNSET)


class Held:
    def __init__(self, scope):
        self.scope = scope
        self._where: dict = {}  # key -> (worker, nbytes) of a result in memory
        self._total: dict = {}  # worker -> bytes held
        self._open: dict = {}  # worker -> [opened (exporter time), [(t ns, total)]]
        self._trace: dict = {}  # worker -> trace id

    @property
    def pending(self) -> bool:
        """Are there changes not sent yet?"""
        return bool(self._open)

    def stored(self, key, worker, nbytes, t: float, now: float) -> None:
        if not worker or type(nbytes) is not int or nbytes < 0:
            return
        self.left(key, t, now)  # a result stored again (a recomputation) is counted once
        self._where[key] = (worker, nbytes)
        self._change(worker, nbytes, t, now)

    def left(self, key, t: float, now: float) -> None:
        held = self._where.pop(key, None)
        if held is not None:
            self._change(held[0], -held[1], t, now)

    def _change(self, worker, delta: int, t: float, now: float) -> None:
        total = self._total[worker] = self._total.get(worker, 0) + delta
        ns = int(t * 1e9)
        w = self._open.get(worker)
        if w is None:
            w = self._open[worker] = [now, []]
        points = w[1]
        if points and ns - points[-1][0] < RESOLUTION_NS:
            points[-1] = (points[-1][0], total)
        else:
            points.append((ns, total))

    def spans(self, now: float, resource, final: bool = False) -> list:
        """The windows that are WINDOW seconds old (every window when ``final``) as spans."""
        out = []
        for worker in [w for w, (opened, _) in self._open.items() if final or now - opened >= WINDOW]:
            _, points = self._open.pop(worker)
            trace = self._trace.get(worker)
            if trace is None:
                trace = self._trace[worker] = random.getrandbits(128) or 1
            out.append(SpanData(
                SPAN, SpanContext(trace, random.getrandbits(64) or 1, False, _SAMPLED), parent=None,
                resource=resource, attributes={"dask.worker.address": worker, NBYTES: points[-1][1]},
                events=[SpanEvent(SPAN, t, {NBYTES: n}) for t, n in points], links=(), kind=SpanKind.INTERNAL,
                status=_UNSET, start_time=points[0][0], end_time=points[-1][0], instrumentation_scope=self.scope))
        return out
