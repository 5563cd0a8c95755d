"""Which exporter each signal uses, built lazily in the process (and thread) that exports.

The choice comes from Settings.exporters (the OTel spec's variables, or the embedded run folder).
OTLP exporters are constructed without arguments so they read every OTEL_EXPORTER_OTLP_* variable
themselves (endpoint, headers, timeout, certificates, compression), as the spec says. They are built on
first export, in the batch processor's thread, and again after a fork: the gRPC/HTTP import stays off
the program's start-up, and no child shares its parent's channel.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

from evlog import _report, stats
from evlog.bootstrap import forkguard

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
        if protocol == "grpc":
            # gRPC's C core writes its own lines (a failed TLS handshake, ...) to stderr at its INFO
            # level; evlog reports the export error itself. GRPC_VERBOSITY=ERROR is gRPC's documented
            # default, and a user's value wins.
            os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
        return lambda: _import(module, cls)()
    if kind == "console":
        module, cls = CONSOLE[signal]
        return lambda: _import(module, cls)()
    # any other name: an exporter entry point, as opentelemetry-instrument resolves it
    from opentelemetry.util._importlib_metadata import entry_points

    eps = list(entry_points(group=f"opentelemetry_{signal}_exporter", name=kind))
    if not eps:
        _report.warn_once(
            f"exporter-{signal}-{kind}",
            f"OTEL_{signal.upper()}_EXPORTER: no exporter named {kind!r} is installed; {signal} go nowhere",
        )
        return None
    return lambda: eps[0].load()()


def _runfolder(signal: str, run_dir: str):
    from . import runfolder

    return {"traces": runfolder.span_exporter, "logs": runfolder.log_exporter, "metrics": runfolder.metric_exporter}[
        signal
    ](run_dir)


def describe(settings) -> str:
    """Where telemetry goes, for the summary and messages (no secrets: headers are never shown)."""
    ex = settings.exporters
    if ex.embedded:
        return settings.run_dir or "the run folder"
    kinds = sorted({k for s in ("traces", "metrics", "logs") for k in ex.for_signal(s)})
    parts = []
    for k in kinds:
        if k == "file":
            parts.append(settings.run_dir or "the run folder")
        elif k == "otlp":
            parts.append(f"OTLP {ex.protocol['traces']} {ex.endpoint or _default_endpoint(ex.protocol['traces'])}")
        else:
            parts.append(k)
    return ", ".join(parts) or "nowhere (exporters set to none)"


def _default_endpoint(protocol: str) -> str:
    return "http://localhost:4317" if protocol == "grpc" else "http://localhost:4318"


_all: list = []  # every managed exporter of this process
_building = threading.Lock()  # held while an exporter (and its gRPC/HTTP modules) is built


forkguard.hold(_building)  # a fork waits for an exporter being built


_noted = [False]


def note_failure() -> None:
    """An exporter said it is failing (retrying): exit will not wait long for it, until an export succeeds."""
    _noted[0] = True


def any_failed() -> bool:
    """Is an exporter of this process failing now (its last export failed, or it is retrying)? Then exit
    does not wait long for a dead collector. A collector that failed and came back gets the full wait."""
    return _noted[0] or any(e.failed for e in _all)


def abandon() -> int:
    """Exit stops waiting for this process's exports under way (a collector that does not answer):
    their items are dropped, counted here once; returns how many."""
    n = 0
    for e in _all:
        if e._pid == os.getpid() and e.in_flight:
            e.abandoned = True
            n += e.in_flight
    return n


class _Lazy:
    """Shared part of the managed exporters: build per process on first use; count what passes."""

    def __init__(self, signal: str, make: Callable[[], object]):
        _all.append(self)
        self._signal = signal
        self._make = make
        self._inner = None
        self._pid = -1
        self.failed = False
        self.in_flight = 0  # items of the export under way (lost if exit stops waiting for it)
        self.abandoned = False  # exit gave up on it: its in-flight items are counted as dropped already

    def inner(self):
        pid = os.getpid()
        if self._inner is None or self._pid != pid:
            self._pid = pid
            try:
                forkguard.register_last()
                with _building:  # a fork waits for it: a half-imported grpc in the child would stay broken
                    self._inner = self._make()
            except Exception as exc:  # a bad certificate path, a missing package, ...
                _report.warn_once(f"exporter-build-{self._signal}", f"cannot set up the {self._signal} exporter: {exc}")
                self._inner = None
                self._make = lambda: None
        return self._inner

    def counted(self, n: int, ok: bool) -> None:
        self.in_flight = 0
        if self.abandoned:
            return
        if ok:
            stats.incr(f"{self._signal}.exported", n)
            if self.failed or _noted[0]:  # it answers again
                self.failed = _noted[0] = False
        else:
            self.failed = True
            stats.incr(f"{self._signal}.failed", n)
        stats.write_process_line(final=False)  # counted even if this process is killed before its exit


def managed_span_exporter(make):
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class ManagedSpanExporter(SpanExporter, _Lazy):
        def __init__(self):
            _Lazy.__init__(self, "traces", make)

        def export(self, spans):
            inner = self.inner()
            ok = False
            self.in_flight = len(spans)
            if inner is not None:
                try:
                    ok = inner.export(spans) == SpanExportResult.SUCCESS
                except Exception as exc:
                    _report.warn_once("export-traces", f"exporting spans failed: {exc}")
            self.counted(len(spans), ok)
            return SpanExportResult.SUCCESS if ok else SpanExportResult.FAILURE

        def shutdown(self):
            if self._inner is not None and self._pid == os.getpid():
                self._inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return ManagedSpanExporter()


def managed_log_exporter(make):
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class ManagedLogExporter(LogRecordExporter, _Lazy):
        def __init__(self):
            _Lazy.__init__(self, "logs", make)

        def export(self, batch):
            inner = self.inner()
            ok = False
            self.in_flight = len(batch)
            if inner is not None:
                try:
                    ok = inner.export(batch).name == "SUCCESS"
                except Exception as exc:
                    _report.warn_once("export-logs", f"exporting events and logs failed: {exc}")
            self.counted(len(batch), ok)
            return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

        def shutdown(self):
            if self._inner is not None and self._pid == os.getpid():
                self._inner.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    return ManagedLogExporter()


def managed_metric_exporter(make):
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    eager = None
    if os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") or os.environ.get(
        "OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION"
    ):
        eager = make()  # its preferences must be known before the reader starts

    class ManagedMetricExporter(MetricExporter, _Lazy):
        def __init__(self):
            _Lazy.__init__(self, "metrics", make)
            if eager is not None:
                super().__init__(eager._preferred_temporality, eager._preferred_aggregation)
                self._inner, self._pid = eager, os.getpid()
            else:
                super().__init__()

        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
            n = sum(len(m.data.data_points) for rm in metrics_data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics)
            if not n:
                return MetricExportResult.SUCCESS  # nothing to send: no reason to build an exporter
            inner = self.inner()
            ok = False
            self.in_flight = n
            if inner is not None:
                try:
                    ok = inner.export(metrics_data, timeout_millis=timeout_millis) == MetricExportResult.SUCCESS
                except Exception as exc:
                    _report.warn_once("export-metrics", f"exporting metrics failed: {exc}")
            self.counted(n, ok)
            return MetricExportResult.SUCCESS if ok else MetricExportResult.FAILURE

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
            if self._inner is not None and self._pid == os.getpid():
                self._inner.shutdown()

    return ManagedMetricExporter()
