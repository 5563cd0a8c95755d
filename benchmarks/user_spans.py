"""A loop making the program's own spans: evlog's path against the plain SDK with a BatchSpanProcessor.

Both export OTLP/gRPC to the same counting receiver (a child process: grpcio and opentelemetry-proto,
nothing of evlog), alternately, N spans per run in a tight loop:
- plain: ``python prog.py`` with a TracerProvider, a BatchSpanProcessor and the stock OTLPSpanExporter
  set up in the program, as the SDK's documentation does it;
- evlog: ``evlog-instrument python prog.py`` with the same loop and nothing set up (the run's exporter
  process exports; the program's spans go to it as records).
The loop's wall time is measured inside the program; every run waits until the receiver has what was
delivered (bounded), then reports the spans delivered of those made.
Goal (issue 28): evlog's loop at least 0.9 of the plain one's rate, with every span delivered.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = """
import os, sys, time
if os.environ.get("PLAIN"):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
from opentelemetry import trace
tracer = trace.get_tracer("bench")
n = int(sys.argv[1])
t = time.perf_counter()
for i in range(n):
    with tracer.start_as_current_span("loop") as s:
        s.set_attribute("i", i)
print("LOOP", time.perf_counter() - t, flush=True)
"""


def receiver_main() -> None:
    """Child: a counting OTLP/gRPC receiver; prints its port, then the span count per stdin line."""
    import threading
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    count = [0]
    lock = threading.Lock()

    class Traces(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):
            n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with lock:
                count[0] += n
            return trace_service_pb2.ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    for line in sys.stdin:
        with lock:
            print(count[0], flush=True)
        if line.strip() == "quit":
            break
    server.stop(None)


def _count(rcv) -> int:
    rcv.stdin.write("?\n")
    rcv.stdin.flush()
    return int(rcv.stdout.readline())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--receiver", action="store_true")
    ap.add_argument("--pairs", type=int, default=0)
    args = ap.parse_args()
    if args.receiver:
        return receiver_main()
    n = 20_000 if args.quick else 100_000
    pairs = args.pairs or (3 if args.quick else 5)
    rcv = subprocess.Popen([sys.executable, __file__, "--receiver"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    port = int(rcv.stdout.readline())
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "loop.py")
        with open(prog, "w") as fh:
            fh.write(PROGRAM)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
        base.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
                    OTEL_EXPORTER_OTLP_INSECURE="true", OTEL_METRICS_EXPORTER="none", OTEL_LOGS_EXPORTER="none")
        rates = {"plain": [], "evlog": []}
        delivered = {"plain": [], "evlog": []}
        for k in range(pairs):
            order = ("plain", "evlog") if k % 2 == 0 else ("evlog", "plain")
            for variant in order:
                before = _count(rcv)
                if variant == "plain":
                    cmd = [sys.executable, prog, str(n)]
                    env = {**base, "PLAIN": "1"}
                else:
                    cmd = [sys.executable, "-m", "evlog.launcher", sys.executable, prog, str(n)]
                    env = {**base, "EVLOG_SUMMARY": "false", "EVLOG_CONSUMERS": "none", "EVLOG_CAPTURE": "off"}
                out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp).stdout
                loop = float(next(line.split()[1] for line in out.splitlines() if line.startswith("LOOP")))
                deadline = time.monotonic() + 30  # what is still on its way (the plain SDK's queue flushed at exit)
                got = _count(rcv) - before
                while got < n and time.monotonic() < deadline:
                    time.sleep(0.2)
                    got = _count(rcv) - before
                rates[variant].append(n / loop)
                delivered[variant].append(got)
        rcv.stdin.write("quit\n")
        rcv.stdin.flush()
        rcv.wait(30)
    plain, evlog = statistics.median(rates["plain"]), statistics.median(rates["evlog"])
    print(f"user_spans: ratio {evlog / plain:.3f} (plain {plain:,.0f}, evlog {evlog:,.0f}, spans/s in the loop; "
          f"median of {pairs} pairs of {n:,} spans)")
    print(f"user_spans.delivered: evlog {min(delivered['evlog']):,} of {n:,} at worst (plain BatchSpanProcessor: "
          f"{min(delivered['plain']):,} of {n:,} at worst, {statistics.median(delivered['plain']):,.0f} median)")


if __name__ == "__main__":
    main()
