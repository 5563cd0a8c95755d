"""torchelastic's events API (``torchelastic.events``), as a drop-in: Event, handlers, configure, record.

Handlers keep their torchelastic meaning: the handler configured for an event's type is that type's
local destination (the console, nothing, the program's own). Under evlog (evlog-instrument or
evlog.configure) every recorded event *also* becomes an OTel event, whatever its handler, so a
NullEventHandler silences only its local destination. OTelEventHandler makes OTel the destination
itself (useful without evlog, on the program's own OTel SDK); under evlog it does not send twice.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from evlog.observed.torch_events import otel

DEFAULT_TYPE = "torchelastic"


class Event:
    """One occurrence: name, type (which handler processes it), metadata, timestamp in ms (0: not given).

    ``Event(name, type=..., metadata=..., timestamp=...)``; ``event_type=`` is accepted for ``type=``,
    as torchelastic's own examples use it, and both ``.type`` and ``.event_type`` read it.
    """

    __slots__ = ("name", "type", "metadata", "timestamp")

    def __init__(self, name: str, type: str = DEFAULT_TYPE, metadata: dict[str, Any] | None = None,
                 timestamp: int = 0, *, event_type: str | None = None):
        if event_type is not None:
            if type != DEFAULT_TYPE and type != event_type:
                raise TypeError(f"Event got type={type!r} and event_type={event_type!r}: give one of them")
            type = event_type
        self.name = name
        self.type = type
        self.metadata = {} if metadata is None else metadata
        self.timestamp = timestamp

    @property
    def event_type(self) -> str:
        return self.type

    @event_type.setter
    def event_type(self, value: str) -> None:
        self.type = value

    def __repr__(self) -> str:
        return (f"Event(name={self.name!r}, type={self.type!r}, metadata={self.metadata!r}, "
                f"timestamp={self.timestamp!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return (self.name, self.type, self.metadata, self.timestamp) == (
            other.name, other.type, other.metadata, other.timestamp)

    __hash__ = None  # mutable, like torchelastic's dataclass


class EventHandler:
    """The interface of an event destination: subclass it and define ``record(event)``."""

    def record(self, event: Event) -> None:
        raise NotImplementedError


class ConsoleEventHandler(EventHandler):
    """Prints each event on one line of stdout: ``[type] name {metadata as JSON}``.

    Not a bare JSON line on purpose: evlog's console capture would read that as program metadata.
    """

    def __init__(self, stream=None):
        self.stream = stream

    def record(self, event: Event) -> None:
        line = f"[{event.type}] {event.name}"
        if event.metadata:
            try:
                line += " " + json.dumps(event.metadata, default=str)
            except (TypeError, ValueError):  # keys JSON cannot take, cycles
                line += " " + repr(event.metadata)
        print(line, file=self.stream or sys.stdout, flush=True)


class NullEventHandler(EventHandler):
    """The default destination: nothing (under evlog the OTel event still goes out)."""

    def record(self, event: Event) -> None:
        pass


class OTelEventHandler(EventHandler):
    """OTel as the destination: sends each event through ``logger_provider`` (else the global one).

    Under evlog every event goes to OTel anyway; this handler is for programs that set up their own
    OTel SDK without evlog, and it never makes evlog send an event twice.
    """

    def __init__(self, logger_provider=None):
        self.logger_provider = logger_provider
        self._logger = None

    def record(self, event: Event) -> None:
        logger = self._logger
        if logger is None:
            logger = otel.evlog_logger() if self.logger_provider is None else None
            if logger is None:
                try:
                    if self.logger_provider is not None:
                        logger = self.logger_provider.get_logger(otel.SCOPE)
                    else:
                        from opentelemetry import _logs

                        logger = _logs.get_logger(otel.SCOPE)  # a proxy until the program sets a provider
                except Exception as exc:
                    from evlog import notices

                    notices.warn_once("bridge-otel-handler",
                                      f"OTelEventHandler has no OTel logger ({exc!r}); its events are dropped")
                    return
            self._logger = logger
        otel.emit(logger, event.name, event.type, event.metadata, event.timestamp)


# event type -> (handler, whether that handler already sends to OTel); "" is every other type
_routes: dict[str, tuple[EventHandler, bool]] = {}


def configure(handler: EventHandler, event_type: str = "") -> None:
    """Send events of ``event_type`` to ``handler``; ``""`` sets the handler of every other type."""
    _routes[event_type] = (handler, isinstance(handler, OTelEventHandler))


def record_event(event: Event) -> None:
    """Record ``event`` to the destination configured for its type, and, under evlog, to OTel."""
    t = event.type
    route = _routes.get(t) or _routes[""]
    logger = otel._logger
    if logger is None:
        logger = otel.evlog_logger()
    if logger is not None and not route[1]:
        otel.emit(logger, event.name, t, event.metadata, event.timestamp)
    route[0].record(event)


def record(event_name: str, event_type: str = DEFAULT_TYPE, metadata: dict[str, Any] | None = None) -> None:
    """Construct an Event and record it (``record_event``)."""
    record_event(Event(event_name, event_type, metadata))


def reset() -> None:
    """Back to the defaults: NullEventHandler for every type, ConsoleEventHandler for type "console"."""
    _routes.clear()
    configure(NullEventHandler())
    configure(ConsoleEventHandler(), "console")


reset()
