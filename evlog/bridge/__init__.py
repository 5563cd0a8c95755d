"""torchelastic-style events on OpenTelemetry: a drop-in for ``torchelastic.events``.

    from evlog.bridge import Event, record_event, record, configure, ConsoleEventHandler
    configure(ConsoleEventHandler(), event_type="foo")
    record_event(Event(name="test_event", event_type="foo"))   # printed, and an OTel event under evlog

See docs/torch.md. Under evlog every recorded event is also an OTel event named as the Event, with
attribute ``evlog.event_type`` and the metadata as body, in the current span's context.
"""
from evlog.bridge.api import (
    ConsoleEventHandler,
    Event,
    EventHandler,
    NullEventHandler,
    OTelEventHandler,
    configure,
    record,
    record_event,
)

__all__ = [
    "Event",
    "EventHandler",
    "ConsoleEventHandler",
    "NullEventHandler",
    "OTelEventHandler",
    "configure",
    "record_event",
    "record",
]
