"""A big computation's split into batches, decided on the scheduler (evlog/builders/dask_shape.py says
why and builds the batch and group spans in the exporter process; the shape record: evlog/wire/dask.py).
"""
from __future__ import annotations

import random

from opentelemetry.trace import NonRecordingSpan, SpanContext, set_span_in_context

from evlog import propagation
from evlog.wire.dask import SHAPE

_getrandbits = random.getrandbits


def split(tasks: list, carrier: dict, limit: int, now: float):
    """``tasks`` (new TaskStates of one graph, all with ``carrier``) -> ``(carriers, records)``: each
    task's batch carrier (the batch span in the graph's context: its baggage and tracestate go on) and
    one shape record per batch; None when the graph stays one trace."""
    if limit <= 0 or len(tasks) <= limit:
        return None
    ctx, parent = propagation.read(carrier)
    if parent is None or not parent.trace_flags.sampled:
        return None
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
            batch = SpanContext(_getrandbits(128) or 1, _getrandbits(64) or 1, True, parent.trace_flags,
                                parent.trace_state)
            bc = propagation.inject(set_span_in_context(NonRecordingSpan(batch), ctx))
            records.append((None, SHAPE, None, None, now, (bc, carrier, group_span, prefix, tg.name, b, nb, n,
                                                           hi - lo), None))
            for ts in members[lo:hi]:
                carriers[ts] = bc
    return carriers, records


def _priority(ts):
    return ts.priority or ()
