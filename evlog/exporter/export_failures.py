"""Is the collector failing, and how that is said: one evlog line for the run, whatever the exporter.

The exporter process's _Sinks call ``answered`` after an export that went through; evlog's own span
sending (otlp_send) calls ``export_failed`` for each failed export, and the stock exporters of log
records and metrics say theirs through Python logging (``route_exporter_logging``). Exit stops waiting
long for a collector that is failing (``failing``).
"""
from __future__ import annotations

from evlog import notices

_failing = [False]


def note_failure() -> None:
    """An exporter said it is failing (retrying): exit will not wait long for it, until an export succeeds."""
    _failing[0] = True


def answered() -> None:
    """An export went through: a collector that failed and came back gets exit's full wait again."""
    _failing[0] = False


def failing() -> bool:
    return _failing[0]


def route_exporter_logging() -> None:
    """The stock exporters' log records (a collector that does not answer, a refused request) -> one evlog
    line for the run, with what to do where the cause is known from the text; exit then stops waiting
    long for the collector (``note_failure``)."""
    import logging

    class ToReport(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno < logging.WARNING:
                return
            try:
                msg = record.getMessage()
            except Exception:
                msg = str(record.msg)
            export_failed(msg or record.name)

    lg = logging.getLogger("opentelemetry.exporter")
    lg.addHandler(ToReport(logging.WARNING))
    lg.propagate = False


def export_failed(error: str) -> None:
    """An export failed (``error``: what the exporter said): one evlog line for the run, with what to do
    where the cause is known from the text; exit then stops waiting long for the collector (``note_failure``)."""
    note_failure()
    notices.warn_once("export", f"exporting failed ({notices.clip(error.splitlines()[0] if error else 'no reason given')})"
                      f"{hint(error)}; failed batches are retried, what cannot be sent by the end of the run is "
                      "dropped and counted")


def hint(error: str) -> str:
    """What to do about an export error whose cause is known from its text."""
    upper = error.upper()
    if "WRONG_VERSION_NUMBER" in upper:  # TLS spoken to a port that does not speak it
        return "; the endpoint is https:// but the collector's port does not speak TLS: use http:// for a plain port"
    if "HTTP1.X SERVER" in upper or ("HTTP/2" in upper and "PARS" in upper):  # gRPC spoken to an HTTP/1.1 port
        # (grpcio 1.63: "Trying to connect an http1.x server"; 1.85 adds "Failed parsing HTTP/2 (...)")
        return ("; the endpoint's port speaks HTTP/1.1, not gRPC: set OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf "
                "for an OTLP/HTTP port (4318; evlog serve's too), or point the endpoint at the gRPC port (4317)")
    if "UNAUTHENTICATED" in upper or "UNAUTHORIZED" in upper:  # gRPC's code, HTTP 401's reason
        return ("; the collector wants credentials: set them in OTEL_EXPORTER_OTLP_HEADERS (for `evlog serve "
                "--token`: authorization=Bearer%20<token>)")
    return ""
