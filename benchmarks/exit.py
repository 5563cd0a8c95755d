"""How long a program takes to exit after its last line, with a collector that refuses connections.

The program: a 2-worker spawn ProcessPoolExecutor running 50 calls that each make a span, then a last
line. Plain (``python prog.py``, no telemetry) and evlog (``evlog-instrument python prog.py``, OTLP/gRPC to
a port nothing listens on), alternately; the time from the last line to the exit of the command (for
evlog: the launcher, after the run's exporter process gave up on the collector).
Goal (issue 28): evlog's exit within 1.5 s of the last line (the README: 1 s once the collector has
proven unreachable).
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

PROGRAM = """
import concurrent.futures as cf, multiprocessing as mp
from opentelemetry import trace

def work(x):
    with trace.get_tracer("w").start_as_current_span("inner"):
        return x * 2

if __name__ == "__main__":
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        sum(pool.map(work, range(50)))
    print("last line", flush=True)
"""


def _after_last_line(cmd, env, cwd) -> float:
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    for line in proc.stdout:
        if line == b"last line\n":
            break
    t = time.monotonic()
    proc.wait(60)
    return time.monotonic() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    pairs = 3 if args.quick else 7
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        prog = os.path.join(tmp, "prog.py")
        with open(prog, "w") as fh:
            fh.write(PROGRAM)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{dead}", EVLOG_SUMMARY="false")
        times = {"plain": [], "evlog": []}
        for k in range(pairs):
            for variant in (("plain", "evlog") if k % 2 == 0 else ("evlog", "plain")):
                cmd = [sys.executable, prog] if variant == "plain" else [sys.executable, "-m", "evlog.launcher",
                                                                          sys.executable, prog]
                times[variant].append(_after_last_line(cmd, env, tmp))
    plain, evlog = statistics.median(times["plain"]), statistics.median(times["evlog"])
    print(f"exit: ratio {evlog / plain:.1f} (plain {plain:.2f}, evlog {evlog:.2f}, s from the last line to the exit, "
          f"collector refusing connections; median of {pairs} pairs, evlog's worst {max(times['evlog']):.2f} s)")


if __name__ == "__main__":
    main()
