"""A Dask scheduler's transitions -> one ``dask.task {prefix}`` span per task life (in the exporter process).

The scheduler's SchedulerPlugin (dask_scheduler) records each transition as a tuple of atoms and ships
it to the run's exporter process (evlog.observed.records); there, ``Lives`` groups them per task into lives:
a life starts at the task's first transition and its span ends at the first transition to memory,
erred or forgotten. Transitions that follow soon after (memory -> released -> forgotten once the
client lets go) still join the same span as events, for GRACE seconds or until the task is forgotten;
later ones start a new life, which is exported only if something happened in it (a worker holding the
result died, the task ran again), so a task costs one span however long its result lives.

A task whose group is in a Dask span the program named (``distributed.span``, announced in the same
stream: evlog/observed/dask/readings.py) carries that span's id, ``dask.span.id``.

Spans are SpanData (evlog/builders/span_data.py), with the SDK's public SpanContext and Status.

Records: evlog/wire/dask.py (kind ``dask.transition``); a big computation's batch and group spans
are built here too (dask_shape.Shapes). A task's carrier (evlog.propagation) is read with the program's
OTEL_PROPAGATORS, which the exporter process takes from the first hello (evlog.propagation.configure).
"""
from __future__ import annotations

import random
from collections import deque

from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode

from evlog import propagation
from evlog.builders import dask_memory
from evlog.builders import dask_shape
from evlog.builders.dask_spans import SAMPLED, SCOPE, UNSET
from evlog.builders.span_data import SpanData, SpanEvent
from evlog.wire import dask as wire

GRACE = 2.0  # seconds a finished task span waits for its release/forget transitions
TERMINAL = frozenset({"memory", "erred", "forgotten"})
KIND = wire.TRANSITIONS

# An open life: [serial, info, transitions, end, state, worker, dependencies, error, at end]
#   end: time of its first transition to memory/erred/forgotten; state: that transition's finish
#   at end: (nbytes, suspicious, compute seconds) from its memory/erred transition
_SN, _INFO, _TRANS, _END, _STATE, _WORKER, _DEPS, _ERR, _AT_END = range(9)
_RECORD = 7  # fields of a wire.dask.Transition: a waiting task's first record, kept as it came


class Lives:
    """One scheduler's task lives; ``feed`` returns the spans that are finished."""

    def __init__(self, resource, transitions: bool = True):
        self.resource = resource  # callable -> the scheduler process's current Resource
        self.transitions = transitions
        self._open: dict = {}  # key -> open life (a list), or (once its span is out) (worker, info)
        self._ended: deque = deque()  # (time it ended here, key, serial of the life)
        self._serial = 0
        self._removed: dict = {}  # stimulus id of a worker removal -> worker address
        self._parents = propagation.Contexts()  # carrier -> (Context, parent SpanContext)
        self._names: dict = {}
        self._shapes = dask_shape.Shapes()
        self._held = dask_memory.Held(SCOPE)
        self._named: set = set()  # ids of the Dask spans named by the program (not Dask's implicit default span)

    def feed(self, batch, now: float, final: bool = False) -> list:
        opened = self._open
        out: list = []
        for rec in batch:
            key, start, finish, stim, t, extra, info = rec  # the fields of wire.dask.Transition, in order
            if key is None:  # a worker removal (extra: its address), a batch of a big computation (extra: its
                # shape) or a Dask span its tasks' spans name (extra: its id)
                if start == wire.SHAPE:
                    self._shapes.add(extra)
                    continue
                if start == wire.NAMED:
                    self._named.add(extra)
                    continue
                if len(self._removed) > 65536:
                    self._removed.clear()
                self._removed[stim] = extra
                continue
            life = opened.get(key)
            if life is None and (finish == "waiting" or finish == "queued") and info is not None:
                # A task of a graph just submitted: its record as it came until its next one (a whole graph
                # waits at once, so this is what the exporter holds per task: half of what a life takes).
                opened[key] = rec if type(rec) is tuple else tuple(rec)
                continue
            if type(life) is tuple and len(life) == _RECORD:
                life = self._life_of(life)  # a waiting task moves on
            if life is None or type(life) is tuple:  # a first life, or one after an emitted span
                self._serial += 1
                worker, known = life if life is not None else (None, None)
                life = [self._serial, info or known, [], None, None, worker, None, None, None]
            elif life[_END] is not None and finish != "released" and finish != "forgotten":
                self._emit(key, life, out)  # it runs again: a new life
                self._serial += 1
                life = [self._serial, info or life[_INFO], [], None, None, life[_WORKER], None, None, None]
            elif info is not None and life[_INFO] is None:
                life[_INFO] = info
            if finish == "processing":
                w = life[_WORKER] = extra
            elif finish == "memory" or finish == "erred":
                w, deps, err, nbytes, suspicious, compute = extra
                life[_AT_END] = (nbytes, suspicious, compute)
                life[_ERR] = err
                if deps:
                    life[_DEPS] = deps
                w = w or (life[_WORKER] if start == "processing" else None)
                if w:
                    life[_WORKER] = w
                if finish == "memory":
                    self._held.stored(key, w, nbytes, t, now)
            elif start == "processing" or start == "memory":
                w = life[_WORKER]  # the worker it leaves (released, died, stolen)
            else:
                w = None
            if start == "memory":
                self._held.left(key, t, now)
            life[_TRANS].append((start, finish, stim, w, t))
            if life[_END] is None and finish in TERMINAL:
                life[_END], life[_STATE] = t, finish
                self._ended.append((now, key, life[_SN]))
            if finish == "forgotten":
                self._emit(key, life, out)
                opened.pop(key, None)
            else:
                opened[key] = life
        ended = self._ended
        while ended and (final or now - ended[0][0] >= GRACE):
            _, key, sn = ended.popleft()
            life = opened.get(key)
            if type(life) is list and life[_SN] == sn:  # else it is out already (forgotten, or ran again)
                self._emit(key, life, out)
                opened[key] = (life[_WORKER], life[_INFO])  # until forgotten, its worker and names stay
        if self._held.pending:
            out.extend(self._held.spans(now, self.resource(), final))
        if final:
            for key, life in opened.items():
                if type(life) is tuple and len(life) == _RECORD:
                    life = self._life_of(life)
                if type(life) is list:
                    self._emit(key, life, out)
            opened.clear()
            self._shapes.flush(out, self.resource())
        return out

    def _life_of(self, rec: tuple) -> list:
        """The life of a waiting task kept as its first record."""
        self._serial += 1
        _key, start, finish, stim, t, _extra, info = rec
        return [self._serial, info, [(start, finish, stim, None, t)], None, None, None, None, None, None]

    def _emit(self, key, life: list, out: list) -> None:
        if not life[_TRANS] or life[_INFO] is None or self._only_released(life[_TRANS]):
            return
        span = self._span(key, life)
        if span is not None:
            out.append(span)
            if self._shapes.batches:
                at_end = life[_AT_END]
                self._shapes.ended(life[_INFO][3], key, span, life[_STATE], at_end[2] if at_end else None, out,
                                   span.resource)

    def _only_released(self, trans: list) -> bool:
        """A result let go after its span went out (memory -> released -> forgotten, no worker lost):
        kept in the story only, so a task costs one span however long its result lives."""
        if trans[0][0] not in ("memory", "erred"):
            return False
        removed = self._removed
        return all(t[1] in ("released", "forgotten") and t[2] not in removed for t in trans)

    def _span(self, key, life: list):
        _sn, (prefix, group, group_span, carrier), trans, end, state, worker, deps, err, at_end = life
        parent = self._parents.get(carrier)[1] if carrier else None  # read with the program's propagators
        if parent is not None:
            if not parent.trace_flags.sampled:
                return None
            trace_id = parent.trace_id
        else:
            trace_id = wire.trace_of_group(group_span)
        name = self._names.get(prefix)
        if name is None:
            name = self._names[prefix] = f"dask.task {prefix}"
        attrs = {
            "dask.task.key": key if type(key) is str else str(key),
            "dask.task.prefix": prefix,
            "dask.task.group": group,
            "dask.task.state": state or trans[-1][1],  # not ended (a final flush): where it was last
        }
        if worker:
            attrs["dask.worker.address"] = worker
        if group_span in self._named:
            attrs[wire.ATTR_SPAN_ID] = group_span  # the innermost distributed.span its group is in
        nbytes, suspicious, _compute = at_end if at_end is not None else (None, 0, None)
        if nbytes is not None and nbytes >= 0:
            attrs["dask.task.nbytes"] = nbytes
        if deps:
            attrs["dask.task.dependencies"] = tuple([d if type(d) is str else str(d) for d in deps])
        if suspicious:
            attrs["dask.task.suspicious"] = suspicious
        removed = self._removed
        if removed:
            lost = [removed[t[2]] for t in trans if t[2] in removed and t[3] == removed[t[2]]]
            if lost:
                attrs["dask.task.workers_lost"] = sorted(set(lost))
        events = []
        if self.transitions:
            for start, finish, stim, w, t in trans:
                ev = {"dask.transition.start": start, "dask.transition.finish": finish}
                if w:
                    ev["dask.worker.address"] = w
                ev["dask.stimulus_id"] = stim or ""
                events.append(SpanEvent("transition", int(t * 1e9), ev))
        status = UNSET
        if state == "erred":
            text, tb = err or ("erred", "")
            status = Status(StatusCode.ERROR, text)
            ev = {"exception.message": text}
            if tb:
                ev["exception.stacktrace"] = tb
            events.append(SpanEvent("exception", int(end * 1e9), ev))
        return SpanData(
            name,
            context=SpanContext(trace_id, random.getrandbits(64) or 1, False, SAMPLED,
                                parent.trace_state if parent is not None else None),  # as the SDK gives a child
            parent=parent,
            resource=self.resource(),
            attributes=attrs,
            events=events,
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=int(trans[0][-1] * 1e9),
            end_time=int((end or trans[-1][-1]) * 1e9),
            instrumentation_scope=SCOPE,
        )
