"""evlog/builders/dask_memory.py: bytes of task results each Dask worker holds -> ``dask.worker.memory`` spans,
no cluster; ``Held`` directly, and as dask_lives.Lives drives it from transition records."""
from __future__ import annotations

from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import SpanKind, StatusCode

from evlog.builders import dask_lives
from evlog.builders.dask_memory import RESOLUTION_NS, WINDOW, Held

RES = Resource({"service.name": "app", "dask.role": "scheduler"})
W1, W2 = "tcp://127.0.0.1:40001", "tcp://127.0.0.1:40002"
T0 = 1000.0


def ns(t: float) -> int:
    return int(t * 1e9)


def points(span) -> list:
    return [(e.name, dict(e.attributes), e.timestamp) for e in span.events]


def test_a_workers_changes_are_one_span_per_window_with_an_event_per_change():
    h = Held(dask_lives.SCOPE)
    h.stored("a-1", W1, 100, T0, 10.0)
    h.stored("a-2", W1, 50, T0 + 0.5, 10.2)
    h.left("a-1", T0 + 0.75, 10.4)
    assert h.pending and h.spans(10.0 + WINDOW - 0.01, RES) == []  # the window is still open
    [span] = h.spans(10.0 + WINDOW, RES)
    assert span.name == "dask.worker.memory" and span.kind is SpanKind.INTERNAL and span.parent is None
    assert dict(span.attributes) == {"dask.worker.address": W1, "dask.worker.nbytes": 50}
    assert points(span) == [("dask.worker.memory", {"dask.worker.nbytes": 100}, ns(T0)),
                            ("dask.worker.memory", {"dask.worker.nbytes": 150}, ns(T0 + 0.5)),
                            ("dask.worker.memory", {"dask.worker.nbytes": 50}, ns(T0 + 0.75))]
    assert (span.start_time, span.end_time) == (ns(T0), ns(T0 + 0.75))
    assert span.status.status_code is StatusCode.UNSET and span.links == ()
    assert span.resource is RES and span.instrumentation_scope is dask_lives.SCOPE
    assert not h.pending and h.spans(99.0, RES, final=True) == []


def test_changes_closer_than_the_resolution_are_one_point_with_the_last_total():
    h = Held(dask_lives.SCOPE)
    h.stored("a-1", W1, 100, T0, 10.0)
    h.stored("a-2", W1, 10, T0 + (RESOLUTION_NS / 2) / 1e9, 10.0)
    h.stored("a-3", W1, 1, T0 + 0.5, 10.0)
    [span] = h.spans(10.0, RES, final=True)
    assert [(e.attributes["dask.worker.nbytes"], e.timestamp) for e in span.events] == [(110, ns(T0)),
                                                                                     (111, ns(T0 + 0.5))]


def test_a_result_stored_again_is_counted_once_on_its_new_worker():
    h = Held(dask_lives.SCOPE)
    h.stored("a-1", W1, 100, T0, 10.0)
    h.stored("a-1", W2, 100, T0 + 1, 10.0)  # recomputed elsewhere
    spans = {s.attributes["dask.worker.address"]: s for s in h.spans(10.0, RES, final=True)}
    assert [e.attributes["dask.worker.nbytes"] for e in spans[W1].events] == [100, 0]
    assert [e.attributes["dask.worker.nbytes"] for e in spans[W2].events] == [100]
    assert spans[W1].context.trace_id != spans[W2].context.trace_id  # one trace per worker


def test_a_workers_windows_share_one_trace():
    h = Held(dask_lives.SCOPE)
    h.stored("a-1", W1, 100, T0, 10.0)
    [first] = h.spans(11.0, RES)
    h.left("a-1", T0 + 5, 15.0)
    [second] = h.spans(16.0, RES)
    assert first.context.trace_id == second.context.trace_id and first.context.span_id != second.context.span_id
    assert second.attributes["dask.worker.nbytes"] == 0


def test_what_cannot_be_counted_is_ignored():
    h = Held(dask_lives.SCOPE)
    h.stored("a-1", None, 100, T0, 10.0)  # no worker
    h.stored("a-2", W1, None, T0, 10.0)  # no size
    h.stored("a-3", W1, -1, T0, 10.0)  # Dask's unknown size
    h.stored("a-4", W1, 1.5, T0, 10.0)  # not an int
    h.left("never-stored", T0, 10.0)
    assert not h.pending and h.spans(20.0, RES, final=True) == []


def test_lives_counts_results_stored_released_and_lost_with_their_worker():
    info = ("inc", "inc-1", None, None, None)
    recs = [("a-1", "released", "waiting", "g", T0, None, info),
            ("a-1", "waiting", "processing", "g", T0 + 0.25, W1, None),
            ("a-1", "processing", "memory", "f", T0 + 0.5, (W1, None, None, 100, 0, 0.1), None),
            ("a-2", "released", "waiting", "g", T0, None, info),
            ("a-2", "waiting", "processing", "g", T0 + 0.25, W1, None),
            ("a-2", "processing", "memory", "f", T0 + 0.75, (None, None, None, 40, 0, 0.1), None),  # worker from processing
            (None, None, None, "remove-w1", T0 + 2, W1, None),
            ("a-1", "memory", "released", "remove-w1", T0 + 2, None, None),
            ("a-2", "memory", "forgotten", "client", T0 + 2.5, None, None)]
    lives = dask_lives.Lives(lambda: RES)
    out = lives.feed(recs, 10.0)
    assert [s.name for s in out] == ["dask.task inc"]  # a-2, forgotten; memory waits for its window
    [mem] = [s for s in lives.feed([], 10.0 + WINDOW) if s.name == "dask.worker.memory"]
    assert [(e.attributes["dask.worker.nbytes"], e.timestamp) for e in mem.events] == [
        (100, ns(T0 + 0.5)), (140, ns(T0 + 0.75)), (40, ns(T0 + 2)), (0, ns(T0 + 2.5))]
    assert mem.attributes["dask.worker.address"] == W1 and mem.resource is RES
