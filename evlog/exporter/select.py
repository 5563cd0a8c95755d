"""Which exporter each signal uses: built in the run's exporter process, the only one that exports.

The choice comes from Settings.exporters (the OTel spec's variables, or the embedded run folder).
OTLP exporters are constructed without arguments so they read every OTEL_EXPORTER_OTLP_* variable
themselves (endpoint, headers, timeout, certificates, compression), as the spec says. The observed
processes build none of them: their telemetry reaches the exporter process as records.
"""
from __future__ import annotations

import os
from typing import Callable

from evlog import notices
from evlog.destinations import unknown

SIGNAL_OTLP = {
    ("traces", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.trace_exporter", "OTLPSpanExporter"),
    ("traces", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "OTLPSpanExporter"),
    ("logs", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc._log_exporter", "OTLPLogExporter"),
    ("logs", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http._log_exporter", "OTLPLogExporter"),
    ("metrics", "grpc"): ("opentelemetry.exporter.otlp.proto.grpc.metric_exporter", "OTLPMetricExporter"),
    ("metrics", "http/protobuf"): ("opentelemetry.exporter.otlp.proto.http.metric_exporter", "OTLPMetricExporter"),
}
CONSOLE = {
    "traces": ("opentelemetry.sdk.trace.export", "ConsoleSpanExporter"),
    "logs": ("opentelemetry.sdk._logs.export", "ConsoleLogRecordExporter"),
    "metrics": ("opentelemetry.sdk.metrics.export", "ConsoleMetricExporter"),
}


def _import(module: str, name: str):
    import importlib

    return getattr(importlib.import_module(module), name)


def factory(signal: str, kind: str, settings) -> Callable[[], object] | None:
    """A zero-argument constructor for one exporter, or None (reported) if it cannot be had."""
    if kind == "file":
        run_dir = settings.run_dir
        return lambda: _runfolder(signal, run_dir)
    if kind == "otlp":
        protocol = settings.exporters.protocol[signal]
        module, cls = SIGNAL_OTLP[(signal, protocol)]
        def make():
            return _import(module, cls)()

        make.otlp = True  # its metric preferences come from OTEL_EXPORTER_OTLP_METRICS_* (metric_preferences)
        return make
    if kind == "console":
        module, cls = CONSOLE[signal]
        return lambda: _import(module, cls)()
    # any other name: an exporter entry point, as opentelemetry-instrument resolves it
    from importlib.metadata import entry_points

    eps = list(entry_points(group=f"opentelemetry_{signal}_exporter", name=kind))
    if not eps:
        if not os.environ.get("EVLOG_CONFIG_REPORTED"):  # else the run's owner said so at its start
            notices.warn_once(f"exporter-{signal}-{kind}", unknown(signal, kind))
        return None
    return lambda: eps[0].load()()


def _runfolder(signal: str, run_dir: str):
    from evlog.exporter import run_writer as runfolder

    return {"traces": runfolder.span_exporter, "logs": runfolder.log_exporter, "metrics": runfolder.metric_exporter}[
        signal
    ](run_dir)


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
            from evlog.observed.sdk import clip

            note_failure()
            first = clip(msg.splitlines()[0] if msg else record.name)
            notices.warn_once("export", f"exporting failed ({first}){hint(msg)}; failed batches are retried, "
                              "what cannot be sent by the end of the run is dropped and counted")

    lg = logging.getLogger("opentelemetry.exporter")
    lg.addHandler(ToReport(logging.WARNING))
    lg.propagate = False


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
