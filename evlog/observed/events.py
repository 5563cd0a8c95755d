"""What this process saw: bounded ledgers of structured events and of task transitions.

Dask keeps its structured events (``Client.get_events``) and transition log (``Scheduler.story``)
in the scheduler's memory, bounded, and gone when it exits. evlog sends both out as telemetry (so
``evlog events`` and ``evlog story`` answer later, from a run folder or a collector) and keeps what
this process saw here, so a program can ask without a round trip:

- ``log_event(topic, msg)``: a structured event from any process. Kept here and emitted as the OTel
  event ``evlog.log_event`` (attribute ``evlog.topic``, body ``msg``) in the current span's context.
  ``topic`` may be a list of topics, as in Dask: one entry (and one event) per topic.
- ``get_events(topic=None)``: ``((time, msg), ...)`` for one topic, or ``{topic: (...)}``, like
  ``Client.get_events``. Dask's own ``log_event`` calls seen in this process are here too.
- ``story(*keys_or_stimuli)``: the scheduler transitions this process made for those task keys (or
  stimulus ids), ``[Transition(key, start, finish, stimulus_id, worker, time), ...]`` in time order,
  like ``Scheduler.story``. Empty in a process that runs no Dask scheduler.

Bounds: EVENTS_PER_TOPIC events per topic, TOPICS topics (the oldest topic goes first), and the
newest TRANSITIONS transitions; older entries are dropped. The ledger answers for what the scheduler
is doing now and did last, as Dask's own ``Scheduler.story`` does from its transition log (bounded
by ``distributed.admin.low-level-log-length``, 1,000 in Dask 2026.8); the whole run's story is in its
telemetry (``evlog story KEY RUN_DIR``), so the ledger's memory stays the same for a graph of a
thousand tasks or a million.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from evlog import notices, stats

EVENTS_PER_TOPIC = 10_000
TOPICS = 1_024
TRANSITIONS = 20_000  # about 4,000 tasks' stories; a few MB in the scheduler's process
EVENT_NAME = "evlog.log_event"
TOPIC_ATTRIBUTE = "evlog.topic"


class Transition(NamedTuple):
    """One scheduler transition of a task, as ``evlog.story`` returns it."""

    key: Any
    start: str
    finish: str
    stimulus_id: str
    worker: str | None
    time: float


_events: dict[str, deque] = {}
_transitions: deque = deque(maxlen=TRANSITIONS)
_lock = threading.Lock()
_flushers: list[Callable[[], None]] = []  # called before a read: push out what is still buffered
_logger = None
_body = None


# ---- structured events -------------------------------------------------------------------------

def log_event(topic: str | Iterable[str], msg: Any) -> None:
    """Record a structured event here and emit it as ``evlog.log_event``; never raises."""
    try:
        publish(topic, msg)
    except Exception as exc:
        notices.warn_once("log-event", f"log_event failed, the event is dropped: {exc!r}")


def publish(topic: str | Iterable[str], msg: Any, event_name: str = EVENT_NAME,
            topic_attribute: str = TOPIC_ATTRIBUTE) -> None:
    """Keep the event in this process's ledger and emit it, once per topic (Dask's log_event uses
    event name ``dask.log_event`` and attribute ``dask.topic``)."""
    for name in _topics(topic):
        record_event(name, msg)
        emit(event_name, topic_attribute, name, msg)


def record_event(topic: str, msg: Any, when: float | None = None) -> None:
    """Keep ``(when, msg)`` in this process's ledger for ``topic`` (no telemetry)."""
    entry = (time.time() if when is None else when, msg)
    with _lock:
        q = _events.get(topic)
        if q is None:
            if len(_events) >= TOPICS:
                del _events[next(iter(_events))]
            q = _events[topic] = deque(maxlen=EVENTS_PER_TOPIC)
        q.append(entry)


def get_events(topic: str | None = None):
    """``((time, msg), ...)`` seen in this process for ``topic``; all topics as a dict if None."""
    with _lock:
        if topic is not None:
            return tuple(_events.get(topic, ()))
        return {name: tuple(q) for name, q in _events.items() if q}


def emit(event_name: str, topic_attribute: str, topic: str, msg: Any, attributes: dict | None = None) -> None:
    """Emit one OTel event (a log record with ``event_name``) in the current context."""
    global _logger, _body
    if _logger is None:
        from evlog.observed.log_body import body
        from evlog.observed.own_logs import Logger  # no SDK until the program makes logs of its own

        _logger, _body = Logger("evlog.events"), body
    attrs = {topic_attribute: str(topic)}
    if attributes:
        attrs.update(attributes)
    # Dask messages hold sets, tuples, numpy numbers and objects: made an OTel AnyValue as evlog.bridge's
    # event metadata is (log_body; one value the exporter cannot encode would lose its whole batch)
    _logger.emit(event_name=event_name, body=_body(msg), attributes=attrs)
    stats.incr("events")


def _topics(topic) -> list[str]:
    if isinstance(topic, str):
        return [topic]
    return [str(t) for t in topic]


# ---- transitions -------------------------------------------------------------------------------

def record_transitions(items: Sequence[tuple]) -> None:
    """Keep scheduler transitions as the Dask instrumentation records them, ``(key, start, finish,
    stimulus_id, time, extra, info)`` tuples (evlog/wire/dask.py), in batches, as ``(key, start, finish,
    stimulus_id, worker, time)`` tuples of atoms; made Transitions only when read. Records with no key
    (a worker's removal) are skipped then.

    Neither ``info`` (a task's first record carries its trace carrier, a dict) nor the rest of ``extra``
    (a finished task's dependencies, size and error) is kept: a tuple of atoms leaves the garbage
    collector's lists, and what a story does not show would be the ledger's largest part. Only the batch's
    last TRANSITIONS are made entries: the ledger keeps no more (a big graph's submission can record more
    than that between two shipments)."""
    if len(items) > TRANSITIONS:
        items = items[-TRANSITIONS:]
    # One expression, no call per transition: this runs on the scheduler's process, for every transition (the
    # fields of evlog.wire.dask.Transition; the worker is ``extra`` itself for processing, its first field
    # for memory and erred). extend is atomic under the GIL.
    _transitions.extend([
        (key, start, finish, stimulus,
         extra if finish == "processing" else
         extra[0] if (finish == "memory" or finish == "erred") and extra is not None else None,
         time)
        for key, start, finish, stimulus, time, extra, _info in items])


def story(*keys_or_stimuli: Any) -> list[Transition]:
    """Transitions this process's scheduler made for these keys or stimulus ids, in time order."""
    for flush in list(_flushers):
        try:
            flush()
        except Exception as exc:
            notices.warn_once("story-flush", f"cannot read the newest transitions: {exc!r}")
    wanted = set()
    for k in keys_or_stimuli:
        try:
            wanted.add(k)
        except TypeError:  # an unhashable key (a list): compare as text
            pass
        wanted.add(str(k))
    out = [Transition(*t) for t in list(_transitions)
           if t[0] is not None and (t[0] in wanted or t[3] in wanted or str(t[0]) in wanted)]
    out.sort(key=lambda t: t.time)
    return out


def add_flusher(fn: Callable[[], None]) -> None:
    """``fn()`` runs before ``story()`` reads, to move buffered transitions into the ledger."""
    if fn not in _flushers:
        _flushers.append(fn)


def remove_flusher(fn: Callable[[], None]) -> None:
    if fn in _flushers:
        _flushers.remove(fn)


def reset() -> None:
    """Forget everything (tests)."""
    with _lock:
        _events.clear()
    _transitions.clear()
