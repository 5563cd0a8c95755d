"""The default consumers as OTel metrics: observable gauges read at collection time, nothing per span.

Names (docs/conventions.md, section Consumers): evlog.worker.saturation, evlog.processor.saturation,
evlog.event.saturation, system.cpu.load_average.1m, evlog.memory.free_fraction, evlog.bytes.allocated.
A source is any object with ``current(name, now_ns)`` giving what the consumer of that name would return
now (a number, or a {key: n} dict for psat and esat).
"""
from __future__ import annotations

import math
import threading
import time

from evlog import notices

# consumer name -> (metric, unit, description)
METRICS = {
    "wsat": ("evlog.worker.saturation", "{task}", "Tasks running in this process (Dagger's WorkerSaturation)"),
    "psat": ("evlog.processor.saturation", "{task}", "Tasks running per processor, i.e. thread (Dagger's ProcessorSaturation)"),
    "esat": ("evlog.event.saturation", "{event}", "Open spans per category (Dagger's EventSaturation)"),
    "loadavg": ("system.cpu.load_average.1m", "{thread}", "1-minute load average of the host (Dagger's CPULoadAverages)"),
    "mem": ("evlog.memory.free_fraction", "1", "Fraction of the host's memory that is available (Dagger's MemoryFree)"),
    "bytes": ("evlog.bytes.allocated", "By",
              "Bytes of task results held by this process's running Dask workers, else its resident bytes "
              "(Dagger's BytesAllocd)"),
}


def register(source, names, meter_provider=None) -> list:
    """Create one observable gauge per known name in ``names`` on ``meter_provider``'s meter (anything with
    ``get_meter(name, version)``: evlog's own registry in an observed process, whose callbacks return
    (value, attributes) pairs; else an OTel one, the global one if None); returns the instruments."""
    if meter_provider is None:
        from opentelemetry import metrics

        meter_provider = metrics.get_meter_provider()
    from evlog.version import __version__

    meter = meter_provider.get_meter("evlog.consumers", __version__)
    pairs = getattr(meter, "takes_pairs", False)
    out = []
    for name in names:
        if name not in METRICS:
            continue
        metric, unit, description = METRICS[name]
        observe = _callback(source, name)
        out.append(meter.create_observable_gauge(metric, callbacks=[observe if pairs else _observations(observe)],
                                                 unit=unit, description=description))
    return out


def _callback(source, name: str):
    """The consumer's current value as (value, attributes or None) pairs."""

    def observe(options=None):
        try:
            value = source.current(name, time.time_ns())
            if name == "psat":
                names = {t.ident: t.name for t in threading.enumerate()}
                return [(n, {"evlog.processor": names.get(tid, str(tid)), "thread.id": tid}) for tid, n in value.items()]
            if name == "esat":
                return [(n, {"evlog.category": cat}) for cat, n in value.items()]
            if value is None or (isinstance(value, float) and math.isnan(value)):
                return []
            return [(value, None)]
        except Exception as exc:
            notices.warn_once(f"gauge-{name}", f"the {METRICS[name][0]} gauge could not be read: {exc!r}")
            return []

    return observe


def _observations(observe):
    """A callback of pairs as the OTel API's (Observations)."""
    from opentelemetry.metrics import Observation

    def callback(options=None):
        return [Observation(v, a) for v, a in observe(options)]

    return callback


class ConsumersView:
    """``current()`` over a MultiEventLog holding the built-in consumers (when EVLOG_CONSUMERS names one
    that the fused default log cannot compute: id, timeline, full)."""

    def __init__(self, log):
        self.log = log
        from evlog.processors.sampling import Readings

        self._readings = Readings()

    def current(self, name: str, now_ns: int):
        c = self.log.consumers.get(name)
        if name == "wsat":  # task spans open now (a Dask worker's executions too)
            return c.saturation if c is not None else 0
        if name == "psat":
            return {proc[1]: n for proc, n in dict(c.saturation).items()} if c is not None else {}
        if name == "esat":
            return dict(c.saturation) if c is not None else {}
        if name == "loadavg":
            return self._readings.loadavg()
        if name == "mem":
            return self._readings.mem_free(now_ns)
        if name == "bytes":
            from evlog.processors.sampling import dask_state

            ds = dask_state()
            return ds.nbytes if ds is not None else self._readings.rss(now_ns)
        raise KeyError(name)
