"""The run's exporter process: records in, spans out through the SDK's public types and stock exporters.

evlog-instrument binds its socket before the program starts and spawns it at the first connection; a
process set up without the launcher starts its own on first use (evlog.observed.records); both through
evlog.wire.endpoint. Observed processes connect to its abstract Unix socket (EVLOG_EXPORTER) and
send frames (evlog/wire/frames.py): a header (bytes, records) and ``marshal`` of ``(hello, kind, meta, records)``
(evlog.observed.records). Here:
- the reader (the main thread) only splits frames into the backlog (evlog/exporter/backlog.py: memory,
  then a spool file), so senders never wait for spans to be built or exported;
- ``hello`` (a process's first frame, and again when its resource changes): its resource attributes and
  the run's OTEL_*/EVLOG_* settings (the first one configures the exporters: the run folder, OTLP, ...);
- the ``Builder`` thread gives each source (``<kind>#<n>``, one per scheduler, ...) a builder of its kind
  that turns its records into SDK ``ReadableSpan``s (``_builders``), while the exporters keep up; the
  console relay's reader sends the program's output (kind ``console``), whose builder makes SDK
  ``ReadableLogRecord``s and metadata gauges instead;
- one export thread per signal (spans, log records) sends them to the exporters the settings name (the
  stock OTLP exporters, the run folder, the console, entry points; evlog.exporter.select), in batches,
  retrying failed ones.

It ends when its starter's control pipe closes (the program has exited, or the launcher was killed): it
reads what connected processes still send for at most LINGER seconds, then builds and exports what is
held for at most EXIT_TIMEOUT seconds (FAILING_WAIT once the collector has failed) in its main thread,
counts what is left, writes its counts to the run's stats file (the launcher's summary) and exits. Its
builder and export threads run at a lower priority (lower_priority), so on a busy machine their work
waits for the program's; its reader does not.
"""
from __future__ import annotations

import os
import threading

from evlog.wire.endpoint import CONTROL_FD, EXIT_TIMEOUT, LINGER, LISTEN_FD

NICE = 10
FAILING_WAIT = 1.0
BATCH = 512  # spans per export call (OTEL_BSP_MAX_EXPORT_BATCH_SIZE once configured)
MAX_PENDING = 1 << 21  # spans waiting for export before the oldest are dropped (and counted)


# ---- in the exporter process ---------------------------------------------------------------------


def _builders(logs=None, metrics=None):
    """kind -> factory(meta, resource getter) of an object with feed(records, now, final) -> spans (the
    builders of log records and metrics hand them to ``logs`` and ``metrics``, their pipelines, and return
    no spans)."""
    from evlog.builders import console as console_logs
    from evlog.builders import dask_executions
    from evlog.builders import dask_lives
    from evlog.builders import dask_readings
    from evlog.builders import pool_spans

    from evlog.builders import sdk_rebuild

    def dask_transitions(meta, resource):
        return dask_lives.Lives(resource, transitions=bool((meta or {}).get("transitions", True)))

    def dask_worker(meta, resource):
        return dask_executions.Executions(resource)

    def dask_vocabulary(meta, resource):  # Dask's own spans and fine performance metrics
        return dask_readings.Readings(meta, resource, metrics)

    def pools(meta, resource):
        return pool_spans.PoolSpans(resource)

    def console(meta, resource):
        return console_logs.ConsoleLogs(meta, resource, logs, PipelineMetrics(metrics) if metrics is not None else None)

    from evlog.builders import profiles  # issue 31: task profiles -> evlog.profile log records, in a pipeline of their own

    def profile(meta, resource):
        return profiles.ProfileLogs(meta, resource, _profiles_pipeline().add)

    return {dask_lives.KIND: dask_transitions, dask_executions.KIND: dask_worker, pool_spans.KIND: pools,
            dask_readings.KIND: dask_vocabulary,
            console_logs.KIND: console, profiles.KIND: profile,
            sdk_rebuild.SPAN: lambda meta, resource: sdk_rebuild.Spans(resource),
            sdk_rebuild.LOG: lambda meta, resource: sdk_rebuild.Logs(resource, logs),
            sdk_rebuild.METRICS: lambda meta, resource: sdk_rebuild.Metrics(resource, metrics)}


PROFILES_PENDING = 2048  # profile log records waiting for a slow or refusing collector (about 17 min of one prefix)
_profile_pipes: list = []


def _profiles_pipeline():
    """The task profiles' logs pipeline (issue 31), made at the first profile record: bounded, so a
    collector that refuses them (too large, no logs) holds only them, never the console's log records or
    the spans; what is dropped is counted (``dropped.profiles``)."""
    if not _profile_pipes:
        class Bounded(Pipeline):
            def add(self, records: list) -> None:
                from evlog import stats

                super().add(records)
                for sink in self.sinks or ():
                    over = len(sink.pending) - PROFILES_PENDING
                    if over > 0:
                        for _ in range(over):
                            sink.pending.popleft()
                        stats.incr("dropped.profiles", over)

        p = Bounded("logs")
        p.configure({})  # the run's settings, read from the first hello already
        _profile_pipes.append(p)
    return _profile_pipes[0]


_Resource: list = []


def resource(attributes: dict):
    """An SDK Resource whose hash is computed once: the stock encoders hash every span's, log record's and
    collection's resource to group them, and Resource's own hash is a JSON dump of its attributes each
    time (about 10 µs; a Resource never changes)."""
    if not _Resource:
        from opentelemetry.sdk.resources import Resource

        class HashedResource(Resource):
            def __init__(self, attributes, schema_url=None):
                super().__init__(attributes, schema_url)
                self._evlog_hash = Resource.__hash__(self)

            def __hash__(self) -> int:
                return self._evlog_hash

        _Resource.append(HashedResource)
    return _Resource[0](attributes)


class _Client:
    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()
        self.resource = None
        self.builders: dict = {}

    def get_resource(self):
        return self.resource


WHAT = {"traces": "spans", "logs": "log records", "metrics": "metric points"}


def _send_spans(exporter, batch: list) -> tuple[bool, int]:
    return getattr(exporter.export(batch), "name", None) == "SUCCESS", len(batch)  # Span/LogRecordExportResult


def _send_metrics(exporter, batch: list) -> tuple[bool, int]:
    """``batch``: (MetricsData, points) pairs of distinct resources (``_Sink.take``), sent as one MetricsData
    (the stock encoder keeps one entry per resource: two collections of one process would be one lost)."""
    from opentelemetry.sdk.metrics.export import MetricsData

    data = MetricsData([rm for md, _n in batch for rm in md.resource_metrics])
    ok = getattr(exporter.export(data, timeout_millis=10_000), "name", None) == "SUCCESS"
    return ok, sum(n for _md, n in batch)


class _Sink:
    """One exporter of the run and its queue: a batch that fails is tried again (after a pause) until it
    goes through, so a collector that is down for a while loses nothing; only the memory bound and
    exit's deadline drop items (spans, log records or metric points: ``signal``), and those are counted."""

    def __init__(self, make, batch: int = BATCH, signal: str = "traces"):
        import threading
        from collections import deque

        self.make = make
        self.signal = signal
        self.what = WHAT[signal]
        self.send = _send_metrics if signal == "metrics" else _send_spans
        self.batch = batch
        self.exporter = None
        self.pending: deque = deque()
        self.retry: list | None = None  # the batch that failed last, tried first
        self.inflight = 0  # items of the batch being exported now
        self.lock = threading.Lock()
        self.closing = False
        self.failing = False
        self.pause_until = 0.0

    def export(self, stop_at: float | None = None) -> None:
        """Export what is pending (one caller at a time: at exit, the final pass waits for the regular
        thread's batch until ``stop_at``, so a batch is never in two exports, and never uncounted)."""
        import time

        wait = -1 if stop_at is None else max(0.0, stop_at - time.monotonic())
        if not self.lock.acquire(timeout=wait):
            return
        try:
            self._export(stop_at)
        finally:
            self.lock.release()

    def _export(self, stop_at: float | None) -> None:
        import time

        from evlog import stats
        from evlog import notices

        from evlog.exporter import select

        if self.exporter is None:
            try:
                self.exporter = self.make()
            except Exception as exc:
                notices.warn_once(f"exporter-build-{self.signal}", f"cannot set up the exporter of {self.what}: {exc}")
                self.make = lambda: None
            if self.exporter is None:
                stats.incr("dropped.no_exporter", self.count(self.pending))
                self.pending.clear()
                return
        pending = self.pending
        while self.retry or pending:
            now = time.monotonic()
            if now < self.pause_until or (stop_at is not None and now >= stop_at):
                return
            if stop_at is None and self.closing:  # exit's final pass takes over, with its deadline
                return
            batch = self.retry or self.take()
            self.retry, self.inflight = None, self.count(batch)
            try:
                ok, n = self.send(self.exporter, batch)
            except Exception as exc:
                notices.warn_once(f"export-{self.signal}", f"exporting {self.what} failed: {exc}")
                ok, n = False, self.inflight
            if ok:
                stats.incr(f"{self.signal}.exported", n)
                _note_processes(self.resources(batch))
                self.failing = False
                select.answered()
            else:
                self.retry, self.failing = batch, True
                self.pause_until = time.monotonic() + 1.0
            self.inflight = 0  # counted as exported, or held again as the retry
            stats.progress()  # counted even if this process is killed before its exit

    def take(self) -> list:
        """The next batch: up to ``batch`` items; for metrics, collections of distinct resources only."""
        pending = self.pending
        if self.signal != "metrics":
            return [pending.popleft() for _ in range(min(self.batch, len(pending)))]
        out, seen = [], set()
        while pending and len(out) < self.batch:
            resources = {id(rm.resource) for rm in pending[0][0].resource_metrics}
            if out and resources & seen:
                break
            seen |= resources
            out.append(pending.popleft())
        return out

    def resources(self, items) -> list:
        """The resources of ``items`` (spans, log records: their own; metrics: their collections')."""
        if self.signal == "metrics":
            return [rm.resource for md, _n in items for rm in md.resource_metrics]
        return [item.resource for item in items]

    def count(self, items) -> int:
        """Items (spans, log records, metric points) in ``items``."""
        if self.signal == "metrics":
            return sum(n for _md, n in items)
        return len(items)

    def held(self) -> int:
        return self.count(self.pending) + self.count(self.retry or ()) + self.inflight


_noted: dict = {}  # id -> the resources whose process is counted (kept, so an id is never reused)


def _note_processes(resources: list) -> None:
    """Count the processes whose telemetry was exported, each once (evlog.process_count: the summary)."""
    from evlog import process_count, stats

    for r in resources:
        if id(r) not in _noted:
            if len(_noted) >= 4096:  # a resource per process and change, usually: bounded all the same
                _noted.clear()
            _noted[id(r)] = r
            key = process_count.stats_key(r.attributes)
            if key not in stats.counters:
                stats.incr(key)


class Pipeline:
    """Finished spans (or log records, or MetricsData: ``signal``) -> the run's exporters of that signal, in
    batches, from one thread."""

    def __init__(self, signal: str = "traces"):
        import threading

        self.signal = signal
        self.sinks: list | None = None
        self.processors = None  # EVLOG_SPAN_PROCESSORS (span_processors.RunProcessors), for spans
        self.delay = 0.5  # seconds between export passes (OTEL_BSP_SCHEDULE_DELAY once configured)
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name=f"evlog-export-{signal}", daemon=True)
        self._thread.start()

    def configure(self, env: dict) -> None:
        """The run's settings, from the first hello: exporters as evlog.exporter.select builds them."""
        if self.sinks is not None:
            return
        from evlog.exporter import select

        settings = _settings(env)
        signal = self.signal
        makers = [m for m in (select.factory(signal, kind, settings) for kind in getattr(settings.exporters, signal)) if m]
        n = settings.sdk_numbers  # validated, as in every process of the run
        if signal == "metrics":
            self.delay, batch = 0.5, 64  # collections (a MetricsData each) per export call
        else:
            p = "OTEL_BSP_" if signal == "traces" else "OTEL_BLRP_"
            self.delay, batch = n[p + "SCHEDULE_DELAY"] / 1000, n[p + "MAX_EXPORT_BATCH_SIZE"]
        self.sinks = [_Sink(m, batch, signal) for m in makers]
        if signal == "traces" and settings.span_processors:
            from evlog.exporter.span_processors import RunProcessors

            self.processors = RunProcessors(settings.span_processors)

    def add(self, items: list) -> None:
        if not items:
            return
        if self.processors is not None:
            self.processors.on_end(items)
        if not self.sinks:
            return
        from evlog import stats

        for sink in self.sinks:
            sink.pending.extend(items)
            over = len(sink.pending) - MAX_PENDING
            if over > 0:
                dropped = [sink.pending.popleft() for _ in range(over)]
                stats.incr("dropped.queue_full", sink.count(dropped))
        if len(self.sinks[0].pending) >= self.sinks[0].batch:
            self._wake.set()

    def failing(self) -> bool:
        from evlog.exporter import select

        return select.failing() or any(s.failing for s in self.sinks or ())

    def held(self) -> int:
        """Items its exporters have yet to send, all of them."""
        return sum(s.held() for s in self.sinks or ())

    def behind(self) -> int:
        """Items waiting for the slowest exporter."""
        return max((s.held() for s in self.sinks or ()), default=0)

    def _loop(self) -> None:
        lower_priority()
        while not self._stop:
            self._wake.wait(self.delay)
            self._wake.clear()
            if not self._stop:
                for sink in self.sinks or ():
                    sink.export()

    def finish(self, clock: "ExitClock") -> None:
        """Export what is held until ``clock``'s deadline; count the rest."""
        import threading
        import time

        self._stop = True
        for sink in self.sinks or ():
            sink.closing = True
        self._wake.set()

        def run():
            for sink in self.sinks or ():
                sink.pause_until = 0.0
                sink.export(stop_at=clock.deadline())

        t = threading.Thread(target=run, name="evlog-export-final", daemon=True)
        t.start()
        while t.is_alive() and time.monotonic() < clock.deadline():
            t.join(0.05)
        _count_at_exit(self, self.held)
        if not t.is_alive():
            for sink in self.sinks or ():
                try:
                    if sink.exporter is not None:
                        sink.exporter.shutdown()
                except Exception:
                    pass


class ExitClock:
    """One deadline for all the exporter process still does at its exit: EXIT_TIMEOUT, brought forward to
    FAILING_WAIT from the moment a collector is seen failing (a dead collector costs the run 1 s, once)."""

    def __init__(self, limit: float, pipelines):
        import time

        self.end = time.monotonic() + limit
        self.pipelines = pipelines
        self.cut = False

    def deadline(self) -> float:
        if not self.cut and any(p.failing() for p in self.pipelines):
            import time

            self.cut = True
            self.end = min(self.end, time.monotonic() + FAILING_WAIT)
        return self.end

    def left(self) -> float:
        import time

        return max(0.0, self.deadline() - time.monotonic())


def PipelineMetrics(pipeline):
    """A MetricExporter (for a periodic reader of the exporter process's own, e.g. the console's metadata
    gauges) whose collections go into ``pipeline``, the metrics pipeline."""
    from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult

    class _PipelineMetrics(MetricExporter):
        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
            n = sum(len(m.data.data_points) for rm in metrics_data.resource_metrics
                    for sm in rm.scope_metrics for m in sm.metrics)
            if n:
                pipeline.add([(metrics_data, n)])
            return MetricExportResult.SUCCESS

        def force_flush(self, timeout_millis: float = 10_000) -> bool:
            return True

        def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
            pass

    return _PipelineMetrics()


_current: list = []


def _settings(env: dict):
    """The run's settings, from the first hello's environment (once per process)."""
    if not _current:
        from evlog import config

        os.environ.update(env)  # the program's view of the run (its owner made the run folder)
        from evlog import propagation  # carriers in records are read with the program's OTEL_PROPAGATORS

        propagation.configure(env)
        settings = config.load()
        config.set_current(settings)
        _current.append(settings)
    return _current[0]


def _collect_less() -> None:
    """This process holds thousands of SDK spans (some 40 objects each) between building and export, and
    the garbage collector walked them all again every few hundred allocations: 164 us of CPU per Dask task
    with CPython's thresholds, 149 with these, 143 with no collection at all (benchmarks/dask_overhead.py,
    3 pairs each). What start-up imported is never garbage: frozen out of every collection."""
    import gc

    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def lower_priority() -> None:
    """Nice the calling thread only (Linux schedules threads on their own): the builder and export
    threads yield a busy machine to the program, while the reader, whose work is a read and a split,
    keeps up with what observed processes send, so they never hold their records for long."""
    import threading

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError):
        pass


def _same_user(sock) -> bool:
    """Is the peer a process of this user (SO_PEERCRED)? Others may not feed this run's telemetry."""
    import socket
    import struct

    try:
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                struct.calcsize("3i")))
    except (OSError, AttributeError):
        return True  # no SO_PEERCRED here (not Linux): nothing to check with
    return uid == os.getuid()


class Builder:
    """The builder thread: backlog entries -> spans -> the pipeline (log records -> the logs pipeline,
    metrics -> the metrics pipeline), in arrival order. It takes the next frame only while the exporters
    keep up (BEHIND spans or log records waiting at most), so a slow or absent collector, or a burst of
    console output, makes frames wait in the backlog (spooled to disk) rather than as spans in memory."""

    BEHIND = 16384

    def __init__(self, backlog, pipeline, clients: dict, logs=None, metrics=None):
        import threading

        self.backlog = backlog
        self.pipeline = pipeline
        self.logs = logs if logs is not None else Pipeline("logs")
        self.metrics = metrics if metrics is not None else Pipeline("metrics")
        self.pipelines = (self.pipeline, self.logs, self.metrics)
        self.clients = clients  # client id -> _Client (made by the reader)
        self.kinds = _builders(self.logs, self.metrics)
        self.stop_at = None  # monotonic deadline once the process is closing
        self.input_done = False
        self.host = None  # the host's run start and end samples (host_samples), from the first hello
        self.thread = threading.Thread(target=self._loop, name="evlog-build", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        import time

        lower_priority()
        last_tick = time.monotonic()
        while True:
            now = time.monotonic()
            if self.stop_at is not None and now >= self.stop_at:
                return
            if now - last_tick >= 0.5:
                self.tick()
                last_tick = now
            if self.stop_at is None and max(self.pipeline.behind(), self.logs.behind()) > self.BEHIND:
                time.sleep(0.05)
                continue
            entry = self.backlog.get(0.25)
            if entry is None:
                if self.input_done and not self.backlog.held():
                    return
                continue
            self._take(entry)

    def _take(self, entry) -> None:
        """One backlog entry: a client's frame is built, or its end finishes its builders."""
        client_id, _records, data = entry
        client = self.clients.get(client_id)
        if client is None:
            return
        if data is None:
            self._finish(client_id, client)
        else:
            self._frame(client, data)

    def drain(self, clock: ExitClock) -> None:
        """At exit, in the calling thread: build what the backlog holds and export it as it goes, until
        ``clock``'s deadline."""
        import time

        while time.monotonic() < clock.deadline():
            entry = self.backlog.get(0)
            if entry is None:
                break
            self._take(entry)
            for pipeline in self.pipelines:
                if pipeline.behind() >= BATCH:
                    for sink in pipeline.sinks or ():
                        sink.export(stop_at=clock.deadline())

    def _frame(self, client: _Client, data: bytes) -> None:
        import marshal
        import time

        from evlog import stats
        from evlog import notices

        try:
            hello, kind, meta, records = marshal.loads(data)
        except Exception as exc:
            notices.warn_once("exporter-frame", f"the exporter process got a frame it cannot read: {exc!r}")
            stats.incr("dropped.bad_frames")
            return
        if hello is not None:
            client.resource = resource(hello.get("resource") or {})
            if self.pipeline.sinks is None:
                from evlog.exporter import host_samples

                for pipeline in self.pipelines:
                    pipeline.configure(hello.get("env") or {})
                self.host = host_samples.start(_settings(hello.get("env") or {}), hello.get("resource") or {},
                                               self.metrics)
        b = client.builders.get(kind)
        if b is None:
            make = self.kinds.get(kind.partition("#")[0])  # "<kind>#<source number>"
            if make is None:
                notices.warn_once(f"exporter-kind-{kind}", f"the exporter process has no builder for {kind!r} records")
                stats.incr("dropped.unknown_kind", len(records))
                return
            b = client.builders[kind] = make(meta, client.get_resource)
        try:
            self.pipeline.add(b.feed(records, time.monotonic()))
        except Exception as exc:  # the batch is lost: said once, counted
            notices.warn_once(f"exporter-build-{kind}", f"spans of {kind} records could not be built: {exc!r}")
            stats.incr("dropped.unbuilt", len(records))

    def _finish(self, client_id: int, client: _Client) -> None:
        import time

        from evlog import notices

        self.clients.pop(client_id, None)
        for b in client.builders.values():
            try:  # as in tick(): one builder's failure must not end the builder thread
                self.pipeline.add(b.feed((), time.monotonic(), True))
            except Exception as exc:
                notices.warn_once("exporter-finish", f"spans could not be built: {exc!r}")

    def tick(self, final: bool = False) -> None:
        import time

        from evlog import notices

        now = time.monotonic()
        for client in list(self.clients.values()):
            for b in list(client.builders.values()):
                try:
                    self.pipeline.add(b.feed((), now, final))
                except Exception as exc:
                    notices.warn_once("exporter-tick", f"spans could not be built: {exc!r}")


def main() -> None:
    import selectors
    import signal
    import socket
    import time

    # In the program's process group (a job control stop or a kill of the group reaches it too), but a
    # Ctrl-C or a closed terminal must not cut its flush short: it ends when its control pipe closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    terminated = []  # SIGTERM (a kill of the whole group): close as when the control pipe closes
    signal.signal(signal.SIGTERM, lambda *_: terminated.append(1))
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's own lines on stderr: evlog reports failures itself
    from evlog import stats
    from evlog import notices
    from evlog.observed import sdk

    from evlog.exporter import host_samples
    from evlog.exporter import select
    from evlog.exporter.backlog import Backlog

    sdk.route_sdk_logging()
    select.route_exporter_logging()
    from evlog.wire.frames import HEADER as header
    _collect_less()
    run_dir = os.environ.get("EVLOG_RUN_DIR")
    backlog = Backlog(run_dir if run_dir and os.path.isdir(run_dir) else None, spool=_spool_limit())
    pipeline = Pipeline()
    logs = Pipeline("logs")
    metrics = Pipeline("metrics")
    clients: dict = {}  # client id -> _Client
    builder = Builder(backlog, pipeline, clients, logs, metrics)
    listener = socket.socket(fileno=LISTEN_FD)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    sel.register(CONTROL_FD, selectors.EVENT_READ, "control")
    conns: dict = {}  # socket -> [client id, unread bytes]
    closing_at = None

    def split(conn: list) -> None:
        buf = conn[1]
        pos = 0
        while len(buf) - pos >= header.size:
            n, count = header.unpack_from(buf, pos)
            if len(buf) - pos - header.size < n:
                break
            backlog.put(conn[0], count, bytes(buf[pos + header.size:pos + header.size + n]))
            pos += header.size + n
        del buf[:pos]

    def drop(sock) -> None:
        conn = conns.pop(sock, None)
        sel.unregister(sock)
        sock.close()
        if conn is not None:
            backlog.end(conn[0])

    next_id = 0
    watchdog = None
    while True:
        for key, _mask in sel.select(0.25):
            if key.data == "control":
                try:
                    data = os.read(CONTROL_FD, 4096)
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(CONTROL_FD)
                    closing_at = time.monotonic()
            elif key.fileobj is listener:
                try:
                    sock, _ = listener.accept()
                except OSError:
                    continue
                if not _same_user(sock):  # an abstract socket name has no file permissions to guard it
                    sock.close()
                    continue
                sock.setblocking(False)
                next_id += 1
                clients[next_id] = _Client(sock)
                conns[sock] = [next_id, bytearray()]
                sel.register(sock, selectors.EVENT_READ, "client")
            else:
                sock = key.fileobj
                try:
                    data = sock.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    drop(sock)
                    continue
                conn = conns[sock]
                conn[1] += data
                split(conn)
        now = time.monotonic()
        if terminated and closing_at is None:
            closing_at = now
        if closing_at is not None and watchdog is None:
            watchdog = _exit_watchdog(closing_at + LINGER + EXIT_TIMEOUT + 0.5, backlog, builder)
        if closing_at is not None and (not conns or now - closing_at > LINGER):
            break
    ended = host_samples.now()  # the host as the run ended, for the exporter's end sample (builder.host)
    for sock in list(conns):
        drop(sock)
    # What is held is built and exported for at most EXIT_TIMEOUT (FAILING_WAIT once the collector fails),
    # by this thread alone, at the priority the program had: the niced threads step aside (the program is
    # gone, its cores are free, and one thread does not wait on the others for the GIL).
    clock = ExitClock(EXIT_TIMEOUT, builder.pipelines)
    builder.stop_at = time.monotonic()
    builder.thread.join(min(1.0, clock.left()))
    for p in builder.pipelines:
        for sink in p.sinks or ():
            sink.closing = True  # the export threads return after their batch
    builder.drain(clock)
    left = _count_at_exit(backlog, backlog.held)
    if left and not any(p.failing() for p in builder.pipelines):  # else the failing collector was the reason, said once
        notices.warn_once("exporter-exit", f"{left:,} records could not be built and exported within the exit "
                          "time limit; they are dropped and counted")
    if backlog.dropped:
        stats.incr("dropped.spool_full", backlog.dropped)
    backlog.close()
    builder.tick(final=True)
    if builder.host is not None:  # the host's sample at the run's end (read when the program had ended)
        builder.host.send(ended)
    if pipeline.processors is not None:  # their shutdown, then the export, share what is left of the limit
        _bounded(pipeline.processors.shutdown, min(1.0, max(0.1, clock.left() / 2)), "evlog-span-processors-end")
    _finish((*builder.pipelines, *_profile_pipes), clock)  # the task profiles' own pipeline beside the others
    if _ending.acquire(blocking=False):  # else the watchdog is writing this process's last line
        stats.incr("exporter.processes")
        stats.write_process_line()
        os._exit(0)
    time.sleep(5)


_ending = threading.Lock()  # the main thread's end or the watchdog's: one writes the last line
_counting = threading.Lock()
_counted: set = set()  # ids of the backlog and pipelines whose leftovers are counted as dropped at exit


def _count_at_exit(holder, held) -> int:
    """Count what ``holder`` (the backlog, a pipeline) still holds, ``held()``, as dropped at exit, once:
    its final pass, the main thread's end and the exit watchdog may each get there first. Under one lock,
    also because stats.incr is not atomic across threads."""
    from evlog import stats

    with _counting:
        if id(holder) in _counted:
            return 0
        _counted.add(id(holder))
        try:
            left = held()
        except Exception:  # a spool file already closed: nothing more can be read of it
            left = 0
        if left:
            stats.incr("dropped.at_exit", left)
        return left


def _exit_watchdog(at: float, backlog, builder):
    """A thread that ends this process at ``at`` (monotonic) if the main thread has not: what is still
    held is counted as dropped at exit and the stats line written, half a second before the launcher's
    SIGKILL (wire.endpoint.end), so a slow end (a loaded machine, a huge backlog) loses nothing uncounted."""
    import time

    def run() -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        if not _ending.acquire(blocking=False):
            return  # the main thread is writing it
        from evlog import stats

        try:
            for p in (*builder.pipelines, *_profile_pipes):
                _count_at_exit(p, p.held)
            _count_at_exit(backlog, backlog.held)
            with _counting:  # a count under way elsewhere ends first
                stats.incr("exporter.processes")
            stats.write_process_line()
        finally:
            os._exit(0)

    t = threading.Thread(target=run, name="evlog-exit-watchdog", daemon=True)
    t.start()
    return t


def _finish(pipelines, clock: ExitClock) -> None:
    """Each pipeline exports what it holds, side by side, until ``clock``'s deadline (see Pipeline.finish)."""
    import threading

    threads = [threading.Thread(target=p.finish, args=(clock,), daemon=True) for p in pipelines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(clock.left() + 0.2)
    for p in pipelines:  # a final pass that has not counted yet (a loaded machine) is counted here, once
        _count_at_exit(p, p.held)


def _bounded(fn, timeout_s: float, name: str) -> None:
    """``fn()`` in a thread of its own, waited for ``timeout_s`` at most (os._exit ends it after)."""
    import threading

    t = threading.Thread(target=fn, name=name, daemon=True)
    t.start()
    t.join(timeout_s)


def _spool_limit() -> int:
    """EVLOG_SPOOL_LIMIT (bytes, default 1 GiB; K/M/G suffixes), read by evlog.config; the program's
    start named a bad value, with the run's other settings."""
    from evlog import config

    return config.from_variable("spool_limit", os.environ)


if __name__ == "__main__":
    main()
