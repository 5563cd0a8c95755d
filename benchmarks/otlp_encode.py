"""CPU per span of what an OTLP trace exporter does before it sends: from spans to request bytes.

Three paths over the same batches of 512 spans, in one process, in many short alternating rounds
(timed by this thread's CPU time, medians):

- standard: the OTLP exporters' own encoder (one protobuf object per span, attribute, event) and
  SerializeToString, what any exporter does without evlog;
- parsed: evlog's bytes written by hand, parsed back into one message and serialized again by the
  exporter, what evlog did until the exporters were given the bytes as they are;
- evlog: the bytes written by hand, sent as they are (fast_otlp.RawRequest).

Shapes: a Dask scheduler span (``dask.task inc``: 6 attributes, 5 transition events; the bulk of
the Dask instrumentation's export) and a pool task span (``futures.task``, shared attributes).
Proof: the three paths' requests parse to the same spans (compared once, before timing).

    python benchmarks/otlp_encode.py [--quick]
"""
from __future__ import annotations

import argparse
import statistics
import time

N = 512


def scheduler_spans(n: int) -> list:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.trace import SpanKind

    from evlog.instrumentation import dask_spans as ds

    res = Resource.create({"service.name": "bench", "dask.role": "scheduler"})
    parent = ds.parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
    t0 = time.time()
    graph = f"update-graph-{t0:.6f}"
    out = []
    for i in range(n):
        key, t, w = f"inc-{i}", t0 + i * 1e-3, f"tcp://127.0.0.1:4523{i % 2}"
        release = f"client-releases-keys-{t0 + 3:.6f}"
        trans = ((key, "released", "waiting", graph, None, t), (key, "waiting", "processing", graph, w, t + .1),
                 (key, "processing", "memory", f"task-finished-{t + .2:.6f}", w, t + .2),
                 (key, "memory", "released", release, w, t + 3), (key, "released", "forgotten", release, None, t + 3))
        attrs = {"dask.task.key": key, "dask.task.prefix": "inc", "dask.task.group": "inc-4c0f2a",
                 "dask.task.state": "memory", "dask.worker.address": w, "dask.task.nbytes": 28}
        out.append(ds.FinishedSpan("dask.task inc", ds.context(parent[0], ds.new_span_id()), parent, res, attrs,
                                   SpanKind.INTERNAL, ds.UNSET, int(t * 1e9), int((t + .2) * 1e9), trans, ()))
    return out


def pool_spans(n: int) -> list:
    from opentelemetry import context as otel_context
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from evlog.instrumentation import _taskspan

    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("evlog.futures", "1.0")
    shared = {"code.function.name": "app.square", "evlog.pool.kind": "process"}
    for _ in range(n):
        _taskspan.start(tracer, "futures.task square", shared, otel_context.Context()).end()
    return list(exporter.get_finished_spans())


def paths(spans) -> dict:
    from opentelemetry.exporter.otlp.proto.common._internal import trace_encoder
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from evlog.exporters import fast_otlp

    standard = getattr(trace_encoder.encode_spans, "__wrapped__", trace_encoder.encode_spans)
    raw = fast_otlp._installed[2]
    return {
        "standard": lambda: standard(spans).SerializeToString(),
        "parsed": lambda: ExportTraceServiceRequest.FromString(raw(spans).body).SerializeToString(),
        "evlog": lambda: raw(spans).SerializeToString(),
    }


def same_spans(fns: dict) -> bool:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def spans_of(body):
        req = ExportTraceServiceRequest.FromString(body)
        return sorted(s.SerializeToString() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)

    got = [spans_of(f()) for f in fns.values()]
    return all(g == got[0] for g in got) and len(got[0]) == N


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    rounds = 15 if args.quick else 101

    from evlog.exporters import fast_otlp
    from evlog.instrumentation import _taskspan, dask_spans

    _taskspan.encoder_patch.install()
    dask_spans.encoder_patch.install()
    for shape, spans in (("dask_task", scheduler_spans(N)), ("pool_task", pool_spans(N))):
        fns = paths(spans)
        if not same_spans(fns):
            raise SystemExit(f"otlp_encode.{shape}: the paths do not give the same spans")
        times = {k: [] for k in fns}
        for _ in range(rounds):
            for k, f in fns.items():
                t = time.thread_time_ns()
                f()
                times[k].append((time.thread_time_ns() - t) / N / 1000)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"otlp_encode.{shape}: ratio {med['evlog'] / med['standard']:.2f} "
              f"(standard {med['standard']:.1f}, evlog {med['evlog']:.1f}, us CPU per span, batches of {N})")
        print(f"otlp_encode.{shape}.unparsed: ratio {med['evlog'] / med['parsed']:.2f} "
              f"(parsed again {med['parsed']:.1f}, as written {med['evlog']:.1f}, us CPU per span)")
    fast_otlp._uninstall()


if __name__ == "__main__":
    main()
