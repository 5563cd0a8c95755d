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
  None)`` of the client call's span, or None; error: ``(text, traceback)`` or None; startstops: Dask's other startstops of that run,
  ``(action, start, stop, source)`` with times in seconds on this machine's clock; top: the task's
  ``evlog.profile.top`` (evlog/observed/profiler.py) or None;
- a transfer: ``(TRANSFER, source worker, keys, bytes, parent, start, stop, ok, outcome, address)``.
"""
import random
from enum import IntEnum

TRANSITIONS = "dask.transition"  # the scheduler's records' kind
WORKER = "dask.worker"  # a worker's records' kind
EXECUTE, TRANSFER = 0, 1  # the first field of a worker's record
SHAPE = "shape"  # the marker of a shape record (the place of a transition's start state)
SCOPE_NAME = "evlog.dask"  # the instrumentation scope of every Dask span, event and metric


class Transition(IntEnum):
    """Fields of a ``dask.transition`` record (a worker removal and a shape record have KEY None)."""
    KEY = 0
    START = 1  # SHAPE in a shape record
    FINISH = 2
    STIMULUS = 3
    TIME = 4
    EXTRA = 5  # a removal: the worker; a shape record: the shape
    INFO = 6


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


def trace_of_group(span_id) -> int:
    """A trace id for tasks with no carrier: from Dask's own span id (a uuid), shared by scheduler and
    workers, so tasks of one Dask span still land in one trace (both sides derive it alike); random if
    there is none."""
    if span_id:
        try:
            return int(str(span_id).replace("-", ""), 16) & ((1 << 128) - 1) or 1
        except ValueError:
            pass
    return random.getrandbits(128) or 1
