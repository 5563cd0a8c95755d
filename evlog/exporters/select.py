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
            # gRPC is not fork-safe once a process has used it unless its fork support is on (it pauses
            # gRPC's threads around fork): a child forked after evlog's first gRPC export could crash
            # with SIGSEGV or hang (tests/test_launcher.py's fork child: 9 of 18 runs on grpcio
            # 1.63, 1 of 24 with it on). Read when grpc is first imported; a user's value wins.
            os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "true")

        def make():
            return _import(module, cls)()

        make.otlp = True  # its metric preferences come from OTEL_EXPORTER_OTLP_METRICS_* (metric_preferences)
        make.grpc = protocol == "grpc"  # its exports hold _grpc_calls
        return make
    if kind == "console":
        module, cls = CONSOLE[signal]
        return lambda: _import(module, cls)()
    # any other name: an exporter entry point, as opentelemetry-instrument resolves it
    from importlib.metadata import entry_points

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

# A fork waits (GRPC_WAIT at most) for an OTLP/gRPC export under way. gRPC's fork support
# (GRPC_ENABLE_FORK_SUPPORT, above) does not cover a call in flight: a child forked then could crash or
# hang at its exit flush (tests/test_launcher.py's fork child on grpcio 1.85: 5 of 6 runs before, 0 of 38
# after). A healthy export takes milliseconds; while the collector is failing, exports do not hold it, so
# a fork never waits on a dead collector.
GRPC_WAIT = 1.0
_grpc_calls = threading.Lock()
forkguard.hold(_grpc_calls, wait=GRPC_WAIT, quiet=True)


_noted = [False]


def note_failure() -> None:
    """An exporter said it is failing (retrying): exit will not wait long for it, until an export succeeds."""
    _noted[0] = True


def any_failed() -> bool:
    """Is an exporter of this process failing now (its last export failed, or it is retrying)? Then exit
    does not wait long for a dead collector. A collector that failed and came back gets the full wait."""
    return _noted[0] or any(e.failed for e in _all)


# Modules the exporters' first request imports (requests reads ~/.netrc per request; a hostname is
# encoded with the idna codec): imported here, under the build lock, so that the first export, in a
# background thread, never imports them while the program forks (a child inheriting a module lock taken
# mid-import hangs at its first request: seen with a fork child's exit flush over OTLP/HTTP).
_LAZY_IMPORTS = ("netrc", "encodings.idna")


def _import_lazy_modules() -> None:
    import importlib

    for name in _LAZY_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def abandon() -> dict:
    """Exit stops waiting for this process's exports under way (a collector that does not answer): they
    are no longer counted when they end; returns {signal: items given up}."""
    out: dict = {}
    for e in _all:
        if e._pid == os.getpid() and e.in_flight:
            e.abandoned = True
            out[e._signal] = out.get(e._signal, 0) + e.in_flight
    return out


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
        self._guard = _grpc_calls if getattr(make, "grpc", False) else None

    def call(self, export, *args, **kwargs):
        """``export(*args, **kwargs)`` of the inner exporter; an OTLP/gRPC one holds _grpc_calls while its
        collector answers (a fork waits for it)."""
        if self._guard is None or any_failed():
            return export(*args, **kwargs)
        with self._guard:
            return export(*args, **kwargs)

    def inner(self):
        pid = os.getpid()
        if self._inner is None or self._pid != pid:
            self._pid = pid
            try:
                forkguard.register_last()
                with _building:  # a fork waits for it: a half-imported grpc in the child would stay broken
                    self._inner = self._make()
                    _import_lazy_modules()
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
        stats.progress()  # counted even if this process is killed before its exit


def _with_resource(items, current, remake):
    """``items`` with the process's current Resource (``current()``), remade by ``remake(item, resource)``
    only where an item carries another one (a provider built before a role was known, a forked child)."""
    if current is None or not items:
        return items
    res = current()
    if all(i.resource is res for i in items):
        return items
    return [i if i.resource is res else remake(i, res) for i in items]


def _span_with(s, res):
    from opentelemetry.sdk.trace import ReadableSpan

    return ReadableSpan(s.name, context=s.context, parent=s.parent, resource=res, attributes=s.attributes,
                        events=s.events, links=s.links, kind=s.kind, status=s.status, start_time=s.start_time,
                        end_time=s.end_time, instrumentation_scope=s.instrumentation_scope)


def _log_with(r, res):
    from opentelemetry.sdk._logs import ReadableLogRecord

    return ReadableLogRecord(r.log_record, res, r.instrumentation_scope)


def managed_span_exporter(make, resource=None):
    """The exporter ``make()`` builds, made per process on first use, counted; with ``resource`` (a getter
    of the process's current Resource), what it exports carries that resource."""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class ManagedSpanExporter(SpanExporter, _Lazy):
        def __init__(self):
            _Lazy.__init__(self, "traces", make)

        def export(self, spans):
            spans = _with_resource(spans, resource, _span_with)
            inner = self.inner()
            ok = False
            self.in_flight = len(spans)
            if inner is not None:
                try:
                    ok = self.call(inner.export, spans) == SpanExportResult.SUCCESS
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


def managed_log_exporter(make, resource=None):
    from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult

    class ManagedLogExporter(LogRecordExporter, _Lazy):
        def __init__(self):
            _Lazy.__init__(self, "logs", make)

        def export(self, batch):
            batch = _with_resource(batch, resource, _log_with)
            inner = self.inner()
            ok = False
            self.in_flight = len(batch)
            if inner is not None:
                try:
                    ok = self.call(inner.export, batch).name == "SUCCESS"
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


def metric_preferences() -> dict:
    """The temporality and aggregation preferences an OTLP metric exporter takes from
    OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE (cumulative, delta, lowmemory) and
    OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION (explicit_bucket_histogram,
    base2_exponential_bucket_histogram), as the specification defines them: known before the
    exporter is built (the reader asks at its start), without reading the exporter's own fields."""
    from opentelemetry.sdk.metrics import (
        Counter,
        Histogram,
        ObservableCounter,
        ObservableGauge,
        ObservableUpDownCounter,
        UpDownCounter,
    )
    from opentelemetry.sdk.metrics.export import AggregationTemporality
    from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation

    delta, cumulative = AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE
    pref = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") or "cumulative").strip().lower()
    deltas = {"delta": (Counter, Histogram, ObservableCounter), "lowmemory": (Counter, Histogram)}.get(pref)
    if deltas is None and pref != "cumulative":
        _report.warn_once("metrics-temporality", f"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE={pref!r} is "
                          "not cumulative, delta or lowmemory; using cumulative")
    kinds = (Counter, UpDownCounter, Histogram, ObservableCounter, ObservableUpDownCounter, ObservableGauge)
    out = {"preferred_temporality": {k: delta if k in (deltas or ()) else cumulative for k in kinds}}
    agg = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION") or "").strip().lower()
    if agg == "base2_exponential_bucket_histogram":
        out["preferred_aggregation"] = {Histogram: ExponentialBucketHistogramAggregation()}
    elif agg and agg != "explicit_bucket_histogram":
        _report.warn_once("metrics-aggregation", f"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION={agg!r} "
                          "is not explicit_bucket_histogram or base2_exponential_bucket_histogram; using the first")
    return out


def _metrics_with(data, current):
    """MetricsData with the process's current Resource (see _with_resource)."""
    if current is None:
        return data
    res = current()
    if all(rm.resource is res for rm in data.resource_metrics):
        return data
    from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics

    return MetricsData([rm if rm.resource is res else ResourceMetrics(res, rm.scope_metrics, rm.schema_url)
                        for rm in data.resource_metrics])


def managed_metric_exporter(make, resource=None):
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    prefs = metric_preferences() if getattr(make, "otlp", False) else {}

    class ManagedMetricExporter(MetricExporter, _Lazy):
        def __init__(self):
            _Lazy.__init__(self, "metrics", make)
            super().__init__(**prefs)

        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
            n = sum(len(m.data.data_points) for rm in metrics_data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics)
            if not n:
                return MetricExportResult.SUCCESS  # nothing to send: no reason to build an exporter
            metrics_data = _metrics_with(metrics_data, resource)
            inner = self.inner()
            ok = False
            self.in_flight = n
            if inner is not None:
                try:
                    ok = self.call(inner.export, metrics_data, timeout_millis=timeout_millis) == MetricExportResult.SUCCESS
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
