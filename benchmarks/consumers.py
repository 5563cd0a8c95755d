"""What the default consumer set (EVLOG_CONSUMERS default: wsat, psat, loadavg, mem, bytes) adds per span.

SDK tracer providers in one process: plain (no span processor: the bare SDK span, about 13 us), nop
(one span processor that does nothing: what the SDK itself charges for calling any processor) and evlog
(the default log installed by ``evlog.processors.install_default``, gauges registered). Many short
rounds alternate the variants (so they share the machine's load); each creates and ends N spans of one
shape, timed by this thread's CPU time (other runs share the cores; wall time would mostly measure them).
Shapes: a task execution (``dask.execute inc``, CONSUMER, the attributes the Dask instrumentation sets),
which moves the counters and is recorded, and any other span (``dask.task inc``, a scheduler span).

It also times the processor's two hooks alone (on_start + on_end on a prepared span), the cost
without the SDK around it. Proof of instrumentation: the default log's event count.
Goal: the default set adds at most 2 us per span.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

GOAL_US = 2.0
REFERENCE_SPAN_US = 13.0  # the bare SDK span on the reference machine (PERF-NOTES.md); this one may be slower


def _spans(tracer, name, kind, attrs, n) -> float:
    start_span = tracer.start_span
    t = time.thread_time_ns()
    for _ in range(n):
        start_span(name, kind=kind, attributes=attrs).end()
    return (time.thread_time_ns() - t) / n / 1000


def _hooks(proc, span, rspan, n) -> float:
    on_start, on_end = proc.on_start, proc.on_end
    t = time.thread_time_ns()
    for _ in range(n):
        on_start(span, parent_context=None)
        on_end(rspan)
    hooks = time.thread_time_ns() - t

    def nop(span, parent_context=None):
        pass

    t = time.thread_time_ns()
    for _ in range(n):
        nop(span, parent_context=None)
        nop(rspan)
    return (hooks - (time.thread_time_ns() - t)) / n / 1000


class _Nop:
    """A span processor that does nothing: what the SDK charges for having any processor at all."""

    def on_start(self, span, parent_context=None):
        pass

    def _on_ending(self, span):
        pass

    def on_end(self, span):
        pass

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--spans", type=int, default=1000, help="spans per round and variant")
    args = ap.parse_args()
    rounds = args.rounds or (12 if args.quick else 120)
    n = args.spans

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import SpanKind

    from evlog import config
    from evlog.processors import install_default

    providers = {v: TracerProvider(shutdown_on_exit=False) for v in ("plain", "nop", "evlog")}
    providers["nop"].add_span_processor(_Nop())
    settings = config.Settings()  # the defaults: consumers wsat, psat, loadavg, mem, bytes
    log = install_default(settings, tracer_provider=providers["evlog"],
                          meter_provider=MeterProvider(shutdown_on_exit=False))
    if log is None:
        print("consumers: the default log could not be installed", file=sys.stderr)
        return 1
    tracers = {v: p.get_tracer("bench") for v, p in providers.items()}
    shapes = {
        "task": ("dask.execute inc", SpanKind.CONSUMER,
                 {"dask.task.key": "inc-5d1f", "dask.task.prefix": "inc", "dask.worker.address": "tcp://127.0.0.1:1"}),
        "other": ("dask.task inc", SpanKind.INTERNAL, {"dask.task.key": "inc-5d1f", "dask.task.prefix": "inc"}),
    }
    for shape in shapes.values():  # warm up (name caches, the first psutil reading)
        for tracer in tracers.values():
            _spans(tracer, *shape, 200)
    log.fetch()

    variants = list(tracers)
    times = {(s, v): [] for s in shapes for v in variants}
    hook_costs = {s: [] for s in shapes}
    recorded = {s: 0 for s in shapes}
    for r in range(rounds):
        order = variants if r % 2 == 0 else variants[::-1]
        for s, shape in shapes.items():
            for v in order:
                times[(s, v)].append(_spans(tracers[v], *shape, n))
            recorded[s] += len(log.fetch()["wsat"])
            if r % 4 == 0:
                span = tracers["evlog"].start_span(shape[0], kind=shape[1], attributes=shape[2])
                span.end()
                log.fetch()
                hook_costs[s].append(_hooks(log, span, span._readable_span(), n))
                log.fetch()

    def med(xs):
        return statistics.median(xs)

    for s in shapes:
        plain, ev = med(times[(s, "plain")]), med(times[(s, "evlog")])
        print(f"consumers.{s}_span: ratio {ev / plain:.3f} (plain {plain:.2f}, evlog {ev:.2f}, us CPU per span)")
    for s in shapes:
        added = med([e - p for e, p in zip(times[(s, "evlog")], times[(s, "plain")])])
        sdk = med([e - p for e, p in zip(times[(s, "nop")], times[(s, "plain")])])
        ours = med([e - p for e, p in zip(times[(s, "evlog")], times[(s, "nop")])])
        bare = med(times[(s, "plain")])
        print(f"consumers.added.{s}_span: +{added:.2f} us per span, {100 * added / bare:.1f}% of the bare span "
              f"(of which the SDK's call of any processor +{sdk:.2f}, evlog's work +{ours:.2f}; the two hooks "
              f"timed alone +{med(hook_costs[s]):.2f}); goal <= {GOAL_US:g} us where the bare span costs "
              f"{REFERENCE_SPAN_US:g} us, i.e. <= {100 * GOAL_US / REFERENCE_SPAN_US:.0f}%")
    expected = rounds * n * 2
    print(f"consumers.proof: the default log recorded {recorded['task']} task span starts and finishes of "
          f"{expected} ({rounds} rounds x {n} spans x 2), and {recorded['other']} of the other spans (it keeps "
          f"only task executions and transfers unless core or esat is asked for)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
