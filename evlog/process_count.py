"""What counts as one process of a run, wherever evlog counts them: the launcher's exit summary (from
what the run's exporter process exported), `evlog summary` and the dashboard (from the stored resources).

A process is one operating-system process that telemetry came from, named by its resource's
``host.name`` and ``process.pid``: what evlog's labels show (``app scheduler 4242@host``), and what stays
the same when a process's resource grows while it runs (a Dask worker learns its address, a process
its Dask role), which gives one process several resources. A resource without ``process.pid`` (another
SDK's, received by `evlog serve`) is a process per ``service.instance.id``, else per resource.

The run's exporter process (``evlog.process.role=exporter``, whose host samples are the run's start and
end) is evlog's, not the program's: it is counted apart, "4 processes + evlog's exporter".
Standard library only: the exporter process and the read side both use it.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

ROLE = "evlog.process.role"  #: resource attribute naming an evlog process's role
EXPORTER = "exporter"  #: its value on the run's exporter process
_STATS_PREFIX = {False: "processes.exported ", True: "exporters.exported "}


def identity(attributes: Mapping) -> str:
    """The process a resource belongs to, as a string (two resources of one process give the same)."""
    pid = attributes.get("process.pid")
    if pid is not None:
        return f"{attributes.get('host.name', '')}/{pid}"
    instance = attributes.get("service.instance.id")
    if instance is not None:
        return f"instance {instance}"
    return "resource " + repr(sorted((str(k), repr(v)) for k, v in attributes.items()))


def is_exporter(attributes: Mapping) -> bool:
    return attributes.get(ROLE) == EXPORTER


def count(resources: Iterable[Mapping]) -> tuple[int, int]:
    """(the program's processes, evlog's exporter processes) among ``resources``, each process once."""
    seen: tuple[set, set] = (set(), set())
    for attributes in resources:
        seen[is_exporter(attributes)].add(identity(attributes))
    return len(seen[False]), len(seen[True])


def stats_key(attributes: Mapping) -> str:
    """The run's stats file's counter that says this resource's process had telemetry exported
    (evlog.stats; the exporter process adds it, the launcher's summary counts the keys)."""
    return _STATS_PREFIX[is_exporter(attributes)] + identity(attributes)


def count_stats(keys: Iterable[str]) -> tuple[int, int]:
    """``count`` from the stats file's counter names."""
    seen: tuple[set, set] = (set(), set())
    for k in keys:
        for exporter, prefix in _STATS_PREFIX.items():
            if k.startswith(prefix):
                seen[exporter].add(k)
    return len(seen[False]), len(seen[True])


def describe(processes: int, exporters: int) -> str:
    """``4 processes + evlog's exporter``: the figures as the summaries say them."""
    return f"{processes:,} process{'es' if processes != 1 else ''}{plus_exporters(exporters)}"


def plus_exporters(exporters: int) -> str:
    """`` + evlog's exporter`` (or ``''`` when none had telemetry)."""
    if not exporters:
        return ""
    return " + evlog's exporter" if exporters == 1 else f" + {exporters:,} evlog exporter processes"
