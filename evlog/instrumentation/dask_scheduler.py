"""The scheduler side: one span per task life, a span event per transition, structured events.

A SchedulerPlugin (added to every Scheduler as it is built) records each transition as one tuple
on the scheduler's event loop and does nothing else there. The assembler thread (dask_spans)
drains the tuples every half second and:

- groups them per task into lives: a life starts at the task's first transition and its span
  ``dask.task {prefix}`` ends at the first transition to memory, erred or forgotten. Transitions
  that follow soon after (memory -> released -> forgotten once the client lets go) still join the
  same span as events, for GRACE seconds or until the task is forgotten; later ones start a new
  life, which is exported only if something happened in it (a worker holding the result died, the
  task ran again), so a task costs one span however long its result lives;
- keeps every transition in this process's story ledger (evlog.story) and counts them by
  (start, finish) for the ``dask.scheduler.transitions`` counter.

The span's parent is the client call's ``dask.compute`` span, whose context came with the graph
(dask_context keeps it per task, outside anything Dask shows). A graph submitted without one (a
client without evlog) gets one ``dask.compute`` span made here, per submission, and its tasks carry
that to the workers, so they put their spans in the same trace.

``log_event`` calls published here become ``dask.log_event`` events (and entries of this process's
evlog.get_events ledger), except those relayed from a worker or client that did both itself
(workers with evlog say so in their startup information; clients are assumed to have evlog).
"""
from __future__ import annotations

import itertools
import threading
import time
import weakref
from collections import Counter, deque
from operator import itemgetter
from time import monotonic

from distributed.diagnostics.plugin import SchedulerPlugin
from opentelemetry.trace import SpanKind, Status, StatusCode

from evlog import _report, events

from . import dask_context as dc
from . import dask_spans as ds

GRACE = 2.0  # seconds a finished task span waits for its release/forget transitions
TERMINAL = frozenset({"memory", "erred", "forgotten"})
_EXTRA = frozenset({"processing", "memory", "erred"})  # transitions to these record other fields
_PAIR = itemgetter(1, 2)  # (start, finish) of a recorded transition
_parsed = ds._parsed  # traceparent -> parent SpanContext

_live: "weakref.WeakSet[SchedulerRecorder]" = weakref.WeakSet()


# One life of a task on the scheduler (the transitions of one span) is a tuple of atoms, replaced at
# each transition: the garbage collector stops tracking such a tuple at its first collection, so the
# lives of a big graph's tasks, open from submission until each task ends, never reach the oldest
# generation (an object per task there makes every full collection of the scheduler's heap longer).
# (serial, info, transitions, end, state, worker, dependencies, erred keyword arguments, at end):
#   info: (prefix, group, group's span id, traceparent carrier) of the task, None if it was not found
#   end: time of the first transition to memory/erred/forgotten; state: that transition's finish
#   worker: the worker it last ran on or was computed on; dependencies: keys, from its memory transition
#   at end: (nbytes, suspicious) read at its memory/erred transition (the task may be gone by the span)
_SN, _INFO, _TRANS, _WORKER = 0, 1, 2, 5


class SchedulerRecorder(SchedulerPlugin):
    """Records transitions as tuples; the assembler turns them into spans later."""

    name = "evlog-telemetry"
    idempotent = True

    def __init__(self, scheduler, transitions: bool = True):
        self.scheduler = scheduler
        self._tasks = scheduler.tasks
        self._log: deque = deque()
        self._append = self._log.append
        self._time = time.time
        self._transitions_on = transitions
        self._open: dict = {}  # key -> its open life, or (once its span is out) its worker, a string
        self._ended: deque = deque()  # (monotonic time it ended, key, serial of the life)
        self._serial = itertools.count(1)
        self._removed: dict = {}  # stimulus_id of a worker removal -> worker address
        self._relaying = 0  # > 0 while publishing an event a worker or client has emitted itself
        self.counts: Counter = Counter()  # (start, finish) -> transitions so far
        self._names: dict = {}
        self._res = None  # this process's resource, read once per drain
        self._lock = threading.Lock()
        _live.add(self)

    # ---- the hot path: one tuple per transition ------------------------------------------------

    def transition(self, key, start, finish, *args, stimulus_id=None, **kw):
        try:
            # Tuples of atoms where possible: the garbage collector stops tracking those at once, and
            # this log lives long enough (up to a pass) for anything it tracks to reach the oldest
            # generation, which makes the scheduler's full collections longer and more frequent.
            if finish == "processing":
                ts = self._tasks.get(key)
                ws = ts.processing_on if ts is not None else None
                extra = ws.address if ws is not None else None
            elif finish == "memory" or finish == "erred":
                # the worker; dependencies, size and suspicion (gone once forgotten: kept now); Dask's
                # keyword arguments only when erred (their error text): the others would only keep
                # Dask's message (startstops, metadata) alive
                ts = self._tasks.get(key)
                if ts is not None:
                    deps = ts.dependencies
                    extra = (kw.get("worker"), tuple([d.key for d in deps]) if deps else None,
                             kw if finish == "erred" else None, ts.nbytes, ts.suspicious)
                else:
                    extra = (kw.get("worker"), None, kw if finish == "erred" else None, None, 0)
            elif start == "released":
                extra = self._tasks.get(key)  # a life begins: its TaskState, for the span's fields
            else:
                extra = None
            self._append((key, start, finish, stimulus_id, self._time(), extra))
        except Exception as exc:  # never Dask's problem
            _report.warn_once("dask-transition", f"a Dask transition could not be recorded: {exc!r}")

    # ---- other hooks -----------------------------------------------------------------------------

    def log_event(self, topic, msg):
        try:
            if topic == "all" and type(msg) is dict and msg.get("action") == "remove-worker":
                if len(self._removed) > 1024:
                    self._removed.clear()
                self._removed[msg.get("stimulus_id")] = msg.get("worker")
            if not self._relaying:  # else its publisher recorded and emitted it
                events.publish(topic, msg, "dask.log_event", "dask.topic")
        except Exception as exc:
            _report.warn_once("dask-log-event", f"a Dask event could not be recorded: {exc!r}")

    def update_graph(self, scheduler, *, client=None, keys=None, tasks=None, annotations=None, **kwargs):
        """The graph's tasks get the trace context that came with it (dask_context); tasks submitted
        without one get one ``dask.compute`` span per submission."""
        try:
            if tasks:
                dc.carry(scheduler, tasks, lambda need: self._group(client, need))
        except Exception as exc:
            _report.warn_once("dask-update-graph", f"tasks submitted without evlog could not be grouped: {exc!r}")

    def _group(self, client, need) -> str:
        from opentelemetry import context, trace

        tracer = trace.get_tracer(ds.SCOPE.name, ds.SCOPE.version)
        attrs = {"dask.task.key": str(need[0].key), "dask.task.count": len(need)}
        if client:
            attrs["dask.client.id"] = str(client)
        span = tracer.start_span("dask.compute", context.Context(), SpanKind.PRODUCER, attrs)
        span.end()
        return ds.format_traceparent(span.get_span_context())

    async def close(self):
        ds.assembler.remove(self)
        retire(self)


    # ---- the assembler's side --------------------------------------------------------------------

    def drain(self, final: bool = False) -> list:
        with self._lock:
            return self._drain(final)

    def _drain(self, final: bool) -> list:
        pop = self._log.popleft
        batch = [pop() for _ in range(len(self._log))]
        self.counts.update(map(_PAIR, batch))  # counted in C
        opened = self._open
        out: list = []
        story: list = []
        now = monotonic()
        self._res = ds.resource()
        pause = ds.pacer()
        serial = self._serial
        for i, (key, start, finish, stim, t, extra) in enumerate(batch):
            if not i & 31:
                pause()
            life = opened.get(key)
            if life is None or type(life) is str:  # a first life, or one after an emitted span
                sn, info, trans, end, state, worker, deps, kw, at_end = (
                    next(serial), self._info(key, start, finish, extra), (), None, None, life or None, None, None, None)
            else:
                sn, info, trans, end, state, worker, deps, kw, at_end = life
                if end is not None and finish != "released" and finish != "forgotten":
                    self._emit(key, life, out)  # it runs again: a new life
                    sn, trans, end, state, deps, kw, at_end = next(serial), (), None, None, None, None, None
            if finish == "processing":
                w = worker = extra
            elif finish == "memory" or finish == "erred":
                w, d, kw, nbytes, suspicious = extra
                at_end = (nbytes, suspicious)
                if d:
                    deps = d
                w = w or (worker if start == "processing" else None)
                if w:
                    worker = w
            elif start == "processing" or start == "memory":
                w = worker  # the worker it leaves (released, died, stolen)
            else:
                w = None
            tr = (key, start, finish, stim, w, t)  # an evlog.events.Transition, as a plain tuple
            trans += (tr,)
            story.append(tr)
            if end is None and finish in TERMINAL:
                end, state = t, finish
                self._ended.append((now, key, sn))
            if finish == "forgotten":
                if info is None:  # put back by Dask for its plugins, and recorded
                    info = self._info(key, start, finish, extra)
                self._emit(key, (sn, info, trans, end, state, worker, deps, kw, at_end), out)
                opened.pop(key, None)
            else:
                opened[key] = (sn, info, trans, end, state, worker, deps, kw, at_end)
        ended = self._ended
        while ended and (final or now - ended[0][0] >= GRACE):
            _, key, sn = ended.popleft()
            life = opened.get(key)
            if type(life) is tuple and life[_SN] == sn:  # else it is out already (forgotten, or ran again)
                self._emit(key, life, out)
                # until forgotten, only its worker stays (a string: nothing for the garbage collector)
                opened[key] = life[_WORKER] or ""
        if final:
            for key, life in opened.items():
                if type(life) is tuple:
                    self._emit(key, life, out)
            opened.clear()
        if story:
            events.record_transitions(story)
        return out

    def _info(self, key, start, finish, extra):
        """(prefix, group, group's span id, carrier) of a new life's task: its TaskState is recorded
        with its first transition (from released), else still in the scheduler's tasks (a life begun
        before this plugin, or after a span went out). None if it is not found."""
        ts = extra if start == "released" and extra is not None and finish not in _EXTRA else self._tasks.get(key)
        if ts is None:
            return None
        tg = ts.group
        return tg.prefix.name, tg.name, tg.span_id, dc.carrier_of(ts)

    def _emit(self, key, life: tuple, out: list) -> None:
        if not life[_TRANS] or life[_INFO] is None:
            return
        if self._only_released(life[_TRANS]):
            return
        try:
            span = self._span(key, life)
        except Exception as exc:
            _report.warn_once("dask-task-span", f"a Dask task span could not be built: {exc!r}")
            return
        if span is not None:
            out.append(span)

    def _only_released(self, trans: tuple) -> bool:
        """A result let go after its span went out (memory -> released -> forgotten, no worker lost):
        kept in the story ledger only, so a task costs one span however long its result lives."""
        if trans[0][1] not in ("memory", "erred"):
            return False
        removed = self._removed
        return all(t[2] in ("released", "forgotten") and t[3] not in removed for t in trans)

    def _span(self, key, life: tuple):
        _sn, (prefix, group, group_span, tp), trans, end, state, worker, deps, kw, at_end = life
        parent = (_parsed.get(tp) or ds.parse_traceparent(tp)) if tp is not None else None
        if parent is not None:
            if not parent.trace_flags.sampled:
                return None
            trace_id = parent[0]
        else:
            trace_id = ds.trace_of_group(group_span)
        name = self._names.get(prefix)
        if name is None:
            if len(self._names) > 4096:
                self._names.clear()
            name = self._names[prefix] = f"dask.task {prefix}"
        ts = self._tasks.get(key) if at_end is None else None  # only if its memory/erred fields are missing
        attrs = {
            "dask.task.key": key if type(key) is str else str(key),
            "dask.task.prefix": prefix,
            "dask.task.group": group,
            "dask.task.state": state or trans[-1][2],  # not ended (a final flush): where it was last
        }
        if worker:
            attrs["dask.worker.address"] = worker
        nbytes, suspicious = at_end if at_end is not None else (
            (ts.nbytes, ts.suspicious) if ts is not None else (None, 0))
        if nbytes is not None and nbytes >= 0:
            attrs["dask.task.nbytes"] = nbytes
        if deps is None and ts is not None:
            deps = [d.key for d in list(ts.dependencies)]  # list(): the loop may change it
        if deps:
            attrs["dask.task.dependencies"] = tuple([d if type(d) is str else str(d) for d in deps])
        if suspicious:
            attrs["dask.task.suspicious"] = suspicious
        removed = self._removed
        if removed:
            lost = [removed[t[3]] for t in trans if t[3] in removed and t[4] == removed[t[3]]]
            if lost:
                attrs["dask.task.workers_lost"] = sorted(set(lost))
        status, extra = ds.UNSET, ()
        if state == "erred":
            text, tb = _error_text(ts if ts is not None else self._tasks.get(key), kw or {})
            status = Status(StatusCode.ERROR, text)
            ev = {"exception.message": text}
            if tb:
                ev["exception.stacktrace"] = tb
            extra = (("exception", int(end * 1e9), ev),)
        return ds.FinishedSpan(
            name, ds.context(trace_id, ds.new_span_id()), parent, self._res, attrs, SpanKind.INTERNAL,
            status, int(trans[0][-1] * 1e9), int((end or trans[-1][-1]) * 1e9),
            trans if self._transitions_on else (), extra,  # a tuple of atoms: not tracked by the GC
        )


def retire(rec: SchedulerRecorder) -> None:
    """A closed scheduler's transition counts stay in the (cumulative) counter."""
    if rec in _live:
        _live.discard(rec)
        for pair, n in rec.counts.items():
            _retired[pair] = _retired.get(pair, 0) + n


_retired: dict = {}


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
    from opentelemetry.metrics import Observation

    total: dict = dict(_retired)
    for rec in list(_live):
        for pair, n in list(rec.counts.items()):
            total[pair] = total.get(pair, 0) + n
    return [Observation(n, {"dask.transition.start": s, "dask.transition.finish": f}) for (s, f), n in total.items()]


def _observe_tasks(options):
    from opentelemetry.metrics import Observation

    total: dict = {}
    for rec in list(_live):
        for tp in list(rec.scheduler.task_prefixes.values()):
            for state, n in list(tp.states.items()):
                total[state] = total.get(state, 0) + n
    return [Observation(n, {"dask.task.state": s}) for s, n in total.items()]


def _observe_workers(options):
    from opentelemetry.metrics import Observation

    total: dict = {}
    for rec in list(_live):
        for ws in list(rec.scheduler.workers.values()):
            s = getattr(ws.status, "name", str(ws.status))
            total[s] = total.get(s, 0) + 1
    return [Observation(n, {"dask.worker.status": s}) for s, n in total.items()]


_instruments: list = []


def install_metrics() -> None:
    """The scheduler's instruments, once per process; they read state only when exported."""
    if _instruments:
        return
    from opentelemetry import metrics

    meter = metrics.get_meter(ds.SCOPE.name, ds.SCOPE.version)
    _instruments.append(meter.create_observable_counter(
        "dask.scheduler.transitions", [_observe_transitions], unit="{transition}",
        description="scheduler task transitions, by start and finish state"))
    _instruments.append(meter.create_observable_gauge(
        "dask.scheduler.tasks", [_observe_tasks], unit="{task}", description="tasks known to the scheduler, by state"))
    _instruments.append(meter.create_observable_gauge(
        "dask.scheduler.workers", [_observe_workers], unit="{worker}", description="workers, by status"))
