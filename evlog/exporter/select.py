"""Which exporter each signal uses: built in the run's exporter process, the only one that exports.

The choice comes from Settings.exporters (the OTel spec's variables, or the embedded run folder).
Spans go to OTLP through evlog's own sending of the bytes it encodes (evlog.exporter.otlp_send, which
reads every OTEL_EXPORTER_OTLP_* variable the stock span exporters read, with the same meaning); log
records and metrics through the stock OTLP exporters, constructed without arguments so they read those
variables themselves. The observed processes build none of them: their telemetry reaches the exporter
process as records.
"""
from __future__ import annotations

import os
from collections.abc import Callable

from evlog import notices
from evlog.builders.span_data import readable
from evlog.destinations import unknown

SIGNAL_OTLP = {  # spans: evlog.exporter.otlp_send
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
        if signal == "traces":  # evlog sends the spans it encodes (otlp_send); logs and metrics: stock exporters
            def make():
                from evlog.exporter import otlp_send

                return otlp_send.GrpcSpans() if protocol == "grpc" else otlp_send.HttpSpans(json=protocol == "http/json")
        else:
            module, cls = SIGNAL_OTLP[(signal, protocol)]

            def make():
                return _import(module, cls)()

        make.otlp = True  # its metric preferences come from OTEL_EXPORTER_OTLP_METRICS_* (metric_preferences)
        return make
    if kind == "console":
        module, cls = CONSOLE[signal]
        return _sdk_spans(signal, lambda: _import(module, cls)())
    # any other name: an exporter entry point, as opentelemetry-instrument resolves it
    from importlib.metadata import entry_points

    eps = list(entry_points(group=f"opentelemetry_{signal}_exporter", name=kind))
    if not eps:
        if not os.environ.get("EVLOG_CONFIG_REPORTED"):  # else the run's owner said so at its start
            notices.warn_once(f"exporter-{signal}-{kind}", unknown(signal, kind))
        return None
    return _sdk_spans(signal, lambda: eps[0].load()())


def _sdk_spans(signal: str, make: Callable[[], object]) -> Callable[[], object]:
    """``make`` for a span exporter that takes the SDK's ReadableSpans (the console's, an entry point's): the
    builders' SpanData are made ReadableSpans for it. Other signals' exporters as they are."""
    if signal != "traces":
        return make

    def made():
        exporter = make()
        return None if exporter is None else TakesSdkSpans(exporter)

    return made


class TakesSdkSpans:
    """A span exporter given ReadableSpans made of the SpanData it is handed."""

    def __init__(self, exporter):
        self.exporter = exporter

    def export(self, spans):
        return self.exporter.export([readable(s) for s in spans])

    def shutdown(self):
        return self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def _runfolder(signal: str, run_dir: str):
    from evlog.exporter import run_writer as runfolder

    return {"traces": runfolder.span_exporter, "logs": runfolder.log_exporter, "metrics": runfolder.metric_exporter}[
        signal
    ](run_dir)
