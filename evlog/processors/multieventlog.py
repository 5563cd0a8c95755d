"""TimespanLogging's MultiEventLog on OTel span processors.

A ``MultiEventLog`` holds named consumers; every span start and finish in this process becomes one
``Event`` given to each consumer, whose return value (a sub-event) is appended to that consumer's own
stream, so all streams stay index-aligned. Aggregators (e.g. ``LogWindow``) then run with the dict of
streams. ``set_log_sink(ml)`` installs it on the running tracer provider (several logs may be
installed); ``ml.fetch()`` returns ``{name: [sub-events]}`` and clears, as ``get_logs!`` does;
``fetch_logs()`` does that for the process's default log, so ``client.run(evlog.fetch_logs)`` gives each
Dask worker's logs, as Dagger's ``fetch_logs!`` does.

A consumer or aggregator that raises is reported once (with its name) and skipped for that event: its
sub-event is None, the others go on, and the program never sees the error. Streams are bounded by
``maxlen`` (oldest entries dropped from all streams together), so memory stays bounded in long runs.
"""
from __future__ import annotations

import os
import threading
import time
from _thread import get_ident
from collections.abc import Callable
from typing import Any

from evlog import notices
from evlog.processors.on_provider import add_span_processor, takes_span_processors
from evlog.processors.registry import registry
from evlog.processors.spans import Classifier, task_id, worker_of

__all__ = ["Event", "MultiEventLog", "set_log_sink", "unset_log_sink", "fetch_logs", "default_log"]

START, FINISH = "start", "finish"


class Event:
    """One span start or finish, as Dagger's ``TimespanLogging.Event``: kind ("start" or "finish"),
    category, id, timeline (pid, thread, worker), timestamp (ns since the epoch), the span's
    attributes, and the span's name and id."""

    __slots__ = ("kind", "category", "id", "timeline", "timestamp", "attributes", "name", "span_id")

    def __init__(self, kind: str, category: str, id: Any, timeline: tuple, timestamp: int,
                 attributes: dict | None = None, name: str = "", span_id: int = 0):
        self.kind = kind
        self.category = category
        self.id = id
        self.timeline = timeline
        self.timestamp = timestamp
        self.attributes = attributes if attributes is not None else {}
        self.name = name
        self.span_id = span_id

    def __repr__(self) -> str:
        return (f"Event({self.kind!r}, {self.category!r}, {self.id!r}, {self.timeline!r}, {self.timestamp}, "
                f"name={self.name!r})")

    def __eq__(self, other) -> bool:
        return isinstance(other, Event) and all(getattr(self, s) == getattr(other, s) for s in self.__slots__)

    __hash__ = None  # mutable

    def __reduce__(self):
        return (Event, tuple(getattr(self, s) for s in self.__slots__))


class MultiEventLog:
    """Named consumers, one index-aligned stream each, and aggregators run after them (TimespanLogging.MultiEventLog)."""

    def __init__(self, maxlen: int = 50_000):
        if maxlen < 1:
            raise ValueError("maxlen must be at least 1")
        self.maxlen = maxlen
        self.consumers: dict[str, Callable] = {}
        self.aggregators: dict[str, Callable] = {}
        self.errors: dict[str, int] = {}  # name -> times it raised
        self.dropped = 0  # entries dropped from the front of every stream to keep maxlen
        self._streams: dict[str, list] = {}
        self._lock = threading.RLock()

    # -- consumers, as Dagger's ml[:name] = consumer
    def __setitem__(self, name: str, consumer: Callable) -> None:
        if not callable(consumer):
            raise TypeError(f"consumer {name!r} must be callable, got {type(consumer).__name__}")
        with self._lock:
            self.consumers[name] = consumer
            self._sync()

    def __getitem__(self, name: str) -> Callable:
        return self.consumers[name]

    def __delitem__(self, name: str) -> None:
        with self._lock:
            del self.consumers[name]
            self._sync()

    def __contains__(self, name: object) -> bool:
        return name in self.consumers

    def keys(self):
        return self.consumers.keys()

    def _sync(self) -> None:
        """Streams for new consumers (padded with None to the others' length), none for removed ones."""
        streams = self._streams
        n = max((len(s) for s in streams.values()), default=0)
        for name in self.consumers:
            if name not in streams:
                streams[name] = [None] * n
        for name in [k for k in streams if k not in self.consumers]:
            del streams[name]

    # -- events in
    def write(self, event: Event) -> None:
        """Give ``event`` to every consumer, append their sub-events, then run the aggregators."""
        with self._lock:
            streams = self._streams
            if streams.keys() != self.consumers.keys():
                self._sync()
            for name, consumer in list(self.consumers.items()):
                try:
                    sub = consumer(event)
                except Exception as exc:
                    self._failed("consumer", name, exc)
                    sub = None
                streams[name].append(sub)
            if streams:
                n = len(next(iter(streams.values())))
                if n > self.maxlen + (self.maxlen >> 4):
                    cut = n - self.maxlen
                    for s in streams.values():
                        del s[:cut]
                    self.dropped += cut
            for name, agg in list(self.aggregators.items()):
                try:
                    agg(streams)
                except Exception as exc:
                    self._failed("aggregator", name, exc)

    __call__ = write

    def _failed(self, role: str, name: str, exc: Exception) -> None:
        key = f"{role}:{name}"
        self.errors[key] = self.errors.get(key, 0) + 1
        notices.warn_once(f"multieventlog-{id(self)}-{key}",
                          f"{role} {name!r} raised {exc!r}; skipped for this event "
                          f"({'its sub-event is None' if role == 'consumer' else 'the streams are as they were'}), "
                          "the others go on")

    # -- logs out
    def fetch(self) -> dict[str, list]:
        """{name: [sub-events]} for every consumer, then clear the streams (TimespanLogging.get_logs!)."""
        registry.drain()  # spans assembled after the fact (Dask) arrive first
        with self._lock:
            self._sync()
            out = self._streams
            self._streams = {name: [] for name in out}
            return out

    def peek(self) -> dict[str, list]:
        """A copy of the streams, without clearing them."""
        registry.drain()
        with self._lock:
            self._sync()
            return {name: list(s) for name, s in self._streams.items()}

    def __len__(self) -> int:
        with self._lock:
            return max((len(s) for s in self._streams.values()), default=0)

    # -- one process to another (client.run(evlog.set_log_sink, ml)): same set-up, fresh state
    def __getstate__(self):
        return {"maxlen": self.maxlen, "consumers": {n: _similar(c) for n, c in self.consumers.items()},
                "aggregators": {n: _similar(a) for n, a in self.aggregators.items()}}

    def __setstate__(self, state) -> None:
        self.__init__(state["maxlen"])
        self.consumers.update(state["consumers"])
        self.aggregators.update(state["aggregators"])
        self._sync()

    def _fresh(self) -> None:
        """Empty streams and fresh consumer state (Dagger's init_similar), e.g. in a forked child."""
        self._lock = threading.RLock()
        self._streams = {}
        self.errors = {}
        self.dropped = 0
        for table in (self.consumers, self.aggregators):
            for name, obj in list(table.items()):
                table[name] = _similar(obj)
        self._sync()

    def __repr__(self) -> str:
        return f"MultiEventLog(consumers={list(self.consumers)}, aggregators={list(self.aggregators)}, maxlen={self.maxlen})"


def _similar(obj):
    """A copy of a consumer or aggregator with the same set-up and fresh state (Dagger's init_similar),
    if it has an ``init_similar()`` method; else the object itself."""
    init = getattr(obj, "init_similar", None)
    if init is None:
        return obj
    try:
        return init()
    except Exception as exc:
        notices.warn_once(f"init-similar-{type(obj).__name__}", f"{obj!r}.init_similar() raised {exc!r}; keeping it as it was")
        return obj


class LogDispatch:
    """The span processor that turns span starts and finishes into Events for the installed logs (``logs``;
    on an SDK provider through on_provider).

    A span handed over already finished (the Dask instrumentation builds its spans after the fact, in
    batches, and gives them to ``on_end`` only) becomes a start and a finish event with the span's own
    times; such events wait until the batch is over and are then given in time order, so saturation
    consumers see the overlaps. A batch is over when a live span starts or ends, when a log is read
    (``fetch``, ``peek``), or when the next batch begins (50 ms without such a span).

    An Event's timeline starts with this process's pid, or with ``process_of(span)`` where that gives one
    (the run's exporter process names the process each span comes from, evlog/exporter/span_processors.py)."""

    _GAP_S = 0.05
    _PENDING_MAX = 10_000

    def __init__(self, process_of=None):
        self.logs: tuple = ()
        self.process_of = process_of
        self._classifier = Classifier()
        self._started: dict[int, None] = {}  # id(span context) of spans seen starting, not yet ended
        self._pending: list = []  # events of spans handed over finished, not yet given
        self._last_pending = 0.0
        self._lock = threading.Lock()

    def _event(self, kind: str, span, timestamp, thread) -> Event:
        name = span.name
        k = self._classifier.kinds.get(name) or self._classifier.classify(name)
        attrs = span.attributes
        attrs = dict(attrs) if attrs else {}
        pid = self.process_of(span) if self.process_of is not None else None
        return Event(kind, k.category, task_id(span, attrs), (pid or os.getpid(), thread, worker_of(span, attrs)),
                     timestamp, attrs, name, span.context.span_id)

    def _give(self, ev: Event) -> None:
        for log in self.logs:
            log.write(ev)

    def on_start(self, span, parent_context=None) -> None:
        if self.logs:
            try:
                if self._pending:
                    self.flush()
                started = self._started
                if len(started) >= _OPEN_MAX:
                    started.clear()  # spans that never ended
                started[id(span.context)] = None
                self._give(self._event(START, span, span.start_time, get_ident()))
            except Exception as exc:
                notices.warn_once("dispatch-start", f"a log could not take a span start: {exc!r}")

    def on_end(self, span) -> None:
        if self.logs:
            try:
                if self._started.pop(id(span.context), _MISSING) is not _MISSING:
                    if self._pending:
                        self.flush()
                    self._give(self._event(FINISH, span, span.end_time, get_ident()))
                else:
                    self._after_the_fact(span)
            except Exception as exc:
                notices.warn_once("dispatch-end", f"a log could not take a span finish: {exc!r}")

    def _after_the_fact(self, span) -> None:
        attrs = span.attributes
        thread = (attrs.get("thread.id") if attrs else None) or get_ident()
        pair = (self._event(START, span, span.start_time, thread), self._event(FINISH, span, span.end_time, thread))
        now = time.monotonic()
        with self._lock:
            stale = self._pending and (now - self._last_pending > self._GAP_S or len(self._pending) >= self._PENDING_MAX)
        if stale:
            self.flush()
        with self._lock:
            self._pending.extend(pair)
            self._last_pending = now

    def flush(self) -> None:
        """Give the waiting events of spans handed over finished, in time order."""
        with self._lock:
            events, self._pending = self._pending, []
        if events:
            events.sort(key=_timestamp)
            for ev in events:
                self._give(ev)

    def _fresh(self) -> None:
        self._lock = threading.Lock()
        self._started = {}
        self._pending = []


_MISSING = object()
_OPEN_MAX = 100_000


def _timestamp(ev: Event) -> int:
    return ev.timestamp


def _sdk_provider(provider=None):
    if provider is None:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
    if not takes_span_processors(provider):
        notices.warn_once("log-sink-no-sdk", "no OpenTelemetry SDK tracer provider is set in this process "
                          "(run under evlog-instrument or call evlog.configure() first); the log is not installed")
        return None
    return provider


def set_log_sink(log, provider=None, *, default: bool = True) -> bool:
    """Install ``log`` (a MultiEventLog, or any object with ``write(event)`` and ``fetch()``) on the tracer
    provider (the global one unless given); with ``default`` it becomes what ``fetch_logs()`` returns.
    Installing the same log twice does nothing. Returns whether it is installed."""
    try:
        provider = _sdk_provider(provider)
        if provider is None:
            return False
        d = registry.dispatch.get(provider)
        if d is None:
            d = registry.dispatch[provider] = LogDispatch()
            add_span_processor(provider, d)
            registry.changed()
        if not any(x is log for x in d.logs):
            d.logs = d.logs + (log,)
        if default:
            registry.default = log
        return True
    except Exception as exc:
        notices.warn_once("set-log-sink", f"the log could not be installed: {exc!r}")
        return False


def unset_log_sink(log, provider=None) -> bool:
    """Stop feeding ``log``; returns whether it was installed."""
    found = False
    for p, d in list(registry.dispatch.items()):
        if provider is not None and p is not provider:
            continue
        if any(x is log for x in d.logs):
            d.logs = tuple(x for x in d.logs if x is not log)
            found = True
    if registry.default is log:
        registry.default = None
    return found


def default_log():
    """The log ``fetch_logs()`` returns: the last one installed with ``set_log_sink``, else the
    EVLOG_CONSUMERS one, else None."""
    return registry.default if registry.default is not None else registry.builtin


def fetch_logs() -> dict[str, list]:
    """Fetch and clear this process's default log: {name: [sub-events]} ({} if there is none).
    ``client.run(evlog.fetch_logs)`` gives {worker address: logs}, as Dagger's fetch_logs! does."""
    log = default_log()
    if log is None:
        return {}
    try:
        return log.fetch()
    except Exception as exc:
        notices.warn_once("fetch-logs", f"the logs could not be fetched: {exc!r}")
        return {}
