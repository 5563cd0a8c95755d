"""What every Dask span built in the exporter process shares: its scope, unset status and flags, and a task
span's transition events."""
from __future__ import annotations

from collections.abc import Iterator, Sequence

from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Status, StatusCode, TraceFlags

from evlog.builders.span_data import SpanEvent
from evlog.version import __version__
from evlog.wire.dask import SCOPE_NAME

SCOPE = InstrumentationScope(SCOPE_NAME, __version__)
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
UNSET = Status(StatusCode.UNSET)

TRANSITION = "transition"  # the event a task span has per transition of its life
TRANSITION_START = "dask.transition.start"
TRANSITION_FINISH = "dask.transition.finish"
WORKER_ADDRESS = "dask.worker.address"
STIMULUS_ID = "dask.stimulus_id"


def transition_head(start: str, finish: str, worker: str | None) -> dict:
    """A transition event's attributes but the last, its stimulus id: the worker's address only when there is one."""
    attrs = {TRANSITION_START: start, TRANSITION_FINISH: finish}
    if worker:
        attrs[WORKER_ADDRESS] = worker
    return attrs


class TransitionEvents(Sequence):
    """A task span's events: a ``transition`` event per transition of its life, in order, then ``tail`` (its
    exception event, when it erred). The transitions stay as the builder holds them, ``(start, finish,
    stimulus id, worker, time)`` tuples: the span encoder writes their bytes from those
    (evlog/exporter/span_encoding.py), and SpanEvents are made only for what iterates (the run folder's
    writer, the SDK's ReadableSpan)."""

    __slots__ = ("trans", "tail")

    def __init__(self, trans: list, tail: tuple = ()):
        self.trans = trans
        self.tail = tail

    def __len__(self) -> int:
        return len(self.trans) + len(self.tail)

    def __iter__(self) -> Iterator[SpanEvent]:
        for start, finish, stim, w, t in self.trans:
            ev = transition_head(start, finish, w)
            ev[STIMULUS_ID] = stim or ""
            yield SpanEvent(TRANSITION, int(t * 1e9), ev)
        yield from self.tail

    def __getitem__(self, i):
        return list(self)[i]

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a list's behaviour: compared by value, not hashable
