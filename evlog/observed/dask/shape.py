"""A big computation's split into batches, decided on the scheduler (evlog/builders/dask_shape.py says
why and builds the batch and group spans in the exporter process; the shape record: evlog/wire/dask.py).
"""
from __future__ import annotations

import random

from evlog.tracecontext import parse_traceparent
from evlog.wire.dask import SHAPE

_getrandbits = random.getrandbits


def split(tasks: list, tp: str, limit: int, now: float):
    """``tasks`` (new TaskStates of one graph, all with carrier ``tp``) -> ``(carriers, records)``:
    each task's batch carrier and one shape record per batch; None when the graph stays one trace."""
    if limit <= 0 or len(tasks) <= limit:
        return None
    parent = parse_traceparent(tp)
    if parent is None or not parent.trace_flags.sampled:
        return None
    flags = f"{int(parent.trace_flags):02x}"
    groups: dict = {}
    for ts in tasks:
        groups.setdefault(ts.group, []).append(ts)
    carriers: dict = {}
    records = []
    for tg, members in groups.items():
        try:
            members.sort(key=_priority)  # batches then run one after the other
        except TypeError:  # priorities that do not compare: the graph's order
            pass
        n = len(members)
        nb = -(-n // limit)
        group_span = _getrandbits(64) or 1
        prefix = tg.prefix.name
        for b in range(nb):
            lo, hi = b * n // nb, (b + 1) * n // nb
            btp = f"00-{_getrandbits(128) or 1:032x}-{_getrandbits(64) or 1:016x}-{flags}"
            records.append((None, SHAPE, None, None, now, (btp, tp, group_span, prefix, tg.name, b, nb, n, hi - lo),
                            None))
            for ts in members[lo:hi]:
                carriers[ts] = btp
    return carriers, records


def _priority(ts):
    return ts.priority or ()
