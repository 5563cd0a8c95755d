"""Encoding a Dask task's spans to OTLP protobuf: evlog's encoder against the stock one, CPU per task.

For each task the exporter process builds a ``dask.task {prefix}`` span (7 attributes, its priority a
tuple, and, by default, one ``transition`` event per scheduler transition: 6 for a task of ``client.map``,
with start, finish, stimulus_id (a task's own once it has run) and the worker once it has one) and a
``dask.execute {prefix}`` span (5 attributes), as docs/conventions.md names them and a run of
benchmarks/dask_overhead.py sends them. This times, over
batches of 512 tasks, best of 7:
- ``stock``: ``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans`` and its serialization
  (what the stock OTLPSpanExporter does), on the SDK's ReadableSpans;
- ``evlog``: evlog/exporter/span_encoding.py's ``encode`` on the same spans as the builders make them
  (SpanData); the two give the same bytes (checked here, proved in tests/test_span_encoding.py);
for:
- ``contract``: the spans as the exporter process makes them by default;
- ``no_event_worker``: the transition events without ``dask.worker.address`` (the span has it);
- ``no_transitions``: EVLOG_DASK_TRANSITIONS=false (no transition events).
``run_folder`` times the run folder's line (OTLP/JSON, before compression) of the ``contract`` spans with their
transitions as the builders hold them (dask_spans.TransitionEvents): ``dicts``, the JSON of otlp_json's dicts
(``dumps(encode_spans(spans))``), against ``text``, otlp_json's ``encode_spans_text`` (the same text, checked
here), each batch new, the mean of the rounds.
The ratio is evlog's CPU over the stock encoder's: on one batch encoded again and again, whose task keys
and stimulus ids the encoder's caches then hold. ``contract.fresh`` times evlog's encoder as the exporter
process meets spans: each batch new (the caches warm from the batches before), the mean of the rounds.
The exporter process's goal is at most 60 us per Dask task in all (building, encoding, sending).

    python benchmarks/task_encoding.py
"""
from __future__ import annotations

import argparse
import random
import time

STORY = [("released", "waiting", "update-graph-1795700763.31", False),
         ("waiting", "waiting", "update-graph-1795700763.31", False),
         ("waiting", "queued", "update-graph-1795700763.31", False),
         ("queued", "processing", "task-finished-1795700764.02", True),
         ("processing", "memory", "task-finished-1795700764.05", True),
         ("memory", "forgotten", "client-releases-keys-1795700765.2", True)]
WORKER = "tcp://127.0.0.1:38495"


def task_spans(n: int, events: bool, event_worker: bool, sdk: bool = True, tuples: bool = False) -> list:
    """``n`` tasks' spans: the SDK's ReadableSpans (``sdk``), or SpanData as the builders make them (``tuples``:
    the transitions held as the builders hold them, a TransitionEvents)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    from evlog.builders.dask_spans import TransitionEvents
    from evlog.builders.span_data import SpanData, SpanEvent

    Span = ReadableSpan if sdk else SpanData

    def event(name, attrs, t):
        return Event(name, attrs, t) if sdk else SpanEvent(name, t, attrs)

    scheduler = Resource({"service.name": "app", "host.name": "host", "process.pid": 4242, "dask.role": "scheduler",
                          "evlog.run.id": "20261126T140000Z-4242"})
    worker = Resource({"service.name": "app", "host.name": "host", "process.pid": 4243, "dask.role": "worker",
                       "dask.worker.address": WORKER, "evlog.run.id": "20261126T140000Z-4242"})
    scope = InstrumentationScope("evlog.dask", "0.1")
    out = []
    for _i in range(n):
        key = f"inc-{random.getrandbits(128):032x}"
        t = time.time_ns()
        task_ctx = SpanContext(random.getrandbits(128), random.getrandbits(64), False, TraceFlags(1))
        evs = []
        if events:
            for k, (start, finish, stim, has_worker) in enumerate(STORY):
                a = {"dask.transition.start": start, "dask.transition.finish": finish}
                if has_worker and event_worker:
                    a["dask.worker.address"] = WORKER
                a["dask.stimulus_id"] = f"task-finished-{t / 1e9 + k:.6f}" if stim.startswith("task-finished") else stim
                evs.append(event("transition", a, t + k * 1000))
            if tuples:
                evs = TransitionEvents([(e.attributes["dask.transition.start"], e.attributes["dask.transition.finish"],
                                         e.attributes["dask.stimulus_id"], e.attributes.get("dask.worker.address"),
                                         e.timestamp / 1e9) for e in evs])
        out.append(Span(
            "dask.task inc", task_ctx, None, resource=scheduler, kind=SpanKind.INTERNAL, instrumentation_scope=scope,
            attributes={"dask.task.key": key, "dask.task.prefix": "inc", "dask.task.group": "inc",
                        "dask.task.state": "memory", "dask.worker.address": WORKER, "dask.task.nbytes": 28,
                        "dask.task.priority": (0, 1, _i)},
            events=evs, start_time=t, end_time=t + 6000))
        out.append(Span(
            "dask.execute inc", SpanContext(task_ctx.trace_id, random.getrandbits(64), False, TraceFlags(1)), task_ctx,
            resource=worker, kind=SpanKind.INTERNAL, instrumentation_scope=scope,
            attributes={"dask.task.key": key, "dask.task.prefix": "inc", "dask.worker.address": WORKER,
                        "thread.id": 140408628692672, "thread.name": "1-Dask-Default-Threads-1994-0"},
            start_time=t + 3000, end_time=t + 4000))
    return out


def best(fn, rounds: int) -> float:
    """The least CPU time of ``rounds`` calls of ``fn``."""
    out = float("inf")
    for _ in range(rounds):
        t = time.process_time()
        fn()
        out = min(out, time.process_time() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from evlog.builders.span_data import readable
    from evlog.exporter import span_encoding

    batch, rounds = 512, 3 if args.quick else 7
    for name, events, event_worker in (("contract", True, True), ("no_event_worker", True, False),
                                       ("no_transitions", False, False)):
        data = task_spans(batch, events, event_worker, sdk=False)
        sdk_spans = [readable(s) for s in data]  # the same spans as the SDK's ReadableSpans
        stock_bytes = encode_spans(sdk_spans).SerializeToString()
        if span_encoding.encode(data) != stock_bytes:
            raise SystemExit(f"task_encoding.{name}: evlog's bytes differ from the stock encoder's")
        stock = best(lambda spans=sdk_spans: encode_spans(spans).SerializeToString(), rounds) / batch * 1e6
        evlog = best(lambda spans=data: span_encoding.encode(spans), rounds) / batch * 1e6
        print(f"task_encoding.{name}: ratio {evlog / stock:.3f} (stock {stock:.1f}, evlog {evlog:.1f}, us CPU per "
              f"task; {len(stock_bytes) / batch:.0f} bytes of protobuf, batches of {batch} tasks, best of {rounds})")
        if name == "contract":
            fresh = [task_spans(batch, events, event_worker, sdk=False) for _ in range(rounds)]
            used = 0.0
            for spans in fresh:
                t = time.process_time()
                span_encoding.encode(spans)
                used += time.process_time() - t
            print(f"task_encoding.contract.fresh: evlog {used / rounds / batch * 1e6:.1f} us CPU per task (each batch "
                  f"new, the mean of {rounds})")
    _run_folder(batch, rounds)


def _run_folder(batch: int, rounds: int) -> None:
    from evlog.exporter import otlp_json

    fresh = [task_spans(batch, True, True, sdk=False, tuples=True) for _ in range(2 * rounds)]
    dicts_used = text_used = 0.0
    size = 0
    for i, spans in enumerate(fresh):  # alternated, each batch new to the path that writes it
        t = time.process_time()
        if i % 2:
            line = otlp_json.encode_spans_text(spans)
            text_used += time.process_time() - t
            if line != otlp_json.dumps(otlp_json.encode_spans(spans)):
                raise SystemExit("task_encoding.run_folder: the text differs from the dicts' JSON")
            size = len(line.encode())
        else:
            otlp_json.dumps(otlp_json.encode_spans(spans))
            dicts_used += time.process_time() - t
    dicts, text = dicts_used / rounds / batch * 1e6, text_used / rounds / batch * 1e6
    print(f"task_encoding.run_folder: ratio {text / dicts:.3f} (dicts {dicts:.1f}, text {text:.1f}, us CPU per task; "
          f"{size / batch:.0f} bytes of JSON, each batch new, the mean of {rounds})")


if __name__ == "__main__":
    main()
