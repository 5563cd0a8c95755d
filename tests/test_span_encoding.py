"""evlog/exporter/span_encoding.py writes exactly the stock encoder's message.

Generated spans (every attribute type, unicode, empty and huge values, arrays, events, links, status,
dropped counts, several resources and scopes in one batch, some equal by value and distinct as objects):
evlog's bytes, parsed with opentelemetry-proto, equal (==) the message the stock encoder
(opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans) makes from the same spans as the
SDK's ReadableSpans (span_data.readable), and, serialized, its bytes. The real builders' output, from the
records a Dask run recorded (tests/data/dask_frames.marshal), goes through both paths too.

The run folder's text (evlog/exporter/otlp_json.py, ``encode_spans_text``: written from fragments and the
transitions' tuples) is held to its oracle the same way: the JSON of otlp_json's dicts (``encode_spans``)."""
from __future__ import annotations

import json
import marshal
import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from evlog.builders.dask_spans import TransitionEvents
from evlog.builders.span_data import NO_ATTRIBUTES, SpanData, SpanEvent, SpanLink, readable
from evlog.exporter import otlp_json, span_encoding

HUGE = "x" * 100_000  # a length that takes a 3-byte varint
HUGE_UNICODE = "é€𝄞" * 20_000
SCHEMA = "https://opentelemetry.io/schemas/1.21.0"

# ---- strategies ----------------------------------------------------------------------------------------

text = st.one_of(st.text(max_size=12), st.sampled_from(["", HUGE, HUGE_UNICODE, "dask.task inc", "ünï©ødé 🎉"]))
int64 = st.integers(-(1 << 63), (1 << 63) - 1)
floats = st.floats(allow_nan=True, allow_infinity=True)
primitive = st.one_of(st.booleans(), int64, floats, text, st.binary(max_size=16))
# what the SDK's attribute cleaning keeps (homogeneous sequences of primitives): a span with dropped counts
# has such attributes (the SDK cleaned them in the observed process), and readable() cleans them again
clean_value = st.one_of(st.booleans(), int64, floats, text,
                        st.lists(st.booleans(), max_size=4).map(tuple), st.lists(int64, max_size=4).map(tuple),
                        st.lists(floats, max_size=4).map(tuple), st.lists(text, max_size=4).map(tuple))
# anything the stock encoder takes, and what it leaves out (an int beyond int64, a lone surrogate, a set)
any_value = st.recursive(
    st.one_of(primitive, st.none(), st.integers(1 << 63, 1 << 70), st.just("lone \ud800 surrogate"),
              st.just({1, 2})),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8)
keys = st.one_of(st.text(max_size=10), st.sampled_from(["", "dask.task.key", "ключ", "k" * 300]))


clean_keys = keys.filter(bool)  # the SDK's attribute cleaning drops an empty key


def attributes(values=any_value, max_size=6):
    return st.one_of(st.just(NO_ATTRIBUTES),
                     st.dictionaries(clean_keys if values is clean_value else keys, values, max_size=max_size))


trace_ids = st.one_of(st.integers(1, (1 << 128) - 1), st.just(0))
span_ids = st.one_of(st.integers(1, (1 << 64) - 1), st.just(0))
times = st.one_of(st.just(0), st.integers(1, (1 << 64) - 1), st.just(1_795_700_763_310_000_000))
counts = st.one_of(st.just(0), st.integers(1, (1 << 32) - 1))
trace_states = st.one_of(st.none(), st.lists(st.tuples(st.from_regex(r"[a-z][a-z0-9_\-*/]{0,8}", fullmatch=True),
                                                       st.from_regex(r"[a-zA-Z0-9]{1,8}", fullmatch=True)),
                                             max_size=3, unique_by=lambda kv: kv[0]).map(TraceState))
# a task life's transitions as dask_lives holds them, (start, finish, stimulus id, worker, time): str from Dask,
# anything else (int, None) taken by the SpanEvent it stands for
state = st.one_of(st.sampled_from(["waiting", "processing", "memory"]), text, st.integers(0, 3))
transitions = st.tuples(state, state, st.one_of(st.none(), text, st.just("update-graph-1")),
                        st.one_of(st.none(), st.just(""), st.just("tcp://127.0.0.1:40001"), text, st.just(7)),
                        st.one_of(st.just(0.0), st.floats(1e-9, 1.7e10), st.just(1_795_700_763.31)))
contexts = st.builds(SpanContext, trace_ids, span_ids, st.booleans(),
                     st.sampled_from([TraceFlags(0), TraceFlags(1)]), trace_states)
statuses = st.one_of(st.just(Status(StatusCode.UNSET)), st.just(Status(StatusCode.OK)),
                     st.builds(lambda d: Status(StatusCode.ERROR, d), st.one_of(st.none(), text)))


@st.composite
def spans(draw, resources, scopes):
    dropped = draw(counts)
    values = clean_value if dropped else any_value  # see clean_value
    events = draw(st.lists(st.builds(SpanEvent, text, times, attributes(values, 4),
                                     st.just(0) if not dropped else counts), max_size=4))
    if not dropped and draw(st.booleans()):  # a task span's (dask_lives): its transitions, then those events
        events = TransitionEvents(draw(st.lists(transitions, max_size=5)), tuple(events))
    links = draw(st.lists(st.builds(SpanLink, contexts, attributes(values, 3), st.just(0) if not dropped else counts),
                          max_size=3))
    ctx = draw(contexts)
    return SpanData(
        draw(text), SpanContext(ctx.trace_id, ctx.span_id, False, ctx.trace_flags, ctx.trace_state),
        draw(st.one_of(st.none(), contexts)), draw(st.sampled_from(resources)), draw(attributes(values)),
        events, links, draw(st.sampled_from(list(SpanKind))), draw(statuses), draw(st.one_of(st.none(), times)),
        draw(st.one_of(st.none(), times)), draw(st.sampled_from(scopes)), dropped,
        draw(counts) if dropped else 0, draw(counts) if dropped else 0)


def _resources():
    a = {"service.name": "app", "process.pid": 4242, "dask.role": "scheduler", "ratio": 0.5, "on": True,
         "tags": ("a", "b")}
    return [Resource(a), Resource(dict(a)),  # equal by value: one group, as for the stock encoder
            Resource({"service.name": "ünï", "process.pid": 1}, SCHEMA), Resource({}),
            Resource({"service.name": "app", "process.pid": 4242, "dask.role": "scheduler", "ratio": 0.5, "on": True,
                      "tags": ("a", "c")})]


def _scopes():
    return [InstrumentationScope("evlog.dask", "0.1"), InstrumentationScope("evlog.dask", "0.1"),
            InstrumentationScope("app.lib", "1.2.3", SCHEMA, {"scope.kind": "lib", "n": 3}),
            InstrumentationScope("bare"), InstrumentationScope(""), None]


batches = st.lists(spans(_resources(), _scopes()), max_size=12)


def _has_nan(msg) -> bool:
    """A NaN double anywhere in the message (a NaN is unequal to itself, so == cannot be asked)."""
    return "nan" in str(msg).lower()


def assert_same(batch) -> None:
    stock = encode_spans([readable(s) for s in batch])
    mine = span_encoding.encode(batch)
    assert mine == stock.SerializeToString()  # byte for byte, hence the same message even with NaNs
    parsed = ExportTraceServiceRequest.FromString(mine)
    if not _has_nan(stock):
        assert parsed == stock
    assert_same_json(batch)


def assert_same_json(batch) -> None:
    """The run folder's line of ``batch`` is the JSON of otlp_json's dicts, character for character."""
    text = otlp_json.encode_spans_text(batch)
    oracle = otlp_json.encode_spans(batch)
    try:
        want = otlp_json._fast(oracle).decode()
    except UnicodeEncodeError:  # a lone surrogate: the standard library wrote the whole oracle, and spells a
        want = otlp_json.dumps(oracle)  # float in exponent form otherwise (1e-05): the same values, compared
        assert json.loads(text) == json.loads(want)
        return
    assert text == want


# ---- properties -------------------------------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(batches)
def test_any_batch_of_spans_encodes_to_the_stock_encoders_message(batch):
    assert_same(batch)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(keys, any_value, max_size=8))
@example({"ok": 1, "too big": 1 << 63, "too small": -(1 << 63) - 1, "surrogate": "\udcff", "set": {1},
          "nested": [1, [2, 3], {"k": (1 << 64)}], "fine": "ü"})
@example({"zero": 0, "false": False, "empty": "", "no bytes": b"", "empty list": [], "empty map": {}, "none": None,
          "neg": -1, "min": -(1 << 63), "-0.0": -0.0, "inf": math.inf, "nan": math.nan})
def test_attribute_values_the_stock_encoder_leaves_out_are_left_out_and_the_others_kept(attrs):
    res = Resource(attrs)  # cleaned by the SDK: a resource's attributes as any Resource has them
    span = SpanData("s", SpanContext(1, 2, False), None, res, attrs, instrumentation_scope=None)
    assert_same([span])


def test_the_same_values_twice_in_a_batch_come_from_the_caches_and_are_still_the_stock_encoders():
    res = Resource({"service.name": "app"})
    scope = InstrumentationScope("evlog.dask", "0.1")
    made = [SpanData("dask.task inc", SpanContext(7, i + 1, False), SpanContext(7, 99, True), res,
                     {"dask.task.prefix": "inc", "i": i, "flag": bool(i % 2), "f": float(i)},
                     [SpanEvent("transition", 10 + i, {"dask.transition.start": "waiting"})],
                     instrumentation_scope=scope) for i in range(5)]
    assert_same(made)
    assert_same(made)  # the second time from the caches


def test_values_that_are_equal_but_encode_differently_are_never_taken_from_one_another():
    res = Resource({"service.name": "app"})
    made = [SpanData("s", SpanContext(7, i + 1, False), None, res, attrs) for i, attrs in enumerate(
        [{"v": 0.0}, {"v": -0.0}, {"v": 1}, {"v": True}, {"v": 1.0}, {"v": math.nan}, {"v": math.nan},
         {"v": (0.0,)}, {"v": (-0.0,)}, {"v": (1, 2)}, {"v": (True, False)}])]
    assert_same(made)
    assert_same(made[::-1])
    with_events = [SpanData("s", SpanContext(7, i + 1, False), None, res, NO_ATTRIBUTES,
                            [SpanEvent("e", 5, attrs), SpanEvent("e", 6, {"w": "x", **attrs})])
                   for i, attrs in enumerate([{"v": "1"}, {"v": 1}, {"v": True}, {"v": 1.0}, {"v": "1"}])]
    assert_same(with_events)
    assert_same(with_events[::-1])


def test_events_alike_but_their_last_attribute_are_each_the_stock_encoders():
    """A transition's start, finish and worker repeat from task to task and its stimulus id may be its own:
    written from a cached head and the last attribute; one that cannot be encoded is left out, as the stock
    encoder leaves it out."""
    res = Resource({"service.name": "app"})
    head = {"dask.transition.start": "processing", "dask.transition.finish": "memory", "dask.worker.address": "w1"}
    lasts = ["task-finished-1.5", "task-finished-1.5", "task-finished-2.5", "", "\udcff", "ü" * 200]
    made = [SpanData("dask.task inc", SpanContext(7, i + 1, False), None, res, NO_ATTRIBUTES,
                     [SpanEvent("transition", 10 + i, {**head, "dask.stimulus_id": last}),
                      SpanEvent("transition", 11 + i, {"dask.stimulus_id": last}),
                      SpanEvent("other", 12 + i, {**head, "dask.stimulus_id": last})])
            for i, last in enumerate(lasts)]
    assert_same(made)
    assert_same(made[::-1])  # the same again, from the caches


def test_a_full_cache_starts_again_and_changes_nothing(monkeypatch):
    monkeypatch.setattr(span_encoding, "CACHE_LIMIT", 3)
    monkeypatch.setattr(otlp_json, "_CACHE_LIMIT", 3)
    res = Resource({"service.name": "app"})
    made = [SpanData(f"n{i % 5}", SpanContext(7, i + 1, False), None, res, {f"k{i % 7}": f"v{i}", "same": 1},
                     TransitionEvents([("waiting", f"s{i % 4}", f"stim-{i % 6}", None, 1.5 + i)]))
            for i in range(40)]
    assert_same(made)
    assert len(otlp_json._kv_text) <= 3 and len(otlp_json._heads) <= 3 and len(otlp_json._transition_heads) <= 3


def test_a_name_with_a_lone_surrogate_is_written_with_a_replacement_character():
    span = SpanData("bad \udcff name", SpanContext(1, 2, False), None, Resource({}), NO_ATTRIBUTES)
    [parsed] = ExportTraceServiceRequest.FromString(span_encoding.encode([span])).resource_spans
    assert parsed.scope_spans[0].spans[0].name == "bad \ufffd name"


# ---- the real builders' output -----------------------------------------------------------------------------

FRAMES = os.path.join(os.path.dirname(__file__), "data", "dask_frames.marshal")


class _Collected(list):
    def add(self, items) -> None:
        self.extend(items)


def _built_from_recorded_frames() -> list:
    """The spans the exporter process's builders make of a recorded Dask run's frames (what the Builder
    thread does: a builder per connection and kind, each connection's resource from its hello)."""
    from evlog.builders import dask_executions, dask_lives, pool_spans, sdk_rebuild
    from evlog.exporter import process

    with open(FRAMES, "rb") as f:
        connections = marshal.load(f)
    kinds = process._builders(_Collected(), _Collected())
    span_kinds = {dask_lives.KIND, dask_executions.KIND, pool_spans.KIND, sdk_rebuild.SPAN}
    out = []
    for frames in connections:
        resource, builders = None, {}
        for data in frames:
            hello, kind, meta, records = marshal.loads(data)
            if hello is not None:
                resource = process.resource(hello.get("resource") or {})
            if kind.partition("#")[0] not in span_kinds:  # log records, metrics
                continue
            b = builders.get(kind)
            if b is None:
                b = builders[kind] = kinds[kind.partition("#")[0]](meta, lambda r=resource: r)
            out.extend(b.feed(records, 0.0))
        for b in builders.values():
            out.extend(b.feed((), 1e9, True))
    return out


@pytest.fixture(scope="module")
def recorded():
    return _built_from_recorded_frames()


def test_the_recorded_dask_run_gives_every_kind_of_span(recorded):
    names = {s.name.split(" ")[0] for s in recorded}
    assert {"dask.task", "dask.execute", "dask.transfer", "dask.worker.memory", "dask.batch", "dask.group",
            "futures.task", "app.work"} <= names, names
    assert any(s.status.status_code is StatusCode.ERROR for s in recorded)
    assert any(s.links for s in recorded) and any(s.events for s in recorded)
    assert any(type(s.events) is TransitionEvents and s.events.tail for s in recorded)  # an erred task's
    assert len({id(s.resource) for s in recorded}) >= 3  # the client/scheduler and two workers


def test_the_recorded_dask_runs_spans_encode_to_the_stock_encoders_message(recorded):
    for at in range(0, len(recorded), 512):  # the pipeline's batches
        assert_same(recorded[at:at + 512])
    assert_same(recorded)
