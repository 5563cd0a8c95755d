"""Recorded events -> OTel events: one log record with an ``event_name`` per event.

The record is emitted in the current context, so it carries the current span's trace and span ids;
its body is the event's metadata (made safe by ``log_body.body``), its attribute ``evlog.event_type``
the event's type, its timestamp the event's own (milliseconds) when one was given.
Errors of evlog's own are reported once and never reach the program.
"""
from __future__ import annotations

from typing import Any

from evlog import notices
from evlog.observed.log_body import body, key

SCOPE = "evlog.bridge"
TYPE_ATTR = "evlog.event_type"

_logger = None  # evlog's logger in this process, once evlog is set up


def evlog_logger():
    """The Logger of evlog's own LoggerProvider, or None when evlog is not set up in this process."""
    global _logger
    if _logger is None:
        try:
            from evlog.observed import sdk

            for p in sdk.providers():
                if hasattr(p, "get_logger"):
                    _logger = p.get_logger(SCOPE)
                    break
        except Exception as exc:
            notices.warn_once("bridge-logger", f"events cannot reach OpenTelemetry ({exc!r})")
    return _logger


def reset() -> None:
    """Forget the resolved logger (tests that set evlog up again)."""
    global _logger
    _logger = None


def emit(logger, name: Any, event_type: Any, metadata: Any, timestamp_ms: Any = 0, attributes: dict | None = None) -> None:
    """Emit one event on ``logger``; never raises."""
    try:
        attrs = None if attributes else _type_attrs.get(event_type)
        if attrs is None:
            attrs = _attrs(event_type, attributes)
        logger.emit(
            event_name=name if type(name) is str else key(name),
            body=body(metadata),
            attributes=attrs,
            timestamp=_ns(timestamp_ms) if timestamp_ms else None,
        )
    except Exception as exc:
        notices.warn_once("bridge-emit", f"an event could not be sent to OpenTelemetry ({exc!r}); later ones are counted")


_type_attrs: dict = {}  # event type -> {TYPE_ATTR: type}; the SDK copies attributes, so one dict serves all
_TYPE_ATTRS_MAX = 1024


def _attrs(event_type: Any, extra: dict | None) -> dict:
    text = event_type if type(event_type) is str else key(event_type)
    if extra:
        return {TYPE_ATTR: text, **extra}
    attrs = {TYPE_ATTR: text}
    if len(_type_attrs) < _TYPE_ATTRS_MAX:
        try:
            _type_attrs[event_type] = attrs
        except TypeError:  # an unhashable type
            pass
    return attrs


def _ns(timestamp_ms: Any) -> int | None:
    try:
        return int(timestamp_ms * 1_000_000)
    except Exception:
        notices.warn_once("bridge-timestamp", f"an event timestamp is not a number of milliseconds ({timestamp_ms!r}); "
                          "the time of recording is used")
        return None
