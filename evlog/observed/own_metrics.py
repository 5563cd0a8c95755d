"""evlog's own metrics in an observed process, without the OTel SDK: a small registry of instruments.

The figures evlog makes itself (the consumers' gauges, a Dask worker's ``dask.task.duration`` and
``dask.transfer.bytes``, the scheduler's ``dask.scheduler.*`` and Dask's memory and progress gauges)
are kept here, not in the SDK's MeterProvider: a process whose program makes no telemetry of its own
then imports no ``opentelemetry.sdk`` module and holds none of its objects, which the garbage collector
walks at each full collection (a Dask worker under evlog: about 10,000 more tracked objects than plain with
the SDK built, 4,600 without; benchmarks/worker_objects.py).

- ``get_meter(name, version)`` gives a Meter whose ``create_counter``, ``create_histogram``,
  ``create_observable_counter`` and ``create_observable_gauge`` take the OTel API's arguments; callbacks
  return (value, attributes) pairs where the API's return Observations (Meter says why).
- A histogram has the SDK's default explicit buckets (``BOUNDS``), or base2 exponential buckets when
  OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION asks the run's OTLP exporter for them.
- Every OTEL_METRIC_EXPORT_INTERVAL (a thread, ``evlog-metrics``), at each ``lifecycle.flush`` and at
  exit (sdk's LazyMeterProvider.force_flush calls ``collect``) one collection becomes one ``otel.metrics``
  record (evlog/wire/otel.py), the record the SDK's collections become (sdk_records.MetricRecords); the
  run's exporter process rebuilds it (builders/sdk_rebuild.py) and exports it with the run's metric
  exporters. Temporality is what the run's OTLP exporter prefers
  (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE), as the SDK's reader would aggregate.
- Nothing is collected when the run exports no metrics (OTEL_METRICS_EXPORTER=none) or the SDK is
  disabled; a forked child restarts the thread (the instruments and their values are its parent's, as
  with the SDK).
"""
from __future__ import annotations

import math
import os
import threading
from bisect import bisect_left
from time import time_ns

from evlog import notices
from evlog.observed.atoms import Appender
from evlog.observed.atoms import attrs as _attrs
from evlog.wire import kinds

# The SDK's default explicit bucket boundaries (its _DEFAULT_EXPLICIT_BUCKET_HISTOGRAM_AGGREGATION_BOUNDARIES),
# which evlog's histograms had as SDK instruments
BOUNDS = (0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0)
MAX_SIZE, MAX_SCALE = 160, 20  # base2 exponential buckets: the SDK's defaults
DELTA, CUMULATIVE = 1, 2  # AggregationTemporality values (OTLP's)
_NO_ATTRS: frozenset = frozenset()


def preferences() -> tuple[frozenset, bool]:
    """(the instrument kinds aggregated as deltas, whether histograms are base2 exponential) for the
    run's OTLP metric exporter, as OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE (cumulative, delta,
    lowmemory) and OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION (explicit_bucket_histogram,
    base2_exponential_bucket_histogram) define them; a kind is ``counter``, ``histogram``,
    ``observable_counter``, ... (the API's create_* names)."""
    pref = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE") or "cumulative").strip().lower()
    deltas = {"delta": ("counter", "histogram", "observable_counter"), "lowmemory": ("counter", "histogram")}.get(pref)
    if deltas is None and pref != "cumulative":
        notices.warn_once("metrics-temporality", f"OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE={pref!r} is "
                          "not cumulative, delta or lowmemory; using cumulative")
    agg = (os.environ.get("OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION") or "").strip().lower()
    if agg and agg not in ("explicit_bucket_histogram", "base2_exponential_bucket_histogram"):
        notices.warn_once("metrics-aggregation", f"OTEL_EXPORTER_OTLP_METRICS_DEFAULT_HISTOGRAM_AGGREGATION={agg!r} "
                          "is not explicit_bucket_histogram or base2_exponential_bucket_histogram; using the first")
    return frozenset(deltas or ()), agg == "base2_exponential_bucket_histogram"


class _Instrument:
    KIND = ""

    def __init__(self, name: str, unit: str, description: str):
        self.name = name
        self.unit = unit or ""
        self.description = description or ""
        self._lock = threading.Lock()
        self._series: dict = {}  # frozenset of the attributes' items -> that series' state
        self._since = time_ns()  # the last collection (a delta's start)

    def _metric(self, data) -> tuple | None:
        return (self.name, self.description, self.unit, data) if data[-1] else None


class Counter(_Instrument):
    """A monotonic sum added to as things happen (the API's Counter)."""

    KIND = "counter"

    def add(self, amount, attributes=None) -> None:
        key = frozenset(attributes.items()) if attributes else _NO_ATTRS
        with self._lock:
            s = self._series.get(key)
            if s is None:
                s = self._series[key] = [_attrs(attributes), 0, time_ns()]
            s[1] += amount

    def collect(self, now: int, temporality: int) -> tuple | None:
        with self._lock:
            if temporality == DELTA:
                points = tuple((a, self._since, now, value, ()) for a, value, _start in self._series.values())
                self._series.clear()
                self._since = now
            else:
                points = tuple((a, start, now, value, ()) for a, value, start in self._series.values())
        return self._metric(("sum", temporality, True, points))


class Histogram(_Instrument):
    """Recorded values in buckets, with their count, sum, min and max (the API's Histogram)."""

    KIND = "histogram"

    def __init__(self, name: str, unit: str, description: str, exponential: bool):
        super().__init__(name, unit, description)
        self.exponential = exponential

    def record(self, value, attributes=None) -> None:
        key = frozenset(attributes.items()) if attributes else _NO_ATTRS
        with self._lock:
            s = self._series.get(key)
            if s is None:
                s = self._series[key] = _Buckets(_attrs(attributes), time_ns(), self.exponential)
            s.record(value)

    def collect(self, now: int, temporality: int) -> tuple | None:
        with self._lock:
            if temporality == DELTA:
                points = tuple(s.point(self._since, now) for s in self._series.values())
                self._series.clear()
                self._since = now
            else:
                points = tuple(s.point(s.start, now) for s in self._series.values())
        return self._metric(("exponential" if self.exponential else "histogram", temporality, points))


class _Buckets:
    """One series of a histogram: explicit buckets (BOUNDS), or base2 exponential ones as the SDK's
    ExponentialBucketHistogramAggregation makes them (scale MAX_SCALE at first, lowered as values spread
    so that at most MAX_SIZE buckets are used)."""

    __slots__ = ("attrs", "start", "count", "sum", "min", "max", "counts", "scale", "zero", "pos", "neg")

    def __init__(self, attrs, start: int, exponential: bool):
        self.attrs = attrs
        self.start = start
        self.count = 0
        self.sum = 0
        self.min = math.inf
        self.max = -math.inf
        self.counts = None if exponential else [0] * (len(BOUNDS) + 1)
        self.scale = MAX_SCALE
        self.zero = 0
        self.pos: dict = {}  # bucket index at self.scale -> count
        self.neg: dict = {}

    def record(self, value) -> None:
        self.count += 1
        self.sum += value
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        counts = self.counts
        if counts is not None:
            counts[bisect_left(BOUNDS, value)] += 1
        elif value == 0:
            self.zero += 1
        else:
            positive = value > 0
            side = self.pos if positive else self.neg
            index = _index(abs(value), self.scale)
            if index not in side and side and self._downscaled(side, index):
                side = self.pos if positive else self.neg
                index = _index(abs(value), self.scale)
            side[index] = side.get(index, 0) + 1

    def _downscaled(self, side: dict, index: int) -> bool:
        """Lower the scale if ``index`` does not fit with the buckets in use (at most MAX_SIZE)."""
        lo, hi = min(min(side), index), max(max(side), index)
        change = 0
        while (hi >> change) - (lo >> change) >= MAX_SIZE:
            change += 1
        if change:
            self.scale -= change
            self.pos = _merged(self.pos, change)
            self.neg = _merged(self.neg, change)
        return change > 0

    def point(self, start: int, now: int) -> tuple:
        lo, hi = (self.min, self.max) if self.count else (None, None)
        if self.counts is not None:
            return (self.attrs, start, now, self.count, self.sum, tuple(self.counts), BOUNDS, lo, hi, ())
        scale = self.scale if self.pos or self.neg else 0  # zeros only: the SDK reports scale 0
        return (self.attrs, start, now, self.count, self.sum, scale, self.zero, _dense(self.pos), _dense(self.neg),
                0, lo, hi, ())


def _index(value: float, scale: int) -> int:
    """The base2 exponential bucket of a positive value at ``scale`` (the SDK's Exponent- and
    LogarithmMapping): bucket i holds (base**i, base**(i+1)], base = 2**(2**-scale)."""
    mantissa, exp = math.frexp(value)  # value = mantissa * 2**exp, mantissa in [0.5, 1)
    if scale <= 0:
        return (exp - 1 - (mantissa == 0.5)) >> -scale
    if mantissa == 0.5:  # an exact power of two is the upper bound of its bucket
        return ((exp - 1) << scale) - 1
    return math.floor(math.log(value) * math.ldexp(1 / math.log(2), scale))


def _merged(side: dict, change: int) -> dict:
    out: dict = {}
    for i, n in side.items():
        out[i >> change] = out.get(i >> change, 0) + n
    return out


def _dense(side: dict) -> tuple:
    """(offset, counts) of the buckets in use ((0, (0,)) for none, as the SDK reports them)."""
    if not side:
        return (0, (0,))
    lo = min(side)
    return (lo, tuple(side.get(i, 0) for i in range(lo, max(side) + 1)))


class _Observable(_Instrument):
    """Values read at collection time from callbacks (the API's observable instruments)."""

    def __init__(self, name, callbacks, unit, description):
        super().__init__(name, unit, description)
        self.callbacks = list(callbacks or ())

    def observe(self) -> list:
        """(value, attributes or None) pairs from every callback."""
        out = []
        for cb in self.callbacks:
            try:
                out.extend(cb(None))
            except Exception as exc:
                notices.warn_once(f"metric-callback-{self.name}", f"the {self.name} metric could not be read: {exc!r}")
        return out


class ObservableGauge(_Observable):
    KIND = "observable_gauge"

    def collect(self, now: int, temporality: int) -> tuple | None:
        last = {frozenset(a.items()) if a else _NO_ATTRS: (v, a) for v, a in self.observe()}  # the last one of a series
        return self._metric(("gauge", tuple((_attrs(a), None, now, v, ()) for v, a in last.values())))


class ObservableCounter(_Observable):
    KIND = "observable_counter"

    def collect(self, now: int, temporality: int) -> tuple | None:
        points = []
        with self._lock:
            series = self._series
            for value, attributes in self.observe():
                key = frozenset(attributes.items()) if attributes else _NO_ATTRS
                s = series.get(key)
                if s is None:  # [start, the value at the last collection, its time]
                    s = series[key] = [now, 0, now]
                if temporality == DELTA:
                    points.append((_attrs(attributes), s[2], now, value - s[1], ()))
                    s[1], s[2] = value, now
                else:
                    points.append((_attrs(attributes), s[0], now, value, ()))
        return self._metric(("sum", temporality, True, tuple(points)))


class Meter:
    """One instrumentation scope's instruments; creating one that exists gives that one. An observable
    instrument's callbacks are called with None (the API passes CallbackOptions) and return (value,
    attributes or None) pairs, not the API's Observations: evlog's own metrics need no
    ``opentelemetry.metrics`` (a few hundred objects in every process)."""

    takes_pairs = True  # what a callback returns (evlog.processors.gauges reads it)

    def __init__(self, registry, name: str, version: str | None):
        self.scope = (name, version, None, None)  # an otel.metrics record's scope
        self._registry = registry
        self.instruments: dict = {}

    def _make(self, cls, name, *args):
        inst = self.instruments.get(name)
        if inst is None:
            with self._registry.lock:
                inst = self.instruments.get(name)
                if inst is None:
                    inst = self.instruments[name] = cls(name, *args)
            self._registry.start()
        return inst

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Counter:
        return self._make(Counter, name, unit, description)

    def create_histogram(self, name: str, unit: str = "", description: str = "") -> Histogram:
        return self._make(Histogram, name, unit, description, self._registry.settings()[3])

    def create_observable_counter(self, name: str, callbacks=None, unit: str = "",
                                  description: str = "") -> ObservableCounter:
        return self._make(ObservableCounter, name, callbacks, unit, description)

    def create_observable_gauge(self, name: str, callbacks=None, unit: str = "", description: str = "") -> ObservableGauge:
        return self._make(ObservableGauge, name, callbacks, unit, description)


class Registry:
    """This process's meters, collected every OTEL_METRIC_EXPORT_INTERVAL into otel.metrics records."""

    def __init__(self, settings: tuple | None = None):
        self.lock = threading.RLock()
        self.meters: dict = {}  # (name, version) -> Meter
        self._settings = settings  # (enabled, interval s, delta kinds, exponential), read from the run's once
        self._append = Appender(kinds.OTEL_METRICS)
        self._thread = None
        self._stop = threading.Event()
        self._collecting = threading.Lock()
        self._hooked = False

    def get_meter(self, name: str, version: str | None = None) -> Meter:
        key = (name, version)
        meter = self.meters.get(key)
        if meter is None:
            with self.lock:
                meter = self.meters.setdefault(key, Meter(self, name, version))
        return meter

    def settings(self) -> tuple:
        s = self._settings
        if s is None:
            from evlog import config

            cfg = config.get()
            exporters = cfg.exporters.metrics
            deltas, exponential = preferences() if "otlp" in exporters else (frozenset(), False)
            s = self._settings = (bool(exporters) and not cfg.sdk_disabled,
                                  cfg.sdk_numbers["OTEL_METRIC_EXPORT_INTERVAL"] / 1000, deltas, exponential)
        return s

    def start(self) -> None:
        """Start the collecting thread if it is not running (from the first instrument on, when the run
        exports metrics)."""
        if not self.settings()[0]:
            return
        t = self._thread
        if t is not None and t.is_alive():
            return
        with self.lock:
            if self._thread is None or not self._thread.is_alive():
                if not self._hooked:
                    from evlog.observed import lifecycle

                    lifecycle.before_flush(self.stop)  # the exit's flush makes the last collection
                    self._hooked = True
                self._stop = threading.Event()
                self._thread = threading.Thread(target=self._loop, args=(self._stop,), name="evlog-metrics", daemon=True)
                self._thread.start()

    def _loop(self, stop: threading.Event) -> None:
        interval = self.settings()[1]
        while not stop.wait(interval):
            try:
                self.collect()
            except Exception as exc:  # never let the thread die: the next collection may succeed
                notices.warn_once("own-metrics", f"evlog's metrics could not be collected: {exc!r}")

    def stop(self) -> None:
        self._stop.set()

    def collect(self) -> None:
        """One collection of every instrument -> one otel.metrics record for the exporter process."""
        if not self.settings()[0]:
            return
        with self._collecting:
            rec = self.record()
            if rec is not None:
                self._append(rec)

    def record(self) -> tuple | None:
        """One collection of every instrument as an otel.metrics record, or None when nothing has a point."""
        deltas = self.settings()[2]
        now = time_ns()
        out = []
        for meter in list(self.meters.values()):
            metrics = []
            for inst in list(meter.instruments.values()):
                m = inst.collect(now, DELTA if inst.KIND in deltas else CUMULATIVE)
                if m is not None:
                    metrics.append(m)
            if metrics:
                out.append((meter.scope, "", tuple(metrics)))
        return tuple(out) or None

    def reset(self) -> None:
        """Forget every meter and the settings read (tests)."""
        self.stop()
        with self.lock:
            self.meters.clear()
            self._settings = None
            self._thread = None


registry = Registry()
get_meter = registry.get_meter
collect = registry.collect


def _after_fork_in_child() -> None:
    # a lock some thread of the parent held is held for ever in the child
    registry._collecting = threading.Lock()
    registry.lock = threading.RLock()
    for meter in list(registry.meters.values()):
        for inst in list(meter.instruments.values()):
            inst._lock = threading.Lock()
    if registry._thread is not None:  # it ran in the parent: it runs in the child too
        registry._thread = None
        registry.start()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
