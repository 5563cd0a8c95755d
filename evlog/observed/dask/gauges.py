"""Dask's own figures on the scheduler, sampled as observable gauges of evlog's own (own_metrics) with the
other gauges (at each collection): what Dask's dashboard draws, read from the same public objects.

- ``dask.worker.memory.managed``, ``.unmanaged``, ``.spilled`` (bytes), attribute dask.worker.address:
  each worker's ``WorkerState.memory`` (distributed's ``MemoryState``: managed = task results in the
  worker's memory, unmanaged = the rest of its process memory, spilled = results spilled to disk), as
  Dask's "Bytes stored per worker".
- ``dask.prefix.tasks`` ({task}), attributes dask.task.prefix and dask.task.state: each task prefix's
  ``TaskPrefix.states`` (waiting, queued, no-worker, processing, memory, erred, released), as Dask's
  progress bars. A prefix is sampled while it has tasks that are not forgotten (the states that have
  tasks), then once more at zero.

The callbacks run in evlog's metrics thread and only read: the schedulers' workers and prefixes are
copied before use, and a sample that meets a change under way (a dict resized by the event loop) is
skipped; the next export reads it again. The scheduler side registers them (scheduler.install_metrics).
"""
from __future__ import annotations

from evlog.observed.dask import spans as ds

MEMORY = ("managed", "unmanaged", "spilled")
STATES = ("waiting", "queued", "no-worker", "processing", "memory", "erred", "released")

_instruments: list = []
_shown: set = set()  # prefixes sampled last time with tasks: sampled once more at zero when they end


_schedulers = list  # -> the process's live Schedulers (install() is given the scheduler side's)


def _memory(kind: str):
    def observe(options):
        out = []
        try:
            for s in _schedulers():
                for ws in list(s.workers.values()):
                    ms = ws.memory
                    out.append((getattr(ms, kind), {"dask.worker.address": ws.address}))
        except RuntimeError:  # the event loop changed a dict meanwhile: the next export samples again
            return []
        return out

    return observe


def _prefixes(options):
    counts: dict = {}
    try:
        for s in _schedulers():
            for name, tp in list(s.task_prefixes.items()):
                states = dict(tp.states)
                c = counts.setdefault(name, dict.fromkeys(STATES, 0))
                for state in STATES:
                    c[state] += states.get(state, 0)
    except RuntimeError:
        return []
    active = {name for name, c in counts.items() if any(c.values())}
    # a sample names a prefix's states that have tasks (a state left out has none); a prefix that has
    # just ended gets one point at 0, so its latest sample says it has nothing left
    out = [(n, {"dask.task.prefix": name, "dask.task.state": state})
           for name in sorted(active) for state, n in counts[name].items() if n]
    out += [(0, {"dask.task.prefix": name, "dask.task.state": "memory"}) for name in sorted(_shown - active)]
    _shown.clear()
    _shown.update(active)
    return out


def install(schedulers) -> None:
    """The gauges, once per process; they read ``schedulers()`` only when the metrics are exported."""
    global _schedulers
    if _instruments:
        return
    _schedulers = schedulers
    from evlog.observed import own_metrics  # evlog's path, not the SDK's meter

    meter = own_metrics.get_meter(ds.SCOPE_NAME, ds.VERSION)
    for kind in MEMORY:
        _instruments.append(meter.create_observable_gauge(
            f"dask.worker.memory.{kind}", [_memory(kind)], unit="By",
            description=f"{kind} memory of each Dask worker (WorkerState.memory), as Dask's dashboard shows it"))
    _instruments.append(meter.create_observable_gauge(
        "dask.prefix.tasks", [_prefixes], unit="{task}",
        description="tasks of each task prefix by state (TaskPrefix.states), as Dask's progress bars count them"))
