"""The run's exporter process: records in, spans out through the SDK's public types and stock exporters.

evlog-instrument binds its socket and spawns it as the program starts (ending it at once if no process
connected, evlog.launcher._Exporter); a process set up without the launcher starts its own on first use
(evlog.observed.records); both through evlog.wire.endpoint. Observed processes connect to its abstract
Unix socket (EVLOG_EXPORTER) and send frames (evlog/wire/frames.py): a header (bytes, records) and
``marshal`` of ``(hello, kind, meta, records)`` (evlog.observed.records). Here:
- the reader (the main thread) only splits frames into the backlog (evlog/exporter/backlog.py: memory,
  then a spool file), so senders never wait for spans to be built or exported;
- ``hello`` (a process's first frame, and again when its resource changes): its resource attributes and
  the run's OTEL_*/EVLOG_* settings (the first one configures the exporters: the run folder, OTLP, ...);
- the ``Builder`` thread gives each source (``<kind>#<n>``, one per scheduler, ...) a builder of its kind
  that turns its records into spans (``SpanData``, evlog/builders/span_data.py; ``_builders``), while the
  exporters keep up; the console relay's reader sends the program's output (kind ``console``), whose
  builder makes SDK ``ReadableLogRecord``s and metadata gauges instead;
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

import gc
import marshal
import os
import selectors
import signal as signals
import socket
import struct
import sys
import threading
import time
from collections import deque

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.resources import Resource

from evlog import config, notices, process_count, propagation, stats
from evlog.builders import console as console_logs
from evlog.builders import dask_executions, dask_lives, dask_readings, pool_spans, profiles, sdk_rebuild
from evlog.exporter import export_failures, host_samples, select
from evlog.exporter.backlog import Backlog
from evlog.exporter.otlp_send import Sent
from evlog.sdk_logging import route_sdk_logging
from evlog.wire.endpoint import ACCEPTED, CONTROL_FD, EXIT_TIMEOUT, LINGER, LISTEN_FD, LISTENING, TOLD_ARG, TOLD_FD
from evlog.wire.frames import HEADER

NICE = 10
FAILING_WAIT = 1.0
BATCH = 512  # spans per export call (OTEL_BSP_MAX_EXPORT_BATCH_SIZE once configured)
MAX_PENDING = 1 << 21  # spans waiting for export before the oldest are dropped (and counted)
RETRY_AFTER_MAX = 60.0  # seconds: the longest pause before a failed batch is tried again, whatever was asked


# ---- in the exporter process ---------------------------------------------------------------------


def _builders(logs=None, metrics=None):
    """kind -> factory(meta, resource getter) of an object with feed(records, now, final) -> spans (the
    builders of log records and metrics hand them to ``logs`` and ``metrics``, their pipelines, and return
    no spans)."""
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

    def profile(meta, resource):  # task profiles -> evlog.profile log records, in a pipeline of their own
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
    """The task profiles' logs pipeline, made at the first profile record: bounded, so a collector that
    refuses them (too large, no logs) holds only them, never the console's log records or the spans; what
    is dropped is counted (``dropped.profiles``)."""
    if not _profile_pipes:
        p = _BoundedPipeline("logs")
        p.configure({})  # the run's settings, read from the first hello already
        _profile_pipes.append(p)
    return _profile_pipes[0]


class HashedResource(Resource):
    """An SDK Resource whose hash is computed once: the stock encoders of log records and metrics (and the
    span encoder's grouping) hash every item's resource, and Resource's own hash is a JSON dump of its
    attributes each time (about 10 µs; a Resource never changes)."""

    def __init__(self, attributes, schema_url=None):
        super().__init__(attributes, schema_url)
        self._evlog_hash = Resource.__hash__(self)

    def __hash__(self) -> int:
        return self._evlog_hash


def resource(attributes: dict) -> HashedResource:
    """The Resource of a process's hello."""
    return HashedResource(attributes)


class _Client:
    """A connected process: its resource (from its latest hello) and its builders, by source."""

    def __init__(self):
        self.resource = None
        self.builders: dict = {}

    def get_resource(self):
        return self.resource


WHAT = {"traces": "spans", "logs": "log records", "metrics": "metric points"}


def _send_spans(exporter, batch: list) -> tuple[bool, int, float | None]:
    """(sent, items exported, seconds the collector asked to wait before the next try)."""
    result = exporter.export(batch)
    if type(result) is Sent:  # evlog's own sending of spans (otlp_send): rejected spans are counted there
        return result.ok, len(batch) - result.rejected, result.retry_after
    return getattr(result, "name", None) == "SUCCESS", len(batch), None  # Span/LogRecordExportResult


def _send_metrics(exporter, batch: list) -> tuple[bool, int, None]:
    """``batch``: (MetricsData, points) pairs of distinct resources (``_Sink.take``), sent as one MetricsData
    (the stock encoder keeps one entry per resource: two collections of one process would be one lost)."""
    data = MetricsData([rm for md, _n in batch for rm in md.resource_metrics])
    ok = getattr(exporter.export(data, timeout_millis=10_000), "name", None) == "SUCCESS"
    return ok, sum(n for _md, n in batch), None


class _Sink:
    """One exporter of the run and its queue: a batch that fails is tried again (after a pause) until it
    goes through, so a collector that is down for a while loses nothing; only the memory bound and
    exit's deadline drop items (spans, log records or metric points: ``signal``), and those are counted."""

    def __init__(self, make, batch: int = BATCH, signal: str = "traces"):
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
        wait = -1 if stop_at is None else max(0.0, stop_at - time.monotonic())
        if not self.lock.acquire(timeout=wait):
            return
        try:
            self._export(stop_at)
        finally:
            self.lock.release()

    def _export(self, stop_at: float | None) -> None:
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
                ok, n, wait = self.send(self.exporter, batch)
            except Exception as exc:
                notices.warn_once(f"export-{self.signal}", f"exporting {self.what} failed: {exc}")
                ok, n, wait = False, self.inflight, None
            if ok:
                stats.incr(f"{self.signal}.exported", n)
                _note_processes(self.resources(batch))
                self.failing = False
                export_failures.answered()
            else:
                self.retry, self.failing = batch, True
                self.pause_until = time.monotonic() + min(max(1.0, wait or 0.0), RETRY_AFTER_MAX)
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
    """Count the processes of these exported resources, each once (evlog.process_count: the summary): the
    exporter process's own samples. The observed processes are counted as their frames arrive
    (Reader._count), whether their telemetry is exported or dropped later."""
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

        for sink in self.sinks:
            sink.pending.extend(items)
            over = len(sink.pending) - MAX_PENDING
            if over > 0:
                dropped = [sink.pending.popleft() for _ in range(over)]
                stats.incr("dropped.queue_full", sink.count(dropped))
        if len(self.sinks[0].pending) >= self.sinks[0].batch:
            self._wake.set()

    def failing(self) -> bool:
        return export_failures.failing() or any(s.failing for s in self.sinks or ())

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

    def finish(self, clock: ExitClock) -> None:
        """Export what is held until ``clock``'s deadline; count the rest."""
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


class _BoundedPipeline(Pipeline):
    """A pipeline whose sinks hold PROFILES_PENDING items at most: the oldest are dropped and counted."""

    def add(self, records: list) -> None:
        super().add(records)
        for sink in self.sinks or ():
            over = len(sink.pending) - PROFILES_PENDING
            if over > 0:
                for _ in range(over):
                    sink.pending.popleft()
                stats.incr("dropped.profiles", over)


class ExitClock:
    """One deadline for all the exporter process still does at its exit: EXIT_TIMEOUT, brought forward to
    FAILING_WAIT from the moment a collector is seen failing (a dead collector costs the run 1 s, once)."""

    def __init__(self, limit: float, pipelines):
        self.end = time.monotonic() + limit
        self.pipelines = pipelines
        self.cut = False

    def deadline(self) -> float:
        if not self.cut and any(p.failing() for p in self.pipelines):
            self.cut = True
            self.end = min(self.end, time.monotonic() + FAILING_WAIT)
        return self.end

    def left(self) -> float:
        return max(0.0, self.deadline() - time.monotonic())


def PipelineMetrics(pipeline):
    """A MetricExporter (for a periodic reader of the exporter process's own, e.g. the console's metadata
    gauges) whose collections go into ``pipeline``, the metrics pipeline."""

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
        os.environ.update(env)  # the program's view of the run (its owner made the run folder)
        propagation.configure(env)  # carriers in records are read with the program's OTEL_PROPAGATORS
        settings = config.load()
        config.set_current(settings)
        _current.append(settings)
    return _current[0]


def _collect_less() -> None:
    """This process holds thousands of spans (a Dask task span and its events are some 20 objects) between
    building and export, and the garbage collector walked them all again every few hundred allocations:
    with the SDK's spans, 164 us of CPU per Dask task with CPython's thresholds, 149 with these, 143 with no
    collection at all (benchmarks/dask_overhead.py, 3 pairs each). What start-up imported is never
    garbage: frozen out of every collection."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def lower_priority() -> None:
    """Nice the calling thread only (Linux schedules threads on their own): the builder and export
    threads yield a busy machine to the program, while the reader, whose work is a read and a split,
    keeps up with what observed processes send, so they never hold their records for long."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except (OSError, AttributeError):
        pass


def _same_user(sock) -> bool:
    """Is the peer a process of this user (SO_PEERCRED)? Others may not feed this run's telemetry."""
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

    # Eight export batches: the export threads never run dry, and a burst (the scheduler forgetting a whole
    # graph as the program ends) waits as frames (about 100 bytes a record) rather than as spans (about 1 KB)
    BEHIND = 4096

    def __init__(self, backlog, pipeline, clients: dict, logs=None, metrics=None):
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
        try:
            hello, kind, meta, records = marshal.loads(data)
        except Exception as exc:
            notices.warn_once("exporter-frame", f"the exporter process got a frame it cannot read: {exc!r}")
            stats.incr("dropped.bad_frames")
            return
        if hello is not None:
            client.resource = resource(hello.get("resource") or {})
            if self.pipeline.sinks is None:
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
        self.clients.pop(client_id, None)
        for b in client.builders.values():
            try:  # as in tick(): one builder's failure must not end the builder thread
                self.pipeline.add(b.feed((), time.monotonic(), True))
            except Exception as exc:
                notices.warn_once("exporter-finish", f"spans could not be built: {exc!r}")

    def tick(self, final: bool = False) -> None:
        now = time.monotonic()
        for client in list(self.clients.values()):
            for b in list(client.builders.values()):
                try:
                    self.pipeline.add(b.feed((), now, final))
                except Exception as exc:
                    notices.warn_once("exporter-tick", f"spans could not be built: {exc!r}")


def main() -> None:
    """Read what the run's processes send until its starter's control pipe closes, then export what is
    held within the exit time limit, count the rest, and end (see the module's docstring)."""
    terminated = _take_signals()
    _quiet_libraries()
    _collect_less()
    backlog = Backlog(os.environ.get("EVLOG_RUN_DIR") or None, spool=_spool_limit())
    builder = Builder(backlog, Pipeline(), {}, Pipeline("logs"), Pipeline("metrics"))
    reader = Reader(backlog, builder.clients)
    reader.run(terminated, lambda closing_at: _exit_watchdog(closing_at + LINGER + EXIT_TIMEOUT + 0.5, backlog, builder))
    ended = host_samples.now()  # the host as the run ended, for the exporter's end sample (builder.host)
    reader.close()
    _export_what_is_held(backlog, builder, ended)
    _end()


def _take_signals() -> list:
    """In the program's process group (a job control stop or a kill of the group reaches it too), but a
    Ctrl-C or a closed terminal must not cut its flush short: it ends when its control pipe closes. A
    SIGTERM (a kill of the whole group) closes it as the control pipe's end does: noted in the list returned."""
    signals.signal(signals.SIGINT, signals.SIG_IGN)
    signals.signal(signals.SIGHUP, signals.SIG_IGN)
    terminated: list = []
    signals.signal(signals.SIGTERM, lambda *_: terminated.append(1))
    return terminated


def _quiet_libraries() -> None:
    """The SDK's, the stock exporters' and gRPC's own messages -> evlog's one line per problem."""
    os.environ.setdefault("GRPC_VERBOSITY", "NONE")  # gRPC's own lines on stderr: evlog reports failures itself
    route_sdk_logging()
    export_failures.route_exporter_logging()


class Reader:
    """The main thread's work: accept the run's processes, split what they send into frames for the
    backlog, and notice the end (the control pipe closes, or SIGTERM)."""

    def __init__(self, backlog, clients: dict):
        self.backlog = backlog
        self.clients = clients  # client id -> _Client (the builder thread's too)
        self.listener = socket.socket(fileno=LISTEN_FD)
        self.listener.setblocking(False)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.listener, selectors.EVENT_READ, None)
        self.sel.register(CONTROL_FD, selectors.EVENT_READ, "control")
        self.conns: dict = {}  # socket -> [client id, unread bytes]
        self.next_id = 0
        self.closing_at = None  # monotonic time the control pipe closed
        # the launcher's pipe (evlog.launcher._Exporter), told when this process listens and when it accepts
        # its first connection: a run none of whose processes connects ends at once
        self.telling = TOLD_ARG in sys.argv[1:]
        self._tell(LISTENING)

    def _tell(self, what: bytes) -> None:
        if self.telling:
            try:
                os.write(TOLD_FD, what)
            except OSError:  # the launcher is gone: the control pipe's end says so too
                pass

    def run(self, terminated: list, on_closing) -> None:
        """Until the end is noticed and every process has gone (LINGER seconds at most after it);
        ``on_closing(time)`` once, when it is noticed."""
        noticed = False
        while True:
            for key, _mask in self.sel.select(0.25):
                if key.data == "control":
                    self._control()
                elif key.fileobj is self.listener:
                    self._accept()
                else:
                    self._read(key.fileobj)
            now = time.monotonic()
            if terminated and self.closing_at is None:
                self.closing_at = now
            if self.closing_at is not None and not noticed:
                noticed = True
                on_closing(self.closing_at)
            if self.closing_at is not None and (not self.conns or now - self.closing_at > LINGER):
                return

    def _control(self) -> None:
        try:
            data = os.read(CONTROL_FD, 4096)
        except OSError:
            data = b""
        if not data:
            self.sel.unregister(CONTROL_FD)
            self.closing_at = time.monotonic()

    def _accept(self) -> None:
        try:
            sock, _ = self.listener.accept()
        except OSError:
            return
        if not _same_user(sock):  # an abstract socket name has no file permissions to guard it
            sock.close()
            return
        sock.setblocking(False)
        if self.telling:
            self._tell(ACCEPTED)
            self.telling = False
            try:
                os.close(TOLD_FD)
            except OSError:
                pass
        self.next_id += 1
        self.clients[self.next_id] = _Client()
        self.conns[sock] = [self.next_id, bytearray(), None]  # id, unread bytes, its process's stats key
        self.sel.register(sock, selectors.EVENT_READ, "client")

    def _read(self, sock) -> None:
        try:
            data = sock.recv(1 << 20)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sock)
            return
        conn = self.conns[sock]
        conn[1] += data
        self._split(conn)

    def _split(self, conn: list) -> None:
        """Whole frames of ``conn``'s unread bytes -> the backlog."""
        buf = conn[1]
        pos = 0
        while len(buf) - pos >= HEADER.size:
            n, count = HEADER.unpack_from(buf, pos)
            if len(buf) - pos - HEADER.size < n:
                break
            frame = bytes(buf[pos + HEADER.size:pos + HEADER.size + n])
            if conn[2] is not True:
                self._count(conn, count, frame)
            self.backlog.put(conn[0], count, frame)
            pos += HEADER.size + n
        del buf[:pos]

    @staticmethod
    def _count(conn: list, records: int, frame: bytes) -> None:
        """A process is counted once it has sent records (evlog.process_count: the summary), whatever
        becomes of them later; its identity comes from its first hello (the first frame of a connection),
        decoded here once."""
        if conn[2] is None:
            try:
                hello = marshal.loads(frame)[0]
            except Exception:  # the builder reports a frame it cannot read
                hello = None
            if hello is None:
                return
            conn[2] = process_count.stats_key(hello.get("resource") or {})
        if records:
            if conn[2] not in stats.counters:
                stats.incr(conn[2])
            conn[2] = True

    def _drop(self, sock) -> None:
        conn = self.conns.pop(sock, None)
        self.sel.unregister(sock)
        sock.close()
        if conn is not None:
            self.backlog.end(conn[0])

    def close(self) -> None:
        """Every connection ends (what a process still sends is not read)."""
        for sock in list(self.conns):
            self._drop(sock)


def _export_what_is_held(backlog, builder, ended) -> None:
    """What is held is built and exported for at most EXIT_TIMEOUT (FAILING_WAIT once the collector fails),
    by this thread alone, at the priority the program had: the niced threads step aside (the program is
    gone, its cores are free, and one thread does not wait on the others for the GIL). What is left is
    counted as dropped at exit."""
    clock = ExitClock(EXIT_TIMEOUT, builder.pipelines)
    builder.stop_at = time.monotonic()
    backlog.wake()  # the builder thread, waiting for an entry, returns now rather than at its timeout
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
    processors = builder.pipeline.processors
    if processors is not None:  # their shutdown, then the export, share what is left of the limit
        _bounded(processors.shutdown, min(1.0, max(0.1, clock.left() / 2)), "evlog-span-processors-end")
    _finish((*builder.pipelines, *_profile_pipes), clock)  # the task profiles' own pipeline beside the others


def _end() -> None:
    """This process's last stats line, then its end (unless the exit watchdog is writing it)."""
    if _ending.acquire(blocking=False):
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

    def run() -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        if not _ending.acquire(blocking=False):
            return  # the main thread is writing it
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
    threads = [threading.Thread(target=p.finish, args=(clock,), daemon=True) for p in pipelines]
    for t in threads:
        t.start()
    for t in threads:
        t.join(clock.left() + 0.2)
    for p in pipelines:  # a final pass that has not counted yet (a loaded machine) is counted here, once
        _count_at_exit(p, p.held)


def _bounded(fn, timeout_s: float, name: str) -> None:
    """``fn()`` in a thread of its own, waited for ``timeout_s`` at most (os._exit ends it after)."""
    t = threading.Thread(target=fn, name=name, daemon=True)
    t.start()
    t.join(timeout_s)


def _spool_limit() -> int:
    """EVLOG_SPOOL_LIMIT (bytes, default 1 GiB; K/M/G suffixes), read by evlog.config; the program's
    start named a bad value, with the run's other settings."""
    return config.from_variable("spool_limit", os.environ)


if __name__ == "__main__":
    main()
