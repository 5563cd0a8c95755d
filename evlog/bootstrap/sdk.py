"""SDK set-up: one TracerProvider, LoggerProvider and MeterProvider per process, set as OTel globals.

The user's OTEL_* values always win: the sampler and OTEL_BSP_*/OTEL_BLRP_* are read by the SDK itself,
exporters read their own variables, and evlog's defaults (a larger span queue, a 1 s batch delay, a 5 s
metric interval) apply only where the variable is unset. Resource attributes from
OTEL_RESOURCE_ATTRIBUTES / OTEL_SERVICE_NAME override evlog's.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import uuid

from evlog import _report, stats
from evlog.exporters import select

_providers: list = []  # (tracer, logger, meter) providers of this process, for flush and resource updates
# evlog's defaults where the user set nothing. Queues: 4-8 times the SDK's 2,048, which overflows at
# bursts of about 10,000 spans/s; a queued span or log record holds about 2 KB, so a dead collector
# costs at most about 50 MB (measured: tests/test_faults.py, a million spans and events).
DEFAULTS = {
    "OTEL_BSP_MAX_QUEUE_SIZE": 16384,
    "OTEL_BSP_SCHEDULE_DELAY": 1000,
    "OTEL_BLRP_MAX_QUEUE_SIZE": 8192,
    "OTEL_BLRP_SCHEDULE_DELAY": 1000,
    "OTEL_METRIC_EXPORT_INTERVAL": 5000,
}


def _default(var: str) -> int | None:
    return None if os.environ.get(var) else DEFAULTS[var]


def service_name() -> str:
    name = os.environ.get("EVLOG_SERVICE_NAME")
    if name:
        return name
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    base = os.path.basename(argv0)
    if base in ("", "-c", "-"):
        return "python"
    return base[:-3] if base.endswith(".py") else base


def process_attributes() -> dict:
    return {
        "process.pid": os.getpid(),
        "process.parent_pid": os.getppid(),
        "service.instance.id": uuid.uuid4().hex,
    }


def build_resource():
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    attrs = {
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
        "telemetry.distro.name": "evlog",
        "service.name": service_name(),
        "host.name": socket.gethostname(),
        "process.runtime.name": sys.implementation.name,
        "process.executable.name": os.path.basename(sys.executable or "python"),
        **process_attributes(),
    }
    run_id = os.environ.get("EVLOG_RUN_ID")
    if run_id:
        attrs["evlog.run.id"] = run_id
    try:
        user = OTELResourceDetector().detect()
    except Exception as exc:
        _report.warn_once("resource-env", f"OTEL_RESOURCE_ATTRIBUTES could not be read ({exc}); ignoring it")
        user = Resource.get_empty()
    return Resource(attrs).merge(user)


def _counting(cls, hook: str):
    """A batch processor that counts what its full queue drops (one length check per item)."""

    class Counting(cls):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self._evlog_queue = getattr(getattr(self, "_batch_processor", None), "_queue", None)

        def _hook(self, item, *rest):
            q = self._evlog_queue
            if q is not None and len(q) == q.maxlen:
                stats.incr("dropped.queue_full")
            return getattr(super(), hook)(item, *rest)

    setattr(Counting, hook, Counting._hook)
    Counting.__name__ = Counting.__qualname__ = f"Counting{cls.__name__}"
    return Counting


def setup(settings) -> bool:
    """Set the three providers up from ``settings``; returns False if the SDK is disabled."""
    if settings.sdk_disabled:
        return False
    from opentelemetry import metrics, trace
    from opentelemetry._logs import set_logger_provider
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    route_sdk_logging()
    BatchSpanProcessor = _counting(BatchSpanProcessor, "on_end")  # noqa: N806
    BatchLogRecordProcessor = _counting(BatchLogRecordProcessor, "on_emit")  # noqa: N806
    resource = build_resource()
    ex = settings.exporters

    tp = TracerProvider(resource=resource, shutdown_on_exit=False)
    for kind in ex.traces:
        make = select.factory("traces", kind, settings)
        if make:
            tp.add_span_processor(
                BatchSpanProcessor(
                    select.managed_span_exporter(make),
                    max_queue_size=_default("OTEL_BSP_MAX_QUEUE_SIZE"),
                    schedule_delay_millis=_default("OTEL_BSP_SCHEDULE_DELAY"),
                )
            )
    lp = LoggerProvider(resource=resource, shutdown_on_exit=False)
    for kind in ex.logs:
        make = select.factory("logs", kind, settings)
        if make:
            lp.add_log_record_processor(
                BatchLogRecordProcessor(
                    select.managed_log_exporter(make),
                    max_queue_size=_default("OTEL_BLRP_MAX_QUEUE_SIZE"),
                    schedule_delay_millis=_default("OTEL_BLRP_SCHEDULE_DELAY"),
                )
            )
    readers = []
    for kind in ex.metrics:
        make = select.factory("metrics", kind, settings)
        if make:
            readers.append(
                PeriodicExportingMetricReader(
                    select.managed_metric_exporter(make),
                    export_interval_millis=_default("OTEL_METRIC_EXPORT_INTERVAL"),
                )
            )
    mp = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)

    trace.set_tracer_provider(tp)
    set_logger_provider(lp)
    metrics.set_meter_provider(mp)
    _providers[:] = [tp, lp, mp]
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
    return True


def providers() -> list:
    return list(_providers)


def update_resource(attrs: dict) -> None:
    """Add attributes to this process's resource (e.g. dask.role once the role is known)."""
    if not _providers:
        return
    from opentelemetry.sdk.resources import Resource

    extra = Resource({k: v for k, v in attrs.items() if v is not None})
    for p in _providers:
        try:
            p._update_resource(extra)  # the SDK's own hook, used by it after fork
        except Exception as exc:
            _report.warn_once("update-resource", f"cannot update the resource: {exc}")


def _after_fork_in_child() -> None:
    # A forked child is another process: its own pid and instance id, counted afresh.
    stats.reset()
    update_resource(process_attributes())


class _ToReport(logging.Handler):
    """OTel SDK/exporter log records -> one evlog line per kind of problem, then counted."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
        except Exception:
            msg = str(record.msg)
        if "Queue full" in msg:  # counted by the processors themselves, reported once at exit
            return
        if record.levelno < logging.WARNING:
            return
        first = (msg.splitlines()[0] if msg else record.name)[:300]
        if record.name.startswith("opentelemetry.exporter"):
            select.note_failure()
            _report.warn_once(
                "export",
                f"exporting failed ({first}); retries are bounded, what cannot be sent is dropped and counted",
            )
            return
        _report.warn_once(f"sdk-{record.name}", f"{first} (further messages like this are counted, not shown)")


def queued() -> int:
    """Items still waiting in this process's batch processors (dropped if exit cannot flush them)."""
    n = 0
    for p in _providers[:2]:
        multi = getattr(p, "_active_span_processor", None) or getattr(p, "_multi_log_record_processor", None)
        for proc in getattr(multi, "_span_processors", None) or getattr(multi, "_log_record_processors", None) or ():
            q = getattr(getattr(proc, "_batch_processor", None), "_queue", None)
            n += len(q) if q is not None else 0
    return n


def route_sdk_logging() -> None:
    handler = _ToReport(logging.WARNING)
    for name in ("opentelemetry.exporter", "opentelemetry.sdk"):
        lg = logging.getLogger(name)
        lg.addHandler(handler)
        lg.propagate = False
