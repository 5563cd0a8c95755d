"""Record the frames a small Dask run's observed processes send to the run's exporter process.

    python tests/data/record_dask_frames.py     (writes tests/data/dask_frames.marshal)

This script stands where the exporter process stands: it binds the exporter socket (EVLOG_EXPORTER),
runs PROGRAM with evlog set up in every process (evlog's sitecustomize on PYTHONPATH, as evlog-instrument
does), and keeps each connection's frames (the ``marshal`` bodies of evlog/wire/frames.py), in order:
a list per connection. tests/test_span_encoding.py replays them through the exporter process's builders.
PROGRAM makes every kind of span: Dask tasks (one erring), executions, transfers between the two workers,
held-memory spans, a computation split into batch and group spans (EVLOG_DASK_TRACE_TASKS=20), a
concurrent.futures task, and the program's own span with events, a link and attributes of every type.
"""
from __future__ import annotations

import marshal
import os
import selectors
import socket
import subprocess
import sys
import tempfile

from evlog.launcher import SITE_DIR
from evlog.wire.frames import HEADER

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dask_frames.marshal")

PROGRAM = r'''
import concurrent.futures

from distributed import Client, LocalCluster
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode


def inc(x):
    return x + 1


def add(a, b):
    return a + b


def fail(x):
    raise ValueError(f"no {x} here: ünïcødé")


if __name__ == "__main__":
    tracer = trace.get_tracer("app.lib", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.21.0")
    with tracer.start_as_current_span("app.setup") as setup:
        pass
    with tracer.start_as_current_span("app.work", kind=SpanKind.SERVER, links=[Link(setup.get_span_context(),
                                      {"why": "after"})], attributes={"s": "ünï", "i": -7, "f": 0.25, "b": True,
                                      "ss": ("a", ""), "ii": (1, 2), "ff": (0.5,), "bb": (True, False), "e": ""}) as s:
        s.add_event("checkpoint", {"step": 2, "big": "x" * 300})
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            assert pool.submit(inc, 1).result() == 2
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
                Client(cluster) as client:
            w1, w2 = list(client.scheduler_info()["workers"])
            assert sum(client.gather(client.map(inc, range(30)))) == 465
            xs = client.map(inc, range(8), workers=[w1], key=[f"x-{i}" for i in range(8)])
            ys = client.map(add, xs, xs[::-1], workers=[w2], key=[f"y-{i}" for i in range(8)])
            assert sum(client.gather(ys)) == 2 * sum(range(1, 9))
            try:
                client.submit(fail, 3).result()
            except ValueError:
                pass
            del xs, ys
        s.set_status(Status(StatusCode.ERROR, "done, with one task failed"))
'''


def main() -> None:
    addr = f"evlog-record-{os.getpid()}-{os.urandom(4).hex()}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + addr)
    listener.listen(64)
    listener.setblocking(False)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "EVLOG_"))}
    env.update(PYTHONPATH=os.pathsep.join([SITE_DIR, env.get("PYTHONPATH", "")]), EVLOG_EXPORTER=addr,
               EVLOG_RUN_ID="record", EVLOG_RUN_DIR=tempfile.mkdtemp(prefix="evlog-record-"), EVLOG_CAPTURE="off",
               EVLOG_DASK_TRACE_TASKS="20", EVLOG_SUMMARY="false", OTEL_SERVICE_NAME="recorded")
    program = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    conns: dict = {}  # socket -> [unread bytes, frames]
    done: list = []
    while program.poll() is None or conns:
        for key, _ in sel.select(0.2):
            if key.fileobj is listener:
                sock, _ = listener.accept()
                sock.setblocking(False)
                conns[sock] = [bytearray(), []]
                sel.register(sock, selectors.EVENT_READ)
                continue
            sock = key.fileobj
            try:
                data = sock.recv(1 << 20)
            except BlockingIOError:
                continue
            buf, frames = conns[sock]
            buf += data
            while len(buf) >= HEADER.size and len(buf) - HEADER.size >= HEADER.unpack_from(buf)[0]:
                n = HEADER.unpack_from(buf)[0]
                frames.append(bytes(buf[HEADER.size:HEADER.size + n]))
                del buf[:HEADER.size + n]
            if not data:
                sel.unregister(sock)
                sock.close()
                done.append(conns.pop(sock)[1])
    if program.returncode:
        sys.exit(f"the program failed ({program.returncode})")
    with open(OUT, "wb") as f:
        marshal.dump([frames for frames in done if frames], f, 4)
    print(f"{sum(len(f) for f in done)} frames from {len(done)} connections -> {OUT}")


if __name__ == "__main__":
    main()
