"""The scheduler side: one span per task life, a span event per transition, structured events.

A SchedulerPlugin (added to every Scheduler as it is built) records each transition as one tuple of
atoms on the scheduler's event loop and does nothing else there: evlog.observed.records ships the tuples to the
run's exporter process every half second, where dask_lives groups them per task into lives and builds
one ``dask.task {prefix}`` span per life, with a ``transition`` event per transition. The shipping
thread also keeps them in this process's story ledger (evlog.story) and counts them by (start, finish)
for the ``dask.scheduler.transitions`` counter.

The span's parent is the client call's ``dask.compute`` span, whose context came with the graph
(dask_context keeps it per task, outside anything Dask shows). A graph submitted without one (a
client without evlog) gets one ``dask.compute`` span made here, per submission, and its tasks carry
that to the workers, so they put their spans in the same trace.

Dask's own spans and fine performance metrics are read on this scheduler's event loop by readings.py
(``self.readings``): its ``graph`` from ``update_graph``, its ``close`` from ``close``.

``log_event`` calls published here become ``dask.log_event`` events (and entries of this process's
evlog.get_events ledger), except those relayed from a worker or client that did both itself
(workers with evlog say so in their startup information; clients are assumed to have evlog).
"""
from __future__ import annotations

import time
import weakref
from collections import Counter
from operator import itemgetter

from distributed.diagnostics.plugin import SchedulerPlugin
from opentelemetry.trace import SpanKind

from evlog import notices, propagation
from evlog.observed import events, records
from evlog.observed.dask import context as dc
from evlog.observed.dask import readings as dask_readings
from evlog.observed.dask import shape as dask_shape
from evlog.observed.dask import spans as ds
from evlog.wire import dask as wire

_live: weakref.WeakSet[SchedulerRecorder] = weakref.WeakSet()
_PAIR = itemgetter(1, 2)  # (start, finish) of a recorded transition


def _info(ts, kept: dc.TaskCarriers) -> tuple | None:
    """(prefix, group, Dask span id, trace context carrier, priority) of a task whose life begins: the
    fields of wire.dask.TaskInfo, in order. update_graph has set the priority before the first transition."""
    if ts is None:
        return None
    tg = ts.group
    return tg.prefix.name, tg.name, tg.span_id, dc.carrier_of(kept, ts), ts.priority


class SchedulerRecorder(SchedulerPlugin):
    """Records transitions as tuples of atoms; the exporter process turns them into spans."""

    name = "evlog-telemetry"
    idempotent = True

    def __init__(self, scheduler, transitions: bool = True, trace_tasks: int | None = None):
        self.scheduler = scheduler
        if trace_tasks is None:
            from evlog import config

            trace_tasks = config.get().dask_trace_tasks
        self.trace_tasks = trace_tasks  # tasks of one computation in one trace (dask_shape)
        self._tasks = scheduler.tasks
        self._carriers = dc.carriers(scheduler)  # the trace context of each task's client call
        self._forget = self._carriers.forget
        self._log = records.source(wire.TRANSITIONS, {"transitions": transitions}, self._shipped)
        self._append = self._log.append
        self._time = time.time
        self._relaying = 0  # > 0 while publishing an event a worker or client has emitted itself
        self.counts: Counter = Counter()  # (start, finish) -> transitions so far
        self.readings = dask_readings.Readings(scheduler)  # Dask's spans and fine performance metrics
        _live.add(self)

    # ---- the hot path: one tuple of atoms per transition -----------------------------------------

    def transition(self, key, start, finish, *args, stimulus_id=None, **kw):
        try:
            # Atoms only: the tuples cross to the exporter process (marshal), and the garbage collector
            # stops tracking them at once.
            if finish == "processing":
                ts = self._tasks.get(key)
                ws = ts.processing_on if ts is not None else None
                extra = ws.address if ws is not None else None
            elif finish == "memory" or finish == "erred":
                # the worker; dependencies, size and suspicion (gone once forgotten: read now); the
                # error's text only when erred
                ts = self._tasks.get(key)
                err = _error_text(ts, kw) if finish == "erred" else None
                if ts is not None:
                    deps = ts.dependencies
                    extra = (kw.get("worker"), tuple([d.key for d in deps]) if deps else None, err,
                             ts.nbytes, ts.suspicious, _compute(kw.get("startstops")))
                else:
                    extra = (kw.get("worker"), None, err, None, 0, None)
            else:
                if finish == "forgotten":
                    self._forget(key)  # a key computed again is a new task: its call's carrier, not this one
                extra = None
            info = _info(self._tasks.get(key), self._carriers) if start == "released" else None
            self._append((key, start, finish, stimulus_id, self._time(), extra, info))  # wire.dask.Transition
        except Exception as exc:  # never Dask's problem
            notices.warn_once("dask-transition", f"a Dask transition could not be recorded: {exc!r}")

    def _shipped(self, items: list) -> None:
        """On the shipping thread: this process's story ledger and transition counts (both in C)."""
        self.counts.update(map(_PAIR, items))  # a worker removal (None, None), a shape record (SHAPE, None): not observed
        events.record_transitions(items)

    # ---- other hooks -----------------------------------------------------------------------------

    def log_event(self, topic, msg):
        try:
            if topic == "all" and type(msg) is dict and msg.get("action") == "remove-worker":
                self._append((None, None, None, str(msg.get("stimulus_id")), self._time(), str(msg.get("worker")), None))
            if not self._relaying:  # else its publisher recorded and emitted it
                events.publish(topic, msg, "dask.log_event", "dask.topic")
        except Exception as exc:
            notices.warn_once("dask-log-event", f"a Dask event could not be recorded: {exc!r}")

    def update_graph(self, scheduler, *, client=None, keys=None, tasks=None, annotations=None, **kwargs):
        """The graph's tasks get the trace context that came with it (dask_context); tasks submitted
        without one get one ``dask.compute`` span per submission. A graph of more than ``trace_tasks``
        tasks is split into bounded traces (dask_shape): one shape record per batch."""
        try:
            if tasks:
                shapes = dc.carry(scheduler, tasks, lambda need: self._group(client, need), self._split)
                if shapes:
                    self._log.extend(shapes)
        except Exception as exc:
            notices.warn_once("dask-update-graph", f"tasks submitted without evlog could not be grouped: {exc!r}")
        self._log.extend(self.readings.graph(annotations, tasks))  # before the tasks' first transitions

    def _group(self, client, need) -> dict | None:
        from opentelemetry import context, trace

        from evlog.observed import own_spans  # a span of evlog's own: no SDK for it

        tracer = own_spans.tracer(ds.SCOPE_NAME, ds.VERSION)
        attrs = {"dask.task.key": str(need[0].key), "dask.task.count": len(need)}
        if client:
            attrs["dask.client.id"] = str(client)
        span = tracer.start_span("dask.compute", context.Context(), SpanKind.PRODUCER, attrs)
        span.end()
        return propagation.inject(trace.set_span_in_context(span, context.Context()))

    def _split(self, tasks: list, carrier: dict):
        return dask_shape.split(tasks, carrier, self.trace_tasks, self._time())

    async def close(self):
        self.readings.close()
        records.remove(self._log)
        retire(self)


def retire(rec: SchedulerRecorder) -> None:
    """A closed scheduler's transition counts stay in the (cumulative) counter."""
    if rec in _live:
        _live.discard(rec)
        for pair, n in rec.counts.items():
            _retired[pair] = _retired.get(pair, 0) + n


_retired: dict = {}


def _compute(startstops) -> float | None:
    """Seconds the task's function ran (its compute startstop), from the worker's task-finished message."""
    if startstops:
        for ss in startstops:
            if ss.get("action") == "compute":
                return ss["stop"] - ss["start"]
    return None


def _error_text(ts, kw: dict) -> tuple[str, str]:
    text = kw.get("exception_text") or (getattr(ts, "exception_text", None) if ts is not None else None)
    if not text and kw.get("exception") is not None:
        try:
            from distributed.protocol.pickle import loads

            exc = kw["exception"]
            exc = loads(exc) if isinstance(exc, bytes) else getattr(exc, "data", exc)
            text = f"{type(exc).__name__}: {exc}"
        except Exception:
            text = "unknown error"
    if not text and ts is not None and getattr(ts, "exception_blame", None) is not None:
        text = f"dependency {ts.exception_blame.key!r} erred"
    tb = kw.get("traceback_text") or (getattr(ts, "traceback_text", None) if ts is not None else None)
    return str(text or "erred"), str(tb or "")


# ---- relayed events: emitted where they were published -----------------------------------------

def relay_handlers(scheduler, rec: SchedulerRecorder) -> dict:
    """Wrap the scheduler's handlers for events published by workers and clients; returns the
    originals (to put back on uninstrument)."""
    originals = {}
    sh = scheduler.stream_handlers
    orig_worker = sh.get("log-event")
    if orig_worker is not None:
        def log_worker_event(worker=None, topic=None, msg=None, **kw):
            ws = scheduler.workers.get(worker) if worker is not None else None
            relayed = ws is not None and bool(ws.extra.get("evlog"))
            rec._relaying += relayed
            try:
                return orig_worker(worker=worker, topic=topic, msg=msg, **kw)
            finally:
                rec._relaying -= relayed

        originals[("stream", "log-event")] = orig_worker
        sh["log-event"] = log_worker_event
    orig_client = scheduler.handlers.get("log_event")
    if orig_client is not None:
        def log_event(*args, **kw):
            rec._relaying += 1
            try:
                return orig_client(*args, **kw)
            finally:
                rec._relaying -= 1

        originals[("rpc", "log_event")] = orig_client
        scheduler.handlers["log_event"] = log_event
    return originals


def unrelay_handlers(scheduler, originals: dict) -> None:
    for (kind, name), fn in originals.items():
        (scheduler.stream_handlers if kind == "stream" else scheduler.handlers)[name] = fn


# ---- metrics ------------------------------------------------------------------------------------

def _observe_transitions(options):
    total: dict = dict(_retired)
    for rec in list(_live):
        for pair, n in list(rec.counts.items()):
            total[pair] = total.get(pair, 0) + n
    return [(n, {"dask.transition.start": s, "dask.transition.finish": f})
            for (s, f), n in total.items() if f is not None]  # not a removal or a shape record


def _observe_tasks(options):
    total: dict = {}
    for rec in list(_live):
        for tp in list(rec.scheduler.task_prefixes.values()):
            for state, n in list(tp.states.items()):
                total[state] = total.get(state, 0) + n
    return [(n, {"dask.task.state": s}) for s, n in total.items()]


def _observe_workers(options):
    total: dict = {}
    for rec in list(_live):
        for ws in list(rec.scheduler.workers.values()):
            s = getattr(ws.status, "name", str(ws.status))
            total[s] = total.get(s, 0) + 1
    return [(n, {"dask.worker.status": s}) for s, n in total.items()]


_instruments: list = []


def install_metrics() -> None:
    """The scheduler's instruments, once per process; they read state only when exported."""
    if _instruments:
        return
    from evlog.observed import own_metrics  # evlog's path, not the SDK's meter

    meter = own_metrics.get_meter(ds.SCOPE_NAME, ds.VERSION)
    _instruments.append(meter.create_observable_counter(
        "dask.scheduler.transitions", [_observe_transitions], unit="{transition}",
        description="scheduler task transitions, by start and finish state"))
    _instruments.append(meter.create_observable_gauge(
        "dask.scheduler.tasks", [_observe_tasks], unit="{task}", description="tasks known to the scheduler, by state"))
    _instruments.append(meter.create_observable_gauge(
        "dask.scheduler.workers", [_observe_workers], unit="{worker}", description="workers, by status"))
    from evlog.observed.dask import gauges as dask_gauges  # memory per worker and tasks per prefix, Dask's own figures

    dask_gauges.install(lambda: [rec.scheduler for rec in list(_live)])
