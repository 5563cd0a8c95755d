"""How a client call's trace context reaches the scheduler and the workers, with nothing Dask shows changed.

The context (a carrier, a dict of str written by the configured propagators: evlog.propagation; so the
span, its tracestate and the baggage) rides on the wire only, under the key ``CARRIER`` in the
``annotations`` field of two Dask messages, and the receiving process takes it off before Dask's handler
sees the message:

- client -> scheduler: ``Client._send_to_scheduler`` adds it to the global annotations of the
  ``update-graph`` message that ``Client._graph_to_futures`` sends (a copy; the client's own dicts stay
  as they were). The scheduler's ``update-graph`` stream handler is wrapped: it takes the carrier off,
  so ``update_graph`` gets the annotations the client would have sent without evlog, and holds it in a
  context variable while Dask builds the graph's tasks. evlog's SchedulerPlugin reads it in its
  ``update_graph`` hook and keeps it per task, in this module (``TaskCarriers``: an entry goes
  when its task is forgotten), never in ``TaskState.annotations``.
- scheduler -> worker: ``Scheduler._task_to_msg`` is wrapped to add the task's carrier to the
  ``compute-task`` message's annotations (a copy). The worker's ``compute-task`` stream handler is
  wrapped to take it off and keep it per key (``WorkerCarriers``), so the worker's TaskState gets
  the annotations Dask sent.

A peer without evlog gets the carrier as an ordinary annotation, never a
message it cannot read: nothing breaks in a mixed deployment.

The message fields are Dask's private protocol; each hook is one small function here, checks what it
finds and steps aside (with one message) when the shape differs. The shapes were read in the source of
distributed 2024.1.0 and 2026.8.0 (``update-graph`` carries ``annotations`` as a ToPickle, ``compute-task``
carries ``annotations``, ``SchedulerState._task_to_msg(ts, ...)``, ``Client._send_to_scheduler(msg)``);
the tests run on 2026.8.0.
"""
from __future__ import annotations

import weakref
from contextvars import ContextVar
from inspect import iscoroutinefunction

from evlog import notices
from evlog.observed.dask.spans import CARRIER  # the annotation key on the wire

_sending: ContextVar = ContextVar("evlog_dask_sending", default=None)  # client: the graph's carrier
_submitted: ContextVar = ContextVar("evlog_dask_submitted", default=None)  # scheduler: the same, received


class TaskCarriers:
    """One scheduler's carriers by task key (``carriers(scheduler)``). A key's entry goes when its task is
    forgotten (the SchedulerPlugin's transition hook calls ``forget``), so a key computed again after that, a
    new TaskState, never gets its old one's carrier: it gets the carrier of the call that submits it. One dict
    entry a task (the carrier is the graph's, shared): a weak reference per TaskState cost a 57,000-task
    graph's scheduler 8 MB more and 114,000 more objects for its garbage collector to walk."""

    __slots__ = ("by_key",)

    def __init__(self):
        self.by_key: dict = {}

    def get(self, ts):
        return self.by_key.get(ts.key)

    def set(self, pairs) -> None:
        """``pairs``: (TaskState, carrier) items."""
        by_key = self.by_key
        for ts, carrier in pairs:
            by_key[ts.key] = carrier

    def forget(self, key) -> None:
        self.by_key.pop(key, None)


_by_scheduler: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Scheduler -> its TaskCarriers


def carriers(scheduler) -> TaskCarriers:
    """``scheduler``'s carriers (two schedulers of one process, a test suite's, may hold the same keys)."""
    found = _by_scheduler.get(scheduler)
    if found is None:
        found = _by_scheduler[scheduler] = TaskCarriers()
    return found


def _with(annotations, carrier):
    """A copy of a message's annotations (a dict, or Dask's ToPickle of one) with the carrier added."""
    data = getattr(annotations, "data", annotations)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        return annotations
    new = dict(data)
    new[CARRIER] = carrier
    return new if annotations is data or annotations is None else type(annotations)(new)


def _without(annotations):
    """(carrier or None, the annotations as they would be without evlog) of a received message."""
    data = getattr(annotations, "data", annotations)
    if not isinstance(data, dict) or CARRIER not in data:
        return None, annotations
    new = dict(data)
    carrier = new.pop(CARRIER)
    return carrier, (new if annotations is data else type(annotations)(new))


# ---- client -------------------------------------------------------------------------------------

def sending(carrier):
    """Client: the graph about to go out carries ``carrier``; returns the token for ``sent``."""
    return _sending.set(carrier)


def sent(token) -> None:
    _sending.reset(token)


def send_to_scheduler(wrapped, instance, args, kwargs):
    """``Client._send_to_scheduler``: an ``update-graph`` message sent while a carrier is set gets it."""
    carrier = _sending.get()
    if carrier is not None:
        try:
            msg = args[0] if args else kwargs["msg"]
            if type(msg) is dict and msg.get("op") == "update-graph" and "annotations" in msg:
                msg["annotations"] = _with(msg["annotations"], carrier)
        except Exception as exc:
            notices.warn_once("dask-carrier", f"a Dask graph goes out without its trace context: {exc!r}")
    return wrapped(*args, **kwargs)


# ---- scheduler ----------------------------------------------------------------------------------

def receive_graphs(scheduler) -> dict:
    """Wrap the scheduler's ``update-graph`` handler to take the carrier off; returns the original (to
    put back), empty if there is none."""
    handlers = scheduler.stream_handlers
    original = handlers.get("update-graph")
    if original is None:
        notices.warn_once("dask-update-graph-handler", "this Dask scheduler has no update-graph handler: "
                          "its task spans go into traces of their own")
        return {}
    if iscoroutinefunction(original):
        async def update_graph(*args, **kw):
            token = _take(kw)
            try:
                return await original(*args, **kw)
            finally:
                _submitted.reset(token)
    else:
        def update_graph(*args, **kw):
            token = _take(kw)
            try:
                return original(*args, **kw)
            finally:
                _submitted.reset(token)

    handlers["update-graph"] = update_graph
    return {"update-graph": original}


def restore_graphs(scheduler, originals: dict) -> None:
    scheduler.stream_handlers.update(originals)


def _take(kw: dict):
    carrier = None
    try:
        if "annotations" in kw:
            carrier, kw["annotations"] = _without(kw["annotations"])
    except Exception as exc:
        notices.warn_once("dask-carrier-in", f"a Dask graph's trace context could not be read: {exc!r}")
    return _submitted.set(carrier)


def graph_carrier():
    """Scheduler, in update_graph: the carrier that came with the graph being added, or None."""
    return _submitted.get()


def carry(scheduler, keys, group, split=None) -> list | None:
    """The scheduler's ``update_graph`` hook: each task of the graph that is to run for it gets the
    carrier that came with the graph; without one, ``group(tasks)`` makes one for them and returns it.
    ``split(tasks, carrier)`` may give the tasks of a big graph carriers of their own (dask_shape):
    then its records are returned.

    A task runs for this graph when it is new, or when it is ``released``: a key an earlier call
    computed and let go, asked for again (the same delayed objects computed in a loop). Its next life
    is this call's, so it takes this call's carrier. A task already waiting, running or in memory
    stays with the call it runs or ran for (Dask calls this hook before it moves the graph's tasks on)."""
    carrier = _submitted.get()
    kept = carriers(scheduler)
    get = scheduler.tasks.get
    need = []
    for key in keys:
        ts = get(key)
        if ts is None or (ts.state != "released" and kept.get(ts) is not None):
            continue
        ann = ts.annotations
        if ann and CARRIER in ann:  # a scheduler without the handler wrapped (evlog started late)
            continue
        need.append(ts)
    if not need:
        return None
    if carrier is None:
        carrier = group(need)
        if carrier is None:
            return None
    shaped = split(need, carrier) if split is not None else None
    if shaped is None:
        kept.set((ts, carrier) for ts in need)
        return None
    by_task, records = shaped
    kept.set(by_task.items())
    return records


def carrier_of(kept: TaskCarriers, ts):
    """The carrier of a scheduler TaskState (``kept``: its scheduler's carriers), or None."""
    carrier = kept.get(ts)
    if carrier is None:
        ann = ts.annotations
        if ann:
            carrier = ann.get(CARRIER)
    return carrier


def task_to_msg(wrapped, instance, args, kwargs):
    """``Scheduler._task_to_msg(ts, ...)``: the ``compute-task`` message carries the task's carrier."""
    msg = wrapped(*args, **kwargs)
    try:
        ts = args[0] if args else kwargs["ts"]
        kept = _by_scheduler.get(instance)
        carrier = kept.get(ts) if kept is not None else None
        if carrier is not None and type(msg) is dict and "annotations" in msg:
            msg["annotations"] = _with(msg["annotations"], carrier)
    except Exception as exc:
        notices.warn_once("dask-carrier-out", f"a Dask task goes to its worker without its trace context: {exc!r}")
    return msg


# ---- worker -------------------------------------------------------------------------------------

class WorkerCarriers:
    """A worker's carriers by task key, set (or cleared) by each ``compute-task`` message; keys the
    worker no longer knows are dropped when the map has grown to twice its size at the last sweep."""

    def __init__(self, worker):
        self._worker = weakref.ref(worker)
        self.by_key: dict = {}
        self._sweep_at = 1024
        self.get = self.by_key.get

    def received(self, kw: dict) -> None:
        try:
            carrier, kw["annotations"] = _without(kw.get("annotations"))
            key = kw["key"]
        except Exception as exc:
            notices.warn_once("dask-carrier-in", f"a Dask task's trace context could not be read: {exc!r}")
            return
        by_key = self.by_key
        if carrier is None:
            by_key.pop(key, None)
            return
        if len(by_key) >= self._sweep_at:
            self._sweep()  # before this key goes in: the worker does not know it yet
        by_key[key] = carrier

    def _sweep(self) -> None:
        worker = self._worker()
        if worker is not None:
            tasks = worker.state.tasks
            for key in [k for k in self.by_key if k not in tasks]:
                del self.by_key[key]
        self._sweep_at = max(1024, 2 * len(self.by_key))


def receive_tasks(worker, carriers: WorkerCarriers) -> dict:
    """Wrap the worker's ``compute-task`` handler to take the carrier off into ``carriers``; returns
    the original (to put back)."""
    handlers = worker.stream_handlers
    original = handlers.get("compute-task")
    if original is None or iscoroutinefunction(original):
        notices.warn_once("dask-compute-task-handler", "this Dask worker's compute-task handler is not the "
                          "expected one: its execute spans go into traces of their own")
        return {}
    received = carriers.received

    def compute_task(**kw):
        received(kw)
        return original(**kw)

    handlers["compute-task"] = compute_task
    return {"compute-task": original}


def restore_tasks(worker, originals: dict) -> None:
    worker.stream_handlers.update(originals)
