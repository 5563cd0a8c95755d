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
from evlog.builders import dask_memory, dask_shape
from evlog.builders.dask_spans import SAMPLED, SCOPE, UNSET, TransitionEvents
from evlog.builders.span_data import SpanData, SpanEvent
from evlog.wire import dask as wire

GRACE = 2.0  # seconds a finished task span waits for its release/forget transitions
TERMINAL = frozenset({"memory", "erred", "forgotten"})
KIND = wire.TRANSITIONS
HEADS = 4096  # distinct heads of waiting tasks kept for sharing (Lives._waiting); cleared past it
# A waiting task's transitions held in its head at most (Dask's root tasks go released -> waiting -> waiting
# -> queued before they run): past it, or at anything else, it becomes a Life
HELD_TRANSITIONS = 4
_HOLDS = frozenset({"waiting", "queued"})


class _Head(tuple):
    """What the waiting tasks of one graph share, one object for all (Lives._waiting): the transitions so far as
    ``((start, finish, stimulus id), ...)``, the prefix, group, Dask span id, carrier, and the priority when it
    is not a tuple."""

    __slots__ = ()


class Life:
    """A task life still open on the exporter side: what its span will say."""

    __slots__ = ("serial", "info", "trans", "end", "state", "worker", "deps", "err", "at_end", "sent", "head")

    def __init__(self, serial: int, info, worker):
        self.serial = serial  #: this builder's number of the life (the ended queue names lives by it)
        self.info = info  #: wire.dask.TaskInfo: (prefix, group, Dask span id, carrier, priority), from its first transition
        self.trans: list = []  #: (start, finish, stimulus id, worker, time) per transition
        self.end: float | None = None  #: time of its first transition to memory, erred or forgotten
        self.state: str | None = None  #: that transition's finish
        self.worker = worker  #: the worker it runs or ran on
        self.deps: list | tuple | None = None  #: its dependencies' keys, read at memory/erred
        self.err: tuple[str, str] | None = None  #: (text, traceback) when erred
        self.at_end: tuple | None = None  #: (nbytes, suspicious, compute seconds) from its memory/erred transition
        self.sent = False  #: its span went out ahead of its grace, before a dependent's span
        self.head: _Head | None = None  #: the _Head it was held with while it waited, if it was (Lives._done)


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
        # what waiting tasks share -> its _Head (_waiting); (id of a head, a transition) -> (that head, the head
        # with the transition too) (_waited)
        self._heads: dict = {}

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
            if life is None and (finish == "waiting" or finish == "queued") and type(info) is tuple and len(info) == 5:
                # A task of a graph just submitted, held in little until its next record (a whole graph waits
                # at once, so this is what the exporter holds per task)
                opened[key] = self._waiting(start, finish, stim, t, info)
                continue
            if type(life) is tuple and type(life[0]) is _Head:
                if finish in _HOLDS and start in _HOLDS and extra is None and info is None:
                    held = self._waited(life, start, finish, stim, t)  # still waiting (or queued)
                    if held is not None:
                        opened[key] = held
                        continue
                life = self._life_of(life)  # a waiting task moves on
            if life is None or type(life) is tuple:  # a first life, or one after an emitted span
                self._serial += 1
                if life is None:
                    worker, known = None, None
                elif type(life[1]) is _Head:  # held small since its span went out (_done)
                    worker, known = life[0], _names(life[1], life[2:])
                else:
                    worker, known = life
                life = Life(self._serial, info or known, worker)
            elif life.end is not None and finish != "released" and finish != "forgotten":
                self._emit(key, life, out)  # it runs again: a new life
                self._serial += 1
                life = Life(self._serial, info or life.info, life.worker)
            elif info is not None and life.info is None:
                life.info = info
            if finish == "processing":
                w = life.worker = extra
            elif finish == "memory" or finish == "erred":
                w, deps, err, nbytes, suspicious, compute = extra
                life.at_end = (nbytes, suspicious, compute)
                life.err = err
                if deps:
                    life.deps = deps
                w = w or (life.worker if start == "processing" else None)
                if w:
                    life.worker = w
                if finish == "memory":
                    self._held.stored(key, w, nbytes, t, now)
            elif start == "processing" or start == "memory":
                w = life.worker  # the worker it leaves (released, died, stolen)
            else:
                w = None
            if start == "memory":
                self._held.left(key, t, now)
            life.trans.append((start, finish, stim, w, t))
            if life.end is None and finish in TERMINAL:
                life.end, life.state = t, finish
                self._ended.append((now, key, life.serial))
            if finish == "forgotten":
                self._emit(key, life, out)
                opened.pop(key, None)
            else:
                opened[key] = life
        ended = self._ended
        while ended and (final or now - ended[0][0] >= GRACE):
            _, key, sn = ended.popleft()
            life = opened.get(key)
            if type(life) is Life and life.serial == sn:  # else it is out already (forgotten, or ran again)
                self._emit(key, life, out)
                opened[key] = _done(life)  # until forgotten, its worker and names stay
        if self._held.pending:
            out.extend(self._held.spans(now, self.resource(), final))
        if final:
            for key, life in opened.items():
                if type(life) is tuple and type(life[0]) is _Head:
                    life = self._life_of(life)
                if type(life) is Life:
                    self._emit(key, life, out)
            opened.clear()
            self._shapes.flush(out, self.resource())
        return out

    def _waiting(self, start, finish, stim, t, info: tuple) -> tuple:
        """A waiting task's first transition as held until it runs: ``(head, time, *priority)``, the head
        (_Head) one object for the tasks of a graph, the priority's numbers in the tuple itself. Held so until
        it runs, a root task (released -> waiting -> waiting -> queued) costs 345 bytes rather than 845 as a
        Life (tests/builders/test_dask_lives.py measures it)."""
        prefix, group, span, carrier, priority = info
        flat = type(priority) is tuple and len(priority) > 0
        try:
            shared = (((start, finish, stim),), prefix, group, span,
                      tuple(carrier.items()) if type(carrier) is dict else carrier, None if flat else priority)
            head = self._heads.get(shared)
        except TypeError:  # an unhashable value: a head of its own
            shared, head = None, None
        if head is None:
            head = _Head((((start, finish, stim),), prefix, group, span, carrier, None if flat else priority))
            if shared is not None:
                self._keep(shared, head)
        return (head, t, *priority) if flat else (head, t)

    def _waited(self, held: tuple, start, finish, stim, t) -> tuple | None:
        """A held task's next transition while it still waits (waiting -> queued): the same tuple with a head
        that has the transition too and the time after the others; None past HELD_TRANSITIONS."""
        head = held[0]
        n = len(head[0])
        if n >= HELD_TRANSITIONS:
            return None
        # by the head's identity (its carrier is a dict): the entry keeps the head, so no other takes its id
        shared = (id(head), start, finish, stim)
        known = self._heads.get(shared)
        if known is not None and known[0] is head:
            longer = known[1]
        else:
            longer = _Head((head[0] + ((start, finish, stim),), *head[1:]))
            self._keep(shared, (head, longer))
        return (longer, *held[1:n + 1], t, *held[n + 1:])

    def _keep(self, shared, value) -> None:
        if len(self._heads) >= HEADS:
            self._heads.clear()
        self._heads[shared] = value

    def _life_of(self, held: tuple) -> Life:
        """The life of a waiting task held by _waiting."""
        self._serial += 1
        head = held[0]
        trans = head[0]
        n = len(trans)
        life = Life(self._serial, _names(head, held[n + 1:]), None)
        life.head = head
        life.trans = [(start, finish, stim, None, t) for (start, finish, stim), t in zip(trans, held[1:n + 1])]
        return life

    def _emit(self, key, life: Life, out: list) -> None:
        if life.sent:  # went out before its dependent's (below)
            return
        if life.deps:
            self._emit_ended_deps(life.deps, out)
        self._emit_one(key, life, out)

    def _emit_ended_deps(self, deps, out: list) -> None:
        """Dependencies that ended and still wait out their grace go out first, theirs before their own
        dependents': a task's span never precedes its dependencies' spans, so a reader of a folder cut
        short (a live run) that has a task's span has its dependencies' (evlog/report/whole.py)."""
        opened = self._open
        order: list = []
        seen: set = set()
        stack = [(d, False) for d in deps]
        while stack:
            d, expanded = stack.pop()
            if expanded:
                order.append(d)
                continue
            life = opened.get(d)
            if d in seen or type(life) is not Life or life.end is None or life.sent:
                continue
            seen.add(d)
            stack.append((d, True))
            stack.extend((x, False) for x in life.deps or ())
        for d in order:
            life = opened[d]
            self._emit_one(d, life, out)
            # it stays open, as in its grace: a release or forget that follows joins it and makes no span (and
            # goes to a list of its own: the span's events are the list it had)
            life.sent = True
            life.trans = list(life.trans)

    def _emit_one(self, key, life: Life, out: list) -> None:
        if not life.trans or life.info is None or self._only_released(life.trans):
            return
        span = self._span(key, life)
        if span is not None:
            out.append(span)
            if self._shapes.batches:
                at_end = life.at_end
                self._shapes.ended(life.info[wire.TaskInfo.CARRIER], key, span, life.state,
                                   at_end[2] if at_end else None, out, span.resource)

    def _only_released(self, trans: list) -> bool:
        """A result let go after its span went out (memory -> released -> forgotten, no worker lost):
        kept in the story only, so a task costs one span however long its result lives."""
        if trans[0][0] not in ("memory", "erred"):
            return False
        removed = self._removed
        return all(t[1] in ("released", "forgotten") and t[2] not in removed for t in trans)

    def _span(self, key, life: Life):
        prefix, group, group_span, carrier, priority = life.info  # wire.dask.TaskInfo, in order
        trans, end, state, worker, deps, err, at_end = (life.trans, life.end, life.state, life.worker, life.deps,
                                                        life.err, life.at_end)
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
        if priority:
            order = _priority(priority)
            if order is not None:
                attrs["dask.task.priority"] = order
        if deps:
            attrs["dask.task.dependencies"] = tuple([d if type(d) is str else str(d) for d in deps])
        if suspicious:
            attrs["dask.task.suspicious"] = suspicious
        removed = self._removed
        if removed:
            lost = [removed[t[2]] for t in trans if t[2] in removed and t[3] == removed[t[2]]]
            if lost:
                attrs["dask.task.workers_lost"] = sorted(set(lost))
        tail: tuple = ()
        status = UNSET
        if state == "erred" and end is not None:  # a life's end and state are set together
            text, tb = err or ("erred", "")
            status = Status(StatusCode.ERROR, text)
            ev = {"exception.message": text}
            if tb:
                ev["exception.stacktrace"] = tb
            tail = (SpanEvent("exception", int(end * 1e9), ev),)
        events = TransitionEvents(trans if self.transitions else [], tail)
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


def _done(life: Life) -> tuple:
    """What stays of a life whose span went out, until its task is forgotten (a later life, if it runs again,
    starts from it): ``(worker, info)``, or ``(worker, head, *priority)`` for a task that was held with a
    graph's shared head while it waited: 266 bytes a task with its key rather than 372, for each task of a big
    graph, every one of which Dask keeps until the graph's result is let go (tests/builders/test_dask_lives.py
    measures it)."""
    head = life.head
    if head is None:
        return life.worker, life.info
    priority = life.info[4]  # flat in the tuple, as _waiting holds it, or in the head
    return (life.worker, head, *priority) if type(priority) is tuple and priority and head[5] is None \
        else (life.worker, head)


def _names(head: _Head, priority: tuple) -> tuple:
    """The info (wire.dask.TaskInfo) of a task held with ``head`` (by _waiting or _done): ``priority``, the
    numbers held after the head's times, or the head's own when there are none."""
    _trans, prefix, group, span, carrier, own = head
    return prefix, group, span, carrier, priority or own


def _priority(p) -> tuple | None:
    """Dask's priority as an attribute value: an attribute array holds one type, so ints stay ints
    and a priority with a float in it (a task submitted from a task: its generation less 0.01) is all
    floats; anything else (not a tuple of numbers) is left out."""
    if type(p) is not tuple:
        return None
    if all(type(x) is int for x in p):
        return p
    if all(type(x) in (int, float) for x in p):
        return tuple([float(x) for x in p])
    return None
