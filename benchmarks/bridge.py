"""Per-event cost of evlog.bridge.record_event, against a raw OTel Logger.emit and torch's own record().

One process set up by evlog.configure(), exporting OTLP/gRPC to a receiver in a child process (so its
decoding does not compete for this process's GIL). Variants, run alternately round by round:
- raw:   ``logger.emit(event_name=..., body=..., attributes={"evlog.event_type": ...})`` on the same
         LoggerProvider and Logger the bridge uses (the floor for sending one event);
- bridge: ``record_event(Event(...))`` (default NullEventHandler destination; the OTel event goes out);
- torch: ``torch.distributed.elastic.events.record(Event(...))`` with torch's default null destination,
         evlog's torch instrumentation off (plain torch) and on (torch.on: also an OTel event).
Each round runs N calls per variant in chunks of 100, the variants' chunks interleaved (order reversed
every other chunk) so all see the same conditions, timing the CPU of the calling thread (other
processes on a busy machine and the export thread's turns on the GIL do not count); then it flushes
(untimed), so the export queue never overflows. Figures are medians over rounds.
Goal: the bridge adds at most 30% to a raw emit (ratio <= 1.30).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

METADATA = {"step": 1, "loss": 0.5, "phase": "train", "rank": 0}


def receiver_main() -> None:
    """Child process: a counting OTLP receiver; prints its gRPC endpoint, then a count per stdin line."""
    import threading

    from evlog.data.receiver import OTLPReceiver

    counts: dict = {}
    lock = threading.Lock()

    def sink(signal, rows):
        if signal == "logs":
            with lock:
                for r in rows:
                    counts[r["event_name"]] = counts.get(r["event_name"], 0) + 1

    r = OTLPReceiver(sink, http_port=None).start()
    print(r.grpc_endpoint, flush=True)
    for line in sys.stdin:
        with lock:
            print(" ".join(f"{k}={v}" for k, v in sorted(counts.items()) if k), flush=True)
        if line.strip() == "quit":
            break
    r.stop()


CHUNK = 100


def _cpu(fn, n: int) -> float:
    """Seconds of this thread's CPU for n calls of fn()."""
    t = time.thread_time()
    for _ in range(n):
        fn()
    return time.thread_time() - t


def _round(variants: dict, n: int, toggle) -> dict:
    """Microseconds of CPU per call of each variant, over n calls each in interleaved chunks."""
    spent = dict.fromkeys(variants, 0.0)
    order = list(variants.items())
    for c in range(max(1, n // CHUNK)):
        for name, (fn, instrumented) in (order if c % 2 else order[::-1]):
            if instrumented is not None:
                toggle(instrumented)
            spent[name] += _cpu(fn, CHUNK)
    return {k: v / (max(1, n // CHUNK) * CHUNK) * 1e6 for k, v in spent.items()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    ap.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.receiver:
        receiver_main()
        return 0
    rounds, n = (5, 2000) if args.quick else (15, 2000)

    child = subprocess.Popen([sys.executable, __file__, "--receiver"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))})
    try:
        endpoint = child.stdout.readline().strip()
        for k in [k for k in os.environ if k.startswith(("OTEL_", "EVLOG_"))]:
            del os.environ[k]
        os.environ.update({"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                           "OTEL_EXPORTER_OTLP_INSECURE": "true", "OTEL_TRACES_EXPORTER": "otlp",
                           "OTEL_LOGS_EXPORTER": "otlp", "OTEL_METRICS_EXPORTER": "none"})
        import evlog

        evlog.configure(consumers="none")
        from torch.distributed.elastic import events as tevents

        from evlog.bridge import Event, otel, record_event
        from evlog.observed import boot, lifecycle

        logger = otel.evlog_logger()
        torch_inst = boot.active_instrumentors()["torch_elastic"]
        ev = Event("bench.bridge", "bench", METADATA)
        tev_plain = tevents.Event("bench.torch.plain", tevents.EventSource.WORKER, metadata=METADATA)
        tev_on = tevents.Event("bench.torch.on", tevents.EventSource.WORKER, metadata=METADATA)
        attrs = {"evlog.event_type": "bench"}

        def raw():
            logger.emit(event_name="bench.raw", body=METADATA, attributes=attrs)

        variants = {
            "raw": (raw, None),
            "bridge": (lambda: record_event(ev), None),
            "torch": (lambda: tevents.record(tev_plain), False),
            "torch.on": (lambda: tevents.record(tev_on), True),
        }
        def toggle(on: bool) -> None:
            (torch_inst.instrument if on else torch_inst.uninstrument)()

        times: dict[str, list[float]] = {k: [] for k in variants}
        for r in range(rounds + 1):  # round 0 warms up, untimed
            us = _round(variants, n if r else 200, toggle)
            lifecycle.flush(30)
            if r:
                for k, v in us.items():
                    times[k].append(v)
        med = {k: statistics.median(v) for k, v in times.items()}

        child.stdin.write("count\n")
        child.stdin.flush()
        deadline = time.monotonic() + 30
        expected = {"bench.raw", "bench.bridge", "bench.torch.on"}
        want = 200 + rounds * n
        counts: dict = {}
        while time.monotonic() < deadline:
            counts = dict(kv.split("=", 1) for kv in child.stdout.readline().split())
            if all(int(counts.get(k, 0)) >= want for k in expected):
                break
            child.stdin.write("count\n")
            child.stdin.flush()
            time.sleep(0.2)
    finally:
        try:
            child.stdin.write("quit\n")
            child.stdin.close()
        except Exception:
            pass
        child.wait(10)

    print(f"bridge.record_event_vs_raw_emit: ratio {med['bridge'] / med['raw']:.2f} "
          f"(plain {med['raw']:.2f}, evlog {med['bridge']:.2f}, us CPU per event; goal <= 1.30)")
    print(f"bridge.record_event_vs_torch_null_record: ratio {med['bridge'] / med['torch']:.2f} "
          f"(plain {med['torch']:.2f}, evlog {med['bridge']:.2f}, us CPU per event)")
    print(f"bridge.torch_record_instrumented: ratio {med['torch.on'] / med['torch']:.2f} "
          f"(plain {med['torch']:.2f}, evlog {med['torch.on']:.2f}, us CPU per event)")
    got = {k: int(counts.get(k, 0)) for k in sorted(expected)}
    print(f"bridge.proof: the receiver got {got} events (each variant sent {want}); "
          f"bench.torch.plain: {int(counts.get('bench.torch.plain', 0))} (uninstrumented, none expected)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
