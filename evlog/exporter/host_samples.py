"""The host's CPU load and free memory at the run's start and at its end, sent by the exporter process.

Each observed process reads these gauges (evlog/processors/gauges.py) at each metric export, the first
one an export interval after it starts, so a short run's first tasks had no sample. evlog-instrument
reads the host as it starts the program (``now``, handed to the exporter process in
EVLOG_HOST_AT_START); the exporter process sends that reading, and its own when the run has
ended, as points of the same gauges (names and units of the consumers' gauges, for the consumers
EVLOG_CONSUMERS names), at the times they were read, to the run's metric exporters. Without the launcher
the start sample is the exporter process's own, taken when the run's first record reaches it.

The points are built with the SDK's public metric data types and handed to the exporter process's metrics
pipeline, with every other process's metrics. The resource is the first process's (service, host, run id, the user's
attributes) with this process's pid and ``evlog.process.role=exporter``.
"""
from __future__ import annotations

import math
import os

NAMES = ("loadavg", "mem")  # consumer names of evlog.processors.gauges.METRICS
START_ENV = "EVLOG_HOST_AT_START"
_OF_ONE_PROCESS = ("process.", "dask.", "torch.", "service.instance.")  # not carried over from the first process


def encode(reading: tuple[int, dict]) -> str:
    """A reading (``now()``) as EVLOG_HOST_AT_START carries it; a value that could not be read is empty."""
    t, values = reading
    return ",".join([str(t)] + ["" if math.isnan(values[n]) else repr(values[n]) for n in NAMES])


def parse(raw: str | None) -> tuple[int, dict] | None:
    """EVLOG_HOST_AT_START (``time ns,load average,free fraction``, a value empty if unread) -> (time,
    {consumer name: value}); None if it is absent or not that."""
    try:
        t, load, mem = (raw or "").split(",")
        return int(t), {n: float(v) for n, v in (("loadavg", load), ("mem", mem)) if v}
    except ValueError:
        return None


def now() -> tuple[int, dict]:
    """The host read now, as ``parse`` returns it."""
    import time

    from evlog.processors.sampling import Readings

    t = time.time_ns()
    r = Readings(max_age_s=0.0)
    return t, {"loadavg": r.loadavg(), "mem": r.mem_free(t)}


class HostSamples:
    def __init__(self, settings, resource_attributes: dict, metrics):
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from evlog import process_count
        from evlog.process_identity import process_attributes
        from evlog.version import __version__

        self.names = [n for n in NAMES if n in settings.consumers]
        self.metrics = metrics  # the exporter process's metrics pipeline
        attrs = {k: v for k, v in resource_attributes.items() if not k.startswith(_OF_ONE_PROCESS)}
        attrs.update(process_attributes(), **{process_count.ROLE: process_count.EXPORTER})
        self.resource = Resource(attrs)
        self.scope = InstrumentationScope("evlog.consumers", __version__)

    def send(self, reading: tuple[int, dict]) -> None:
        """One point per gauge, at the reading's time (a value that could not be read is left out), handed
        to the metrics pipeline (counted there, as every point the run exports)."""
        from opentelemetry.sdk.metrics.export import Gauge, Metric, MetricsData, NumberDataPoint, ResourceMetrics, ScopeMetrics

        from evlog.processors.gauges import METRICS

        t, values = reading
        metrics = []
        for name in self.names:
            v = values.get(name)
            if v is None or not math.isfinite(v):
                continue
            metric, unit, description = METRICS[name]
            metrics.append(Metric(metric, description, unit, Gauge([NumberDataPoint({}, t, t, v)])))
        if metrics:
            data = MetricsData([ResourceMetrics(self.resource, [ScopeMetrics(self.scope, metrics, "")], "")])
            self.metrics.add([(data, len(metrics))])


def start(settings, resource_attributes: dict, metrics) -> HostSamples | None:
    """The run's start sample (the launcher's reading, else one now), handed to ``metrics`` (the metrics
    pipeline); the HostSamples for the end sample, or None if nothing is wanted."""
    from evlog import notices

    try:
        host = HostSamples(settings, resource_attributes, metrics)
        reading = parse(os.environ.get(START_ENV)) or now()
    except Exception as exc:
        notices.warn_once("host-samples", f"the host's run start and end samples cannot be taken: {exc!r}")
        return None
    if not host.names:
        return None
    host.send(reading)
    return host
