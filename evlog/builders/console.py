"""The ``console`` builder, in the run's exporter process: one program's output (records of kind
``console`` from its relay, evlog/relay/console_relay.py) -> log records and metadata gauges.

``ConsoleLogs`` feeds the bytes to the line parser (console_parse.py) and makes log records with the
SDK's public types (ReadableLogRecord, for the exporter process's logs pipeline) and metadata gauges
(a MeterProvider of its own, whose reader exports into the metrics pipeline). Telemetry carries the
program's resource (its process.pid and service.instance.id), so the relay is invisible in the data.
"""
from __future__ import annotations

import time

from evlog import notices, stats
from evlog.builders import console_parse as cp
from evlog.wire.console import ATTR_DROPPED, ATTR_IOSTREAM, ATTR_REPEATED, KIND, decode_logged  # noqa: F401

MAX_GAUGES = 100
IDLE_S = 1.0  # repeat notices are emitted after this long without output


class ConsoleLogs:
    """The ``console`` builder: one program's output -> log records for the exporter process's logs
    pipeline (``logs.add``), and metadata gauges. ``feed`` returns no spans."""

    def __init__(self, meta, resource, logs, metrics=None):
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        meta = meta or {}
        self.names = list(meta.get("streams") or ("stdout", "stderr"))
        mode = meta.get("mode") if meta.get("mode") in cp.MODES else "metadata"
        self.parser = cp.ConsoleParser(mode, _redactor(meta.get("redact") or ()))
        self.resource = resource  # the program's Resource, from its hello
        self.logs = logs
        self.metrics = metrics  # a MetricExporter into the metrics pipeline, for the metadata gauges
        self.scope = InstrumentationScope("evlog.console")
        self.seen: dict = {}  # stream index -> (bytes, newlines) parsed so far
        self.last = 0.0  # monotonic time of the last output
        self.idle = True  # pending repeat notices were flushed since
        self.gauges = None
        self._contexts: dict = {}
        self._attrs = [{ATTR_IOSTREAM: name} for name in self.names]

    def feed(self, records, now: float, final: bool = False) -> list:
        out: list = []
        parser = self.parser
        for r in records:
            kind = r[0]
            if kind == "d":
                _, i, ctx, t, data, offset, lines, at_start = r
                self._gap(i, offset, lines, at_start)
                self.seen[i] = (offset + len(data), lines + data.count(b"\n"))
                self._emit(parser.feed(self.names[i], data), i, ctx, t, out)
                self.last, self.idle = now, False
            elif kind == "e":
                _, i, offset, lines, at_start = r
                self._gap(i, offset, lines, at_start)
                self._emit(parser.close(self.names[i]), i, None, time.time_ns(), out)
            elif kind == "x":
                self._emit(parser.flush(partial=True), 0, None, time.time_ns(), out)
            elif kind == "l":
                parser.expect(self.names[r[1]], *decode_logged(r[2]))
        if final:
            self._emit(parser.flush(partial=True), 0, None, time.time_ns(), out)
            if self.gauges is not None:
                self.gauges.shutdown()
        elif not self.idle and now - self.last >= IDLE_S:
            self._emit(parser.flush(), 0, None, time.time_ns(), out)  # pending repeat notices
            self.idle = True
        if out:
            self.logs.add(out)
        return []

    def _gap(self, i: int, offset: int, lines: int, at_start: bool) -> None:
        """Bytes of stream ``i`` before ``offset`` that never came (dropped on the way) are reported."""
        seen_bytes, seen_lines = self.seen.get(i, (0, 0))
        if offset > seen_bytes:
            self.parser.discard(self.names[i], lines - seen_lines, not at_start)
            self.seen[i] = (offset, lines)

    def _emit(self, records: list, i: int, ctx_hex, t: int, out: list) -> None:
        if not records:
            return
        from opentelemetry._logs import LogRecord
        from opentelemetry.sdk._logs import ReadableLogRecord

        resource, scope, ctx = self.resource(), self.scope, self._context(ctx_hex)
        disabled = self.parser.mode == "disabled"  # notices are counted, but nothing of the console is exported
        observed = time.time_ns()
        for r in records:
            kind = r.kind
            if kind == cp.WARNING:
                notices.warn_once("console-command:" + r.body[:200], r.body)
                continue
            event = None
            if kind == cp.TEXT:
                attrs = self._attrs[self.names.index(r.stream)] if r.stream in self.names else {ATTR_IOSTREAM: r.stream}
            elif kind == cp.METADATA or kind == cp.COMMAND:
                attrs = {ATTR_IOSTREAM: r.stream}
                event = "evlog.metadata" if kind == cp.METADATA else "evlog.console.command"
                if kind == cp.METADATA:
                    self._gauge(r.body)
            elif kind == cp.REPEATED:
                attrs = {ATTR_IOSTREAM: r.stream, ATTR_REPEATED: r.lines}
            elif kind == cp.DROPPED:
                if disabled:
                    continue
                attrs = {ATTR_IOSTREAM: r.stream, ATTR_DROPPED: r.lines}
            else:
                continue
            out.append(ReadableLogRecord(LogRecord(timestamp=t, observed_timestamp=observed, context=ctx, body=r.body,
                                                   attributes=attrs, event_name=event),
                                         resource=resource, instrumentation_scope=scope))

    def _context(self, ctx_hex):
        if ctx_hex is None:
            return None
        ctx = self._contexts.get(ctx_hex)
        if ctx is None:
            from opentelemetry import trace

            h = ctx_hex.decode("ascii")
            sc = trace.SpanContext(int(h[:32], 16), int(h[32:48], 16), is_remote=False,
                                   trace_flags=trace.TraceFlags(int(h[48:50], 16)))
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(sc))
            if len(self._contexts) > 1000:
                self._contexts.clear()
            self._contexts[ctx_hex] = ctx
        return ctx

    def _gauge(self, body: dict) -> None:
        try:
            if self.gauges is None:
                self.gauges = Gauges(self.resource(), self.metrics)
            self.gauges.set(body)
        except Exception as exc:
            notices.warn_once("console-gauges-failed", f"console metadata gauges cannot be exported: {exc!r}")
            self.gauges = _NoGauges()


class _NoGauges:
    def set(self, body) -> None:
        pass

    def shutdown(self) -> None:
        pass


class Gauges:
    """``evlog.metadata.{key}`` gauges: the last value of each numeric metadata key, on a MeterProvider
    with the program's resource, collected at the run's metric interval into the metrics pipeline."""

    def __init__(self, resource, metrics):
        """metrics: the MetricExporter the gauges' reader exports to (the exporter process's metrics pipeline)."""
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        from evlog import config

        n = config.get().sdk_numbers
        reader = PeriodicExportingMetricReader(metrics,
                                               export_interval_millis=n["OTEL_METRIC_EXPORT_INTERVAL"],
                                               export_timeout_millis=n["OTEL_METRIC_EXPORT_TIMEOUT"])
        self.provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
        self.meter = self.provider.get_meter("evlog.console")
        self.values: dict[str, float] = {}

    def set(self, body: dict) -> None:
        for key, value in cp.numeric_items(body):
            name = metric_name(key)
            if name not in self.values:
                if len(self.values) >= MAX_GAUGES:
                    stats.incr("console.gauges_dropped")
                    notices.warn_once("console-gauges", f"console metadata has more than {MAX_GAUGES} numeric "
                                      "keys; the others are kept in the evlog.metadata events only")
                    continue
                self.values[name] = float(value)
                self.meter.create_observable_gauge(name, callbacks=[self._callback(name)],
                                                   description="console metadata (evlog.metadata)")
            self.values[name] = float(value)

    def _callback(self, name: str):
        from opentelemetry.metrics import Observation

        def observe(_options):
            return [Observation(self.values[name])]

        return observe

    def shutdown(self) -> None:
        """The last values go out (bounded: the exporter process's exit time is limited)."""
        _bounded(self.provider.shutdown, 1.0)


def _redactor(patterns):
    from evlog.builders.redact import Redactor

    return Redactor(patterns)


def metric_name(key: str) -> str:
    """``evlog.metadata.{key}``, with characters OTel does not allow in names replaced by '_'."""
    safe = "".join(c if (c.isascii() and (c.isalnum() or c in "._-/")) else "_" for c in key)
    return ("evlog.metadata." + safe)[:255]


def _bounded(fn, timeout_s: float) -> None:
    import threading

    t = threading.Thread(target=fn, name="evlog-console-flush", daemon=True)
    t.start()
    t.join(timeout_s)
