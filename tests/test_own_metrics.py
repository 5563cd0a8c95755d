"""evlog's own instruments (evlog/observed/own_metrics.py) against the OTel SDK's: the same measurements give
the same metrics once the exporter process has rebuilt the record (builders/sdk_rebuild.py), for every
temporality and histogram aggregation a run can ask for. No cluster, no process: the SDK in this process
is the reference."""
from __future__ import annotations

import dataclasses
import importlib.metadata
import marshal
import random

import pytest
from opentelemetry.metrics import Observation
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
from opentelemetry.sdk.resources import Resource

from evlog.builders import sdk_rebuild
from evlog.observed import own_metrics

SCOPE = ("evlog.test", "1.2")
# opentelemetry-sdk 1.45.2 starts a delta histogram's aggregation afresh at each collection (its exponential
# scale with it); 1.45.0 and 1.45.1 keep the scale the collections before had to downscale to. evlog's own
# instruments do as 1.45.2 does, so on the older SDK only the first delta collection is comparable.
SDK_RESETS_DELTA = tuple(int(x) for x in importlib.metadata.version("opentelemetry-sdk").split(".")[:3]) >= (1, 45, 2)
VALUES = [0, 0.0, 1e-6, 0.001, 0.25, 0.5, 1, 1.5, 2, 3, 4, 7.5, 1000, 12345.678, 1e6] + \
    [random.Random(7).lognormvariate(0, 4) for _ in range(500)]


def _registry(deltas=(), exponential=False):
    return own_metrics.Registry(settings=(True, 60.0, frozenset(deltas), exponential))


def _sdk(deltas=(), exponential=False):
    temporality = {Counter: AggregationTemporality.DELTA if "counter" in deltas else AggregationTemporality.CUMULATIVE,
                   Histogram: AggregationTemporality.DELTA if "histogram" in deltas else AggregationTemporality.CUMULATIVE,
                   ObservableCounter: AggregationTemporality.DELTA if "observable_counter" in deltas
                   else AggregationTemporality.CUMULATIVE}
    reader = InMemoryMetricReader(preferred_temporality=temporality, preferred_aggregation=(
        {Histogram: ExponentialBucketHistogramAggregation()} if exponential else {}))
    provider = MeterProvider(metric_readers=[reader], resource=Resource({}), shutdown_on_exit=False)
    return provider.get_meter(*SCOPE), reader


def _rebuilt(record) -> list:
    """The MetricsData the exporter process makes of a record, as received through marshal."""
    got = []
    sdk_rebuild.Metrics(lambda: Resource({}), type("Sink", (), {"add": lambda self, out: got.extend(out)})()).feed(
        [marshal.loads(marshal.dumps(record))], 0.0)
    return [data for data, _points in got]


def _plain(data) -> list:
    """Everything a user reads of a collection but its times, in a comparable form."""
    out = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                d = m.data
                points = []
                for p in d.data_points:
                    pt = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if "time" not in f.name}
                    pt["attributes"] = dict(p.attributes or {})
                    if isinstance(pt.get("sum"), float):  # the SDK adds each collection's sum to the last one's
                        pt["sum"] = float(f"{pt['sum']:.12g}")
                    for k in ("bucket_counts", "explicit_bounds"):
                        if k in pt:
                            pt[k] = list(pt[k])
                    for side in ("positive", "negative"):
                        if side in pt:  # the SDK's delta points may keep the last interval's empty buckets at the end
                            counts = list(pt[side].bucket_counts)
                            while len(counts) > 1 and counts[-1] == 0:
                                counts.pop()
                            pt[side] = (pt[side].offset, counts)
                    pt["exemplars"] = list(pt.get("exemplars") or ())
                    points.append(pt)
                points.sort(key=repr)
                out.append((sm.scope.name, sm.scope.version, m.name, m.unit or None, m.description or None, type(d).__name__,
                            getattr(d, "aggregation_temporality", None), getattr(d, "is_monotonic", None), points))
    return sorted(out, key=repr)


def _instruments(meter, pairs: bool, seen: list):
    """The same instruments on evlog's meter (pairs) or the SDK's (Observations)."""
    def transferred(options):
        return [(seen[0], None)] if pairs else [Observation(seen[0])]

    def memory(options):
        obs = [(10, {"w": "a"}), (20.5, {"w": "b"})]
        return obs if pairs else [Observation(v, a) for v, a in obs]

    hist = meter.create_histogram("task.duration", unit="s", description="time per task")
    counter = meter.create_counter("calls", unit="{call}", description="calls")
    meter.create_observable_counter("transfer.bytes", [transferred], unit="By", description="bytes received")
    meter.create_observable_gauge("memory", [memory], unit="By", description="memory by worker")
    return hist, counter


@pytest.mark.parametrize("exponential", [False, True], ids=["explicit-buckets", "base2-exponential"])
@pytest.mark.parametrize("deltas", [(), ("counter", "histogram", "observable_counter")], ids=["cumulative", "delta"])
def test_own_instruments_collect_what_the_sdk_collects(deltas, exponential):
    registry = _registry(deltas, exponential)
    sdk_meter, reader = _sdk(deltas, exponential)
    seen = [0]
    own = _instruments(registry.get_meter(*SCOPE), True, seen)
    ref = _instruments(sdk_meter, False, seen)
    for collection, values in enumerate((VALUES, VALUES[::3], [])):
        for i, v in enumerate(values):
            for hist, counter in (own, ref):
                hist.record(v, {"prefix": "inc" if i % 3 else "sum"})
                counter.add(2, {"prefix": "inc"} if i % 2 else None)
        seen[0] += 1000 * (collection + 1)
        record = registry.record()
        got = _rebuilt(record) if record is not None else []
        want = reader.get_metrics_data()
        if collection and deltas and exponential and not SDK_RESETS_DELTA:
            continue
        assert [_plain(d) for d in got] == [_plain(want)], f"collection {collection}"


def test_a_histogram_series_of_one_value_and_of_zeros():
    """The exponential buckets' edge cases: one value (no downscale), zeros only (zero count)."""
    registry = _registry(exponential=True)
    sdk_meter, reader = _sdk(exponential=True)
    for meter in (registry.get_meter(*SCOPE), sdk_meter):
        h = meter.create_histogram("h")
        h.record(3.7, {"s": "one"})
        for _ in range(3):
            h.record(0, {"s": "zeros"})
    [got] = _rebuilt(registry.record())
    assert _plain(got) == _plain(reader.get_metrics_data())


def test_nothing_recorded_makes_no_record():
    registry = _registry()
    meter = registry.get_meter(*SCOPE)
    meter.create_histogram("h")
    meter.create_observable_gauge("g", [lambda options: []])
    assert registry.record() is None
