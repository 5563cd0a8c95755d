"""What the sampling profiler of an observed process sends to the run's exporter process (records of kind
``profile``, evlog.observed.records). Standard library only: both sides import it.

Per shipping interval, in this order:
- ``(FRAMES, first, ((function, file, line), ...))``: new entries of the process's frame table, numbered
  from ``first`` (0 starts the table anew); ``function`` is the code's qualified name, ``line`` its first line;
- ``(INTERVAL, start_ns, end_ns, ticks, samples, skipped, cpu_ns)``: the interval's wall-clock bounds, the
  sampler's ticks, stacks sampled, ticks skipped by back-off, and the sampler thread's own CPU time;
- ``(SAMPLES, kind, label, trace_id, span_id, thread_id, stacks)`` per task span sampled in the interval:
  ``kind`` DASK (``label`` = the task prefix) or POOL (``label`` = code.function.name); ``stacks`` =
  ``((frame indices, leaf first), samples, wall ns), ...)``.
"""
from __future__ import annotations

from enum import IntEnum

KIND = "profile"


class Rec(IntEnum):
    FRAMES = 0
    INTERVAL = 1
    SAMPLES = 2


class Task(IntEnum):
    """What a SAMPLES record's label names."""
    DASK = 0  # a Dask task prefix (dask.task.prefix)
    POOL = 1  # a pool task's function (code.function.name)


class Samples(IntEnum):
    """Fields of a SAMPLES record."""
    REC = 0
    KIND = 1
    LABEL = 2
    TRACE_ID = 3
    SPAN_ID = 4
    THREAD = 5
    STACKS = 6


class Frames(IntEnum):
    """Fields of a FRAMES record."""
    REC = 0
    FIRST = 1  #: the number of the first new entry (0: the table starts anew)
    NEW = 2  #: ((function, file, line), ...)


class Interval(IntEnum):
    """Fields of an INTERVAL record."""
    REC = 0
    START_NS = 1
    END_NS = 2
    TICKS = 3
    SAMPLES = 4
    SKIPPED = 5
    CPU_NS = 6
