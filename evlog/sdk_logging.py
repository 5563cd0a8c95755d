"""The OpenTelemetry SDK's own log records -> evlog's notices: one line per kind of problem, then counted.

Every evlog process that runs the SDK routes them here (the observed processes when they build a
provider, the run's exporter process at its start), so a problem of the SDK is said the way evlog says
its own (evlog.notices), never as a logging traceback in the program's output. ``logging`` is imported
only then: an observed process that builds no provider never imports it for evlog.
"""
from __future__ import annotations

from evlog import notices

_handler: list = []  # the one handler, once made


def route_sdk_logging() -> None:
    """Route the ``opentelemetry.sdk`` logger's WARNING and up to evlog's notices (once per process)."""
    import logging

    if not _handler:
        class ToNotices(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                _say(record)

        _handler.append(ToNotices(logging.WARNING))
    lg = logging.getLogger("opentelemetry.sdk")
    if _handler[0] not in lg.handlers:
        lg.addHandler(_handler[0])
    lg.propagate = False


def _say(record) -> None:
    if record.levelno < 30:  # below logging.WARNING
        return
    try:
        msg = record.getMessage()
    except Exception:
        msg = str(record.msg)
    first = notices.clip(msg.splitlines()[0] if msg else record.name)
    notices.warn_once(f"sdk-{record.name}", f"{first} (further messages like this are counted, not shown)")
