"""The Dask recorders' records: what a scheduler and a worker write (evlog/observed/dask/) and the
run's exporter process builds spans from (evlog/builders/dask_*.py). Standard library only.

Kind ``dask.transition`` (TRANSITIONS), from the scheduler's SchedulerPlugin, one record per transition:
``(key, start, finish, stimulus_id, time, extra, info)``:
- extra: finish processing -> the worker's address; memory/erred -> (worker, dependency keys, error
  (text, traceback) or None, nbytes, suspicious, seconds of compute or None); else None;
- info: on a transition from released -> (prefix, group, Dask span id, trace context carrier), else None;
  a carrier is a dict of str written by the configured propagators (evlog/propagation.py).
A worker removal seen on the scheduler is ``(None, None, None, stimulus_id, time, worker, None)``.
A big computation's batch (evlog/observed/dask/shape.py) is a shape record
``(None, SHAPE, None, None, time, shape, None)``, shape = ``(batch carrier, client call's
carrier, group span id, prefix, group, batch index, batches in the group, tasks in the group,
tasks in the batch)``.

Kind ``dask.worker`` (WORKER), from a worker (``address`` is the worker's):
- an execution: ``(EXECUTE, key, prefix, trace_id, span_id, parent, start, stop, thread id, thread name,
  error, startstops, address, top)``; parent: ``(trace_id, span_id, trace flags, tracestate header or
  None)`` of the client call's span, or None; error: ``(text, traceback)`` or None; startstops: Dask's
  other startstops of that run, ``(action, start, stop, source)`` with times in seconds on this
  machine's clock; top: the task's
  ``evlog.profile.top`` (evlog/observed/profiler.py) or None;
- a transfer: ``(TRANSFER, source worker, keys, bytes, parent, start, stop, ok, outcome, address)``.

A Dask span the scheduler has put tasks in (``distributed.span``; not Dask's implicit ``default``
span) is announced in the ``dask.transition`` stream too, before its tasks' first transitions, as
``(None, NAMED, None, None, time, Dask span id, None)``: its tasks' ``dask.task`` spans then carry its id.

Kind ``dask.readings`` (READINGS), from the scheduler (evlog/observed/dask/readings.py), meta
``{"start": the scheduler's start time}``: what it read of Dask's span tree and fine performance metrics
(builders/dask_readings.py), one record per change: SpanSeen, SpanCall, SpanTimes, Figures (fields
below), and ``(CLOSED, time)`` when the scheduler closes.
"""
import random
from enum import IntEnum

TRANSITIONS = "dask.transition"  # the scheduler's records' kind
WORKER = "dask.worker"  # a worker's records' kind
EXECUTE, TRANSFER = 0, 1  # the first field of a worker's record
SHAPE = "shape"  # the marker of a shape record (the place of a transition's start state)
NAMED = "span"  # the marker of a Dask span's announcement in the transitions stream (same place)
READINGS = "dask.readings"  # the scheduler's readings of Dask's spans and fine performance metrics
SEEN, CALL, TIMES, FIGURES, CLOSED = range(5)  # the first field of a readings record
SCOPE_NAME = "evlog.dask"  # the instrumentation scope of every Dask span, event and metric


class Transition(IntEnum):
    """Fields of a ``dask.transition`` record (a worker removal, a shape record and a Dask span's
    announcement have KEY None)."""
    KEY = 0
    START = 1  # SHAPE in a shape record, NAMED in an announcement
    FINISH = 2
    STIMULUS = 3
    TIME = 4
    EXTRA = 5  # a removal: the worker; a shape record: the shape; an announcement: the Dask span's id
    INFO = 6


class TaskInfo(IntEnum):
    """Fields of a transition's INFO: what the scheduler knows of a task as its life begins (its
    transition from ``released``)."""
    PREFIX = 0  #: the task's prefix (TaskGroup.prefix.name)
    GROUP = 1  #: its TaskGroup's name
    SPAN_ID = 2  #: its TaskGroup's Dask span id (the implicit default span's too)
    CARRIER = 3  #: the client call's trace context (a carrier: evlog.propagation), or None
    PRIORITY = 4  #: Dask's priority of the task (TaskState.priority: a tuple of numbers, lowest runs first), or None


class Execution(IntEnum):
    """Fields of a worker's EXECUTE record."""
    TAG = 0
    KEY = 1
    PREFIX = 2
    TRACE_ID = 3
    SPAN_ID = 4
    PARENT = 5
    START = 6
    STOP = 7
    THREAD = 8
    THREAD_NAME = 9
    ERROR = 10
    STARTSTOPS = 11
    ADDRESS = 12
    TOP = 13


class Transfer(IntEnum):
    """Fields of a worker's TRANSFER record."""
    TAG = 0
    SOURCE = 1
    KEYS = 2
    NBYTES = 3
    PARENT = 4
    START = 5
    STOP = 6
    OK = 7
    OUTCOME = 8
    ADDRESS = 9


class SpanSeen(IntEnum):
    """A Dask span seen on the scheduler (its parents are seen before it)."""
    TAG = 0  # SEEN
    TIME = 1  #: when the scheduler saw it (about ``Span.enqueued``)
    ID = 2  #: ``Span.id``
    NAME = 3  #: ``Span.name``, a tuple of tags: ("etl", "load")
    PARENT = 4  #: the enclosing span's id, or None for a root


class SpanCall(IntEnum):
    """A client call's graph put tasks in a Dask span (up to MAX_CALLS records per span)."""
    TAG = 0  # CALL
    TIME = 1
    ID = 2  #: the Dask span's id
    CARRIER = 3  #: the client call's trace context (a carrier: evlog.propagation)


class SpanTimes(IntEnum):
    """A Dask span's times, when they changed."""
    TAG = 0  # TIMES
    TIME = 1  #: when read
    ID = 2
    START = 3  #: ``Span.start``: its first task's start; 0 until a task finished
    STOP = 4  #: ``Span.stop`` once ``done``, else None
    DONE = 5  #: ``Span.done``: every task of the span and its children finished


class Figures(IntEnum):
    """Entries of Dask's fine performance metrics that changed since the last record of their scope."""
    TAG = 0  # FIGURES
    TIME = 1  #: when read
    ID = 2  #: None: ``Scheduler.cumulative_worker_metrics``; a Dask span's id: its ``Span.cumulative_worker_metrics``
    ITEMS = 3  #: ((key, value), ...): Dask's key (a tuple of str, or a str for a scalar) and its running total


MAX_CALLS = 128  # SpanCall records per Dask span (and so links on its dask.span span)

# Names of what the readings become (docs/conventions.md, section Dask)
SPAN_NAME = "dask.span"  # span "dask.span {last tag}"
ATTR_SPAN_ID = "dask.span.id"
ATTR_SPAN_NAME = "dask.span.name"
ATTR_CONTEXT = "dask.context"
ATTR_ACTIVITY = "dask.activity"
ATTR_PREFIX = "dask.task.prefix"
ATTR_UNIT = "dask.unit"
ATTR_DIGEST = "dask.digest"
METRIC_TIME = "dask.worker.time"  # Dask's unit "seconds"
METRIC_BYTES = "dask.worker.bytes"  # "bytes"
METRIC_COUNT = "dask.worker.count"  # "count"
METRIC_VALUE = "dask.worker.value"  # any other unit (a user's own context_meter figures), in ATTR_UNIT
METRIC_DIGEST = "dask.worker.digest"  # a scalar key (latency, tick-duration, transfer-bandwidth, ...)


def trace_of_group(span_id: object) -> int:
    """A trace id for tasks with no carrier: from Dask's own span id (a uuid), shared by scheduler and
    workers, so tasks of one Dask span still land in one trace (both sides derive it alike); random if
    there is none."""
    if span_id:
        try:
            return int(str(span_id).replace("-", ""), 16) & ((1 << 128) - 1) or 1
        except ValueError:
            pass
    return random.getrandbits(128) or 1
