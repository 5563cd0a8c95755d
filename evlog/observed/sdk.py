"""SDK set-up: one TracerProvider, LoggerProvider and MeterProvider per process, set as OTel globals.

Each provider is built when the program first uses it, not at start-up: every child process pays its
start-up, and a process whose program never asks for a tracer, a logger or a meter never imports that
part of the SDK (what evlog makes itself takes its own path: own_metrics.py, own_logs.py, own_spans.py).
What stands in as the global until then is a ``Lazy*Provider`` of this module: it is set as the OTel
global as soon as the OTel API module of its signal is imported (a post-import hook), and it builds
the real SDK provider on the first call that needs it (get_tracer, get_logger, get_meter, or any other
attribute of the SDK provider). ``when_built`` runs set-up that belongs with a provider (the span
processors of evlog's consumers and console marks) then. Its ``force_flush`` (lifecycle.flush, the
exit) also hands over what evlog's own paths hold: a last collection of its own instruments.

The providers export nothing themselves: a span processor, a log record processor and a metric exporter
on the SDK's periodic reader hand what they get to the run's exporter process as records
(evlog/observed/sdk_records.py), and that process exports it with the run's exporters. A signal whose
exporters are all ``none`` gets none of them. The user's OTEL_* values always win: the sampler and
OTEL_METRIC_EXPORT_* are validated in evlog.config (SDK_NUMBERS) and passed to the SDK from the
settings (a bad value falls back to the default with one message), span and log limits are the SDK's
own (OTEL_SPAN_*/OTEL_LOGRECORD_*), and evlog's default metric interval (1 s) applies only where the
variable is unset. Resource attributes from OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME override evlog's.
"""
from __future__ import annotations

import os
import sys

from evlog import notices, stats
from evlog.observed import forkguard, lifecycle
from evlog.observed import resource as _resource_attrs
from evlog.sdk_logging import route_sdk_logging

service_name = _resource_attrs.service_name
process_attributes = _resource_attrs.process_attributes
resource_attributes = _resource_attrs.attributes

_providers: list = []  # the (traces, logs, metrics) Lazy*Providers of this process, for flush and resource updates
_lock = _resource_attrs.lock  # held while a provider is built (re-entered when one build needs another)
forkguard.hold(_lock)  # a fork waits for a build: half-imported SDK modules would stay broken in the child
def build_resource():
    return export_resource()


def _build_traces(resource, settings):
    """A TracerProvider with the run's sampler, whose finished spans become records."""
    from opentelemetry.sdk.trace import TracerProvider

    from evlog.observed.sdk_records import SpanRecords

    provider = TracerProvider(resource=resource, sampler=sampler(settings.sampler), shutdown_on_exit=False)
    if settings.exporters.traces:
        provider.add_span_processor(SpanRecords())
    return provider


def _build_logs(resource, settings):
    """A LoggerProvider whose log records become records."""
    from opentelemetry.sdk._logs import LoggerProvider

    from evlog.observed.sdk_records import LogRecords

    provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    if settings.exporters.logs:
        provider.add_log_record_processor(LogRecords())
    return provider


def sampler(spec):
    """The SDK sampler for ``settings.sampler`` (a name of config.SAMPLERS and its ratio)."""
    from opentelemetry.sdk.trace import sampling

    name, ratio = spec
    base = {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF}
    inner = base.get(name.removeprefix("parentbased_"))
    if inner is None:
        inner = sampling.TraceIdRatioBased(ratio)
    return sampling.ParentBased(inner) if name.startswith("parentbased_") else inner


def _load(name: str):
    import importlib

    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def _build_metrics(resource, settings):
    """A MeterProvider whose periodic reader's collections become records, aggregated as the run's OTLP
    exporter prefers (OTEL_EXPORTER_OTLP_METRICS_*), if one is configured."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

    from evlog.observed.sdk_records import MetricRecords, metric_preferences

    readers = []
    kinds = settings.exporters.metrics
    if kinds:
        n = settings.sdk_numbers
        prefs = metric_preferences() if "otlp" in kinds else {}
        readers.append(PeriodicExportingMetricReader(MetricRecords(**prefs),
                                                     export_interval_millis=n["OTEL_METRIC_EXPORT_INTERVAL"],
                                                     export_timeout_millis=n["OTEL_METRIC_EXPORT_TIMEOUT"]))
    return MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)


class _LazyProvider:
    """Stands in for one SDK provider as the OTel global; builds it (once) on first real use.

    Methods of the SDK provider that need no provider yet (force_flush, shutdown, resource updates) do
    nothing until it is built; every other attribute is the built provider's."""

    SIGNAL = ""
    NOOP = ""  # the API's no-op provider, what a provider that cannot be built falls back to

    def __init__(self, settings):
        self._settings = settings
        self._real = None
        self._making = None  # the provider being built (its own set-up may use it already)
        self._callbacks: list = []

    @property
    def built(self) -> bool:
        return self._real is not None

    def real(self):
        """The SDK provider, built now if it is not yet."""
        real = self._real
        if real is not None:
            return real
        forkguard.register_last()
        with _lock:
            if self._real is not None:
                return self._real
            if self._making is not None:
                return self._making
            try:
                route_sdk_logging()
                made = BUILD[self.SIGNAL](build_resource(), self._settings)
            except Exception as exc:
                if not notices.exiting():  # else a build that raced the program's exit: nothing is left to go anywhere
                    notices.warn_once(f"sdk-build-{self.SIGNAL}", f"the OpenTelemetry SDK for {self.SIGNAL} could "
                                      f"not be set up; this process's {self.SIGNAL} go nowhere: {exc!r}")
                made = _load(self.NOOP)()
            self._making = made
            try:
                for fn in self._callbacks:
                    _call(fn, made)
                self._callbacks.clear()
            finally:
                self._real, self._making = made, None
            return made

    def when_built(self, fn) -> None:
        """Call ``fn(provider)`` once the SDK provider is built (now, if it is)."""
        with _lock:
            if self._real is None and self._making is None:
                self._callbacks.append(fn)
                return
        _call(fn, self.real())

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        flush = getattr(self._real, "force_flush", None)
        ok = flush(timeout_millis) if flush is not None else True
        self._flush_own()
        records = sys.modules.get("evlog.observed.records")  # what is recorded here goes to the exporter process now
        if records is not None:
            records.flush()
        return ok

    def _flush_own(self) -> None:
        """What evlog makes of this signal without the SDK is handed over too."""

    def shutdown(self) -> None:
        shutdown = getattr(self._real, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("get_tracer", "get_logger", "get_meter"):  # another signal's
            raise AttributeError(name)
        return getattr(self.real(), name)


class LazyTracerProvider(_LazyProvider):
    SIGNAL = "traces"
    NOOP = "opentelemetry.trace:NoOpTracerProvider"

    def get_tracer(self, *args, **kwargs):
        from evlog.observed import by_name  # a tracer that pickles by name (a module-level one sent to a Dask worker)

        return by_name.tracer(self.real().get_tracer(*args, **kwargs), args, kwargs)


class LazyLoggerProvider(_LazyProvider):
    SIGNAL = "logs"
    NOOP = "opentelemetry._logs:NoOpLoggerProvider"

    def get_logger(self, *args, **kwargs):
        from evlog.observed import by_name

        return by_name.logger(self.real().get_logger(*args, **kwargs), args, kwargs)


class LazyMeterProvider(_LazyProvider):
    SIGNAL = "metrics"
    NOOP = "opentelemetry.metrics:NoOpMeterProvider"

    def get_meter(self, *args, **kwargs):
        from evlog.observed import by_name

        return by_name.meter(self.real().get_meter(*args, **kwargs), args, kwargs)

    def _flush_own(self) -> None:
        own = sys.modules.get("evlog.observed.own_metrics")  # a collection of evlog's own instruments, if any
        if own is not None:
            own.collect()


BUILD = {"traces": _build_traces, "logs": _build_logs, "metrics": _build_metrics}
# OTel API module -> (index in _providers, its provider class, its setter)
API = {
    "opentelemetry.trace": (0, "TracerProvider", "set_tracer_provider"),
    "opentelemetry._logs": (1, "LoggerProvider", "set_logger_provider"),
    "opentelemetry.metrics": (2, "MeterProvider", "set_meter_provider"),
}


def _call(fn, provider) -> None:
    try:
        fn(provider)
    except Exception as exc:
        if notices.exiting():
            return  # a build that raced the program's exit (no new thread then): nothing is left to set up for
        notices.warn_once(f"when-built-{getattr(fn, '__name__', fn)}", f"set-up with the SDK failed: {exc!r}")


def _set_global(module) -> None:
    """Post-import hook of an OTel API module: its signal's global provider is this process's."""
    index, cls, setter = API[module.__name__]
    provider = _providers[index]
    getattr(module, cls).register(type(provider))  # isinstance(provider, the API's provider class)
    getattr(module, setter)(provider)


def setup(settings) -> bool:
    """Set the three providers up from ``settings`` (built on first use); False if the SDK is disabled."""
    if settings.sdk_disabled:
        return False
    resource_attributes()
    _providers[:] = [LazyTracerProvider(settings), LazyLoggerProvider(settings), LazyMeterProvider(settings)]
    from evlog.observed.import_hooks import when_imported

    for module in API:
        when_imported(module, _set_global)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    return True


def providers() -> list:
    """This process's (traces, logs, metrics) providers: the OTel globals evlog set (built on first use)."""
    return list(_providers)


lifecycle.providers_from(providers)


def when_built(signal: str, fn) -> bool:
    """Call ``fn(sdk_provider)`` once the provider of ``signal`` is built; False if evlog set none up."""
    if not _providers:
        return False
    _providers[("traces", "logs", "metrics").index(signal)].when_built(fn)
    return True


def update_resource(attrs: dict) -> None:
    """Add attributes to this process's resource (e.g. dask.role once the role is known). Providers built
    before keep the resource they were built with (the SDK has no public way to change it); what they
    make reaches the exporter process without it, and goes out with the resource of this process's
    latest hello (evlog.observed.records sends one whenever the attributes change)."""
    global _resource
    if not _providers:
        return
    attrs = {k: v for k, v in attrs.items() if v is not None}
    with _lock:  # not while a provider is being built from the attributes before this update
        _resource_attrs.add(attrs)  # for the providers built later, and for what is exported from now on
        _resource = None


_resource = None  # the Resource of the current attributes, made when first asked


def export_resource():
    """The Resource this process's telemetry carries now."""
    global _resource
    res = _resource
    if res is None:
        from opentelemetry.sdk.resources import Resource

        res = _resource = Resource(resource_attributes())
    return res


def _after_fork_in_child() -> None:
    # A forked child is another process: its own pid and instance id, counted afresh.
    stats.reset()
    update_resource(process_attributes())
