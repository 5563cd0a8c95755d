"""The console relay: a reader passing the program's output through, and the ``console`` builder
making it telemetry in the run's exporter process.

console.install() points the program's stdout and stderr at pipes (or pseudo-terminals) and starts
this file with ``python -S`` (no evlog set-up of its own) as the reader. It holds the read ends and
does nothing but read, pass every byte on unchanged to the original descriptors, and forward the
bytes to the run's exporter process (evlog/exporter/process.py) as ``console`` frames: the
length-prefixed ``marshal`` frames every observed process sends (evlog.observed.records), the first with a
hello carrying the program's resource and settings. It is single-threaded and light, and its socket
never blocks it: while the exporter process is slow to read, frames wait in the reader's memory
(MAX_UNSENT; past that they are dropped and counted, ``console.dropped``), never in the program's
pipe. The exporter process reads at once into its backlog (memory, then a spool file), so a burst
waits there until the builder and the exporters catch up, and nothing is dropped short of the spool
limit. The reader connects with the first output: a program that prints nothing starts nothing.

In the exporter process, ``ConsoleLogs`` (the builder of kind ``console``) feeds the bytes to the
line parser and makes log records with the SDK's public types (ReadableLogRecord, for the exporter
process's logs pipeline) and metadata gauges (a MeterProvider of its own). Telemetry carries the
program's resource (its process.pid and service.instance.id), so the relay is invisible in the data.
Nothing per line runs in the program's own process, and lines written just before os._exit or
SIGKILL still arrive (the reader reads until end of file).

The program marks its span changes and its exit in the byte streams themselves (APC escape
sequences carrying a per-run token, see ``encode_marker``), so each line gets the trace context
that was current when it was written, and "everything up to my exit" is exact: the reader hands it
all to the exporter process before it acknowledges the exit. The relay strips the markers before
passing the bytes on.

Records of kind ``console`` (tuples of atoms; ``stream`` indexes ``meta["streams"]``; ``offset`` and
``lines`` are the stream's bytes and newlines before, dropped ones included, so the builder sees gaps):
    ("d", stream, context, time_ns, data, offset, lines, at_line_start)   output (context: 50 hex or None)
    ("e", stream, offset, lines, at_line_start)                          the stream's end
    ("x",)                                                               the program's exit
    ("l", stream, payload)                       the lines that follow were logged (console.logged)
"""
from __future__ import annotations

import marshal
import os
import select
import time

import _struct  # not struct, collections or socket: the reader starts fast under python -S

# The reader runs this file with ``python -S`` and starts reading at once; the builder (in the
# exporter process) imports the parser, the redactor and evlog's helpers (``_load``).
cp = _report = stats = None

READ_SIZE = 1 << 18
COALESCE_S = 0.001  # output streaming in: wait this long before each read, to take more at once
FRAME = 1 << 16  # bytes of output per frame to the exporter process (the builder's unit of work)
MAX_UNSENT = 256 << 20  # bytes of frames the reader holds for a slow exporter process before it drops
CONTROL_S = 5.0  # how long the reader waits to hand over the output at the program's exit, and at the end
IDLE_S = 1.0  # repeat notices are emitted after this long without output
KIND = "console"
MAX_GAUGES = 100
KIND_CONTEXT, KIND_NONE, KIND_EXIT, KIND_LOGGED = b"c", b"n", b"x", b"l"
_KINDS = (KIND_CONTEXT, KIND_NONE, KIND_EXIT, KIND_LOGGED)
_HEADER = _struct.Struct("<II")  # evlog.observed.records' frame header: frame bytes, records (here: lines) in it
# Attribute names of console records (docs/conventions.md); tests, benchmarks and readers import them.
ATTR_IOSTREAM = "log.iostream"  # "stdout" or "stderr": OpenTelemetry's semantic convention
ATTR_REPEATED = "evlog.console.repeated"
ATTR_DROPPED = "evlog.console.dropped"
_PAYLOAD = 50
_END = b"\x1b\\"


# -- markers: the program -> relay protocol inside the byte streams --------------------------------

def marker_prefix(token: str) -> bytes:
    return b"\x1b_evlog:" + token.encode("ascii") + b":"


def encode_marker(prefix: bytes, kind: bytes, trace_id: int = 0, span_id: int = 0, flags: int = 0) -> bytes:
    """One marker: a fixed-length APC sequence (terminals ignore APC, and the relay removes it)."""
    payload = f"{trace_id:032x}{span_id:016x}{flags:02x}" if kind == KIND_CONTEXT else "0" * _PAYLOAD
    return prefix + kind + payload.encode("ascii") + _END


def encode_logged(prefix: bytes, first_crc: int, lines: int) -> bytes:
    """The marker before a logging record's text: the CRC-32 of its first line (as the parser renders
    it) and its number of lines; the console's builder drops those lines (the record is exported)."""
    return prefix + KIND_LOGGED + f"{first_crc & 0xFFFFFFFF:08x}{min(lines, 0xFFFF):04x}".ljust(_PAYLOAD, "0").encode() + _END


def decode_logged(payload: bytes) -> tuple[int, int]:
    return int(payload[:8], 16), int(payload[8:12], 16)


class MarkerSplitter:
    """Bytes in; data pieces (bytes) and markers ((kind, payload)) out, in order.

    A marker is written in one write(), so a read can end inside one only if more is already
    readable; a tail that could begin a marker is held back (``held``) until the caller has
    checked that, then either completed by the next read or given back by ``release()``.
    """

    def __init__(self, prefix: bytes):
        self.prefix = prefix
        self.size = len(prefix) + 1 + _PAYLOAD + len(_END)
        self.held = b""

    def feed(self, data: bytes) -> list:
        buf = self.held + data if self.held else data
        self.held = b""
        out: list = []
        pos = 0
        prefix, size = self.prefix, self.size
        while True:
            i = buf.find(prefix, pos)
            if i < 0:
                break
            if i + size > len(buf):
                if i > pos:
                    out.append(buf[pos:i])
                self.held = buf[i:]
                return out
            kind = buf[i + len(prefix): i + len(prefix) + 1]
            if buf[i + size - len(_END): i + size] != _END or kind not in _KINDS:
                if i + 1 > pos:
                    out.append(buf[pos:i + 1])
                pos = i + 1
                continue
            if i > pos:
                out.append(buf[pos:i])
            out.append((kind, buf[i + len(prefix) + 1: i + size - len(_END)]))
            pos = i + size
        tail = len(buf) - pos
        j = buf.rfind(b"\x1b", max(pos, len(buf) - len(prefix) + 1))
        if j >= 0 and prefix.startswith(buf[j:]):
            if j > pos:
                out.append(buf[pos:j])
            self.held = buf[j:]
        elif tail:
            out.append(buf[pos:] if pos else buf)
        return out

    def release(self) -> bytes:
        held, self.held = self.held, b""
        return held


# -- the reader process -------------------------------------------------------------------------

class _Stream:
    def __init__(self, index: int, spec: dict, prefix: bytes):
        self.index = index
        self.fd = spec["fd"]  # read end of the pipe, or the pty master
        self.out = spec["out"]  # where the program's bytes go on to (the original descriptor)
        self.splitter = MarkerSplitter(prefix)
        self.ctx = None  # the program's current span (marker payload), or none
        self.open = True
        self.exited = False  # the program's exit marker came through
        self.offset = 0  # bytes of this stream so far (forwarded or dropped)
        self.lines = 0  # ... and newlines in them
        self.at_start = True  # ... and they end at a line's end
        self.tail = b""  # while the reader is quiet: the unfinished line, not forwarded yet


class Reader:
    """Read, pass through, forward to the exporter process; never wait for it while the program writes."""

    def __init__(self, cfg: dict):
        prefix = marker_prefix(cfg["token"])
        self.cfg = cfg
        self.streams = [_Stream(i, spec, prefix) for i, spec in enumerate(cfg["streams"])]
        self.addr = cfg.get("exporter")
        self.sock = None  # to the exporter process, connected with the first output
        self.dead = not self.addr  # no exporter process to be had: pass through only (counted)
        # Quiet: in modes metadata and disabled, output only becomes telemetry in lines with a "{" (metadata,
        # commands): until one comes, lines are not forwarded, so a program printing plain text starts no
        # exporter process. Its last unfinished line is kept, and goes first once one comes.
        self.quiet = cfg.get("mode") in ("metadata", "disabled")
        self.first = (cfg.get("hello"), {"streams": [s["name"] for s in cfg["streams"]], "mode": cfg.get("mode"),
                                         "redact": list(cfg.get("redact") or ())})  # hello and meta, with the first frame
        self.records: list = []  # made since the last frame
        self.size = 0  # ... their bytes of output
        self.lines = 0  # ... their newlines
        self.unsent: list = []  # [frame, lines in it], oldest first; ``sent`` bytes of the first are gone
        self.head = 0  # index of the oldest in ``unsent``
        self.sent = 0
        self.unsent_bytes = 0
        self.counters: dict = {}  # for the program's summary (lines dropped here)
        self.ack_fd = cfg.get("ack_fd")
        self.exit_sent = False
        self.ready_fd = cfg.get("ready_fd")

    def run(self) -> None:
        by_fd = {s.fd: s for s in self.streams}
        poller = select.poll()
        for s in self.streams:
            poller.register(s.fd, select.POLLIN)
        if self.ready_fd is not None:  # the program waits for this before it writes to us
            try:
                os.write(self.ready_fd, b"r")
                os.close(self.ready_fd)
            except OSError:
                pass
        done = 0.0
        waiting = None  # the socket's descriptor while registered for POLLOUT
        while any(s.open for s in self.streams):
            want = self.sock.fileno() if self.sock is not None and self.head < len(self.unsent) else None
            if want != waiting:
                if waiting is not None:
                    poller.unregister(waiting)
                if want is not None:
                    poller.register(want, select.POLLOUT)
                waiting = want
            events = poller.poll()
            # While output streams in, reading each write as it comes would cost the program a
            # wake-up per write (Linux wakes a pipe's reader only when the pipe was empty): let a
            # millisecond's worth gather instead. Output after a pause (a prompt) passes at once.
            if time.monotonic() - done < COALESCE_S:
                time.sleep(COALESCE_S)
            for fd, _ev in events:
                s = by_fd.get(fd)
                if s is None:  # the socket has room again
                    continue
                try:
                    data = os.read(fd, READ_SIZE)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:  # EIO: the last writer of a pseudo-terminal is gone
                    data = b""
                if data:
                    try:
                        self._chunk(s, data)
                    except Exception as exc:  # never let the program's output stop here
                        _warn("console-reader", f"console capture stopped parsing its output: {exc!r}")
                        self._gone(None)
                        self._chunk = self._write
                        self._write(s, data)
                if not data or not s.open:
                    self._close(s, poller)
            self._frame()
            self._send(0.0)
            done = time.monotonic()
        self._frame()
        self._send(CONTROL_S)
        self._ack()  # if the program did not wait for it (os._exit, SIGKILL): a stats line in its name
        if self.sock is not None:
            self.sock.close()

    def _chunk(self, s: _Stream, data: bytes) -> None:
        items = s.splitter.feed(data)
        if s.splitter.held and not select.select([s.fd], [], [], 0)[0]:
            items.append(s.splitter.release())  # not a marker after all
        if len(items) == 1 and type(items[0]) is bytes:  # the common case: no markers
            self._write(s, items[0])
            self._forward(s, items[0])
            return
        out = b"".join(x for x in items if type(x) is bytes)
        if out:
            self._write(s, out)
        for x in items:
            if type(x) is bytes:
                if x:
                    self._forward(s, x)
            elif x[0] == KIND_EXIT:
                s.exited = True
                self._maybe_exit()
            elif x[0] == KIND_LOGGED:
                if not self.quiet:  # in the quiet modes no text line becomes telemetry
                    self.records.append(("l", s.index, x[1]))
            else:
                s.ctx = x[1] if x[0] == KIND_CONTEXT else None

    def _write(self, s: _Stream, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(s.out, view)
            except BlockingIOError:
                select.select([], [s.out], [], 1.0)
                continue
            except InterruptedError:
                continue
            except OSError:
                # The reader of the original stream is gone (EPIPE) or the terminal hung up: the
                # program must see that too, as it would have without evlog.
                s.open = False
                return
            if n == len(view):
                return
            view = view[n:]

    def _forward(self, s: _Stream, data: bytes) -> None:
        """Output of ``s`` becomes records; dropped (counted) only if the exporter process is gone or
        more than MAX_UNSENT waits for it (the builder sees the gap in ``offset`` and ``lines``)."""
        if self.quiet or s.tail:
            data = s.tail + data
            s.tail = b""
            if self.quiet:
                if b"{" not in data and b"/LOGCOMMAND" not in data:
                    s.tail = data[data.rfind(b"\n") + 1:]  # whole lines without either make nothing
                    if len(s.tail) <= FRAME:
                        return
                self.quiet = False
        n = data.count(b"\n")
        if self.dead or self.unsent_bytes > MAX_UNSENT:
            self._count("console.dropped", n)
        else:
            t = time.time_ns()
            if len(data) <= FRAME:
                self.records.append(("d", s.index, s.ctx, t, data, s.offset, s.lines, s.at_start))
                self.size += len(data)
                self.lines += n
            else:
                off, lines, start = s.offset, s.lines, s.at_start
                for i in range(0, len(data), FRAME):
                    part = data[i:i + FRAME]
                    self.records.append(("d", s.index, s.ctx, t, part, off, lines, start))
                    k = part.count(b"\n")
                    off, lines, start = off + len(part), lines + k, part.endswith(b"\n")
                    self.size += len(part)
                    self.lines += k
                    if self.size >= FRAME:
                        self._frame()
            if self.size >= FRAME:
                self._frame()
        s.offset += len(data)
        s.lines += n
        s.at_start = data.endswith(b"\n")

    def _frame(self) -> None:
        """What was recorded since the last frame becomes one frame, queued to go."""
        if not self.records or self.dead:
            self.records, self.size, self.lines = [], 0, 0
            return
        hello, meta = self.first
        self.first = (None, None)
        data = marshal.dumps((hello, KIND, meta, self.records))
        self.unsent.append([_HEADER.pack(len(data), self.lines) + data, self.lines])
        self.unsent_bytes += len(data) + _HEADER.size
        self.records, self.size, self.lines = [], 0, 0

    def _send(self, wait_s: float) -> bool:
        """Write queued frames, waiting at most ``wait_s`` for room; True once none is left."""
        unsent = self.unsent
        if self.head >= len(unsent):
            return True
        sock = self.sock or self._connect()
        if sock is None:
            return False
        deadline = time.monotonic() + wait_s
        while self.head < len(unsent):
            frame = unsent[self.head][0]
            try:
                n = sock.send(memoryview(frame)[self.sent:])
            except (BlockingIOError, InterruptedError):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                select.select([], [sock], [], left)
                continue
            except OSError as exc:
                self._gone(exc)
                return False
            self.sent += n
            if self.sent == len(frame):
                self.unsent_bytes -= len(frame)
                unsent[self.head] = None
                self.head += 1
                self.sent = 0
        if self.head > 64 and self.head * 2 > len(unsent):
            del unsent[:self.head]
            self.head = 0
        return self.head >= len(unsent)

    def _connect(self):
        import _socket

        try:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            try:
                sock.connect("\0" + self.addr)
            except OSError:
                sock.close()
                raise
            sock.setblocking(False)
        except OSError as exc:
            self._gone(exc)
            return None
        self.sock = sock
        return sock

    def _gone(self, exc) -> None:
        """The exporter process cannot be reached: pass through only, and count the lines not exported."""
        if self.dead:
            return
        self.dead = True
        lost = sum(e[1] for e in self.unsent[self.head:] if e) + self.lines
        self.unsent, self.head, self.sent, self.unsent_bytes = [], 0, 0, 0
        self.records, self.size, self.lines = [], 0, 0
        self._count("console.dropped", lost)
        if exc is not None and not self.exit_sent:  # after the program's exit: its summary is written already
            _warn("console-exporter", f"console capture cannot reach the run's exporter process ({exc}); "
                  "the output still passes through, its lines are dropped and counted")
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass

    def _count(self, name: str, n: int) -> None:
        if n:
            self.counters[name] = self.counters.get(name, 0) + n

    def _control(self, record: tuple) -> None:
        """An end or exit record, if anything was forwarded (else the exporter process has nothing to end)."""
        if self.sock is not None or self.head < len(self.unsent) or self.records:
            self.records.append(record)

    def _close(self, s: _Stream, poller) -> None:
        s.open = False
        try:
            poller.unregister(s.fd)
        except (KeyError, ValueError):
            pass
        held = s.splitter.release()
        if held:
            self._write(s, held)
        if held or (s.tail and not self.quiet):
            self._forward(s, held)
        try:
            os.close(s.fd)  # a program still writing now gets EPIPE, as without evlog
        except OSError:
            pass
        self._control(("e", s.index, s.offset, s.lines, s.at_start))
        self._maybe_exit()

    def _maybe_exit(self) -> None:
        """The program exits: hand over everything it wrote before (bounded), then tell it so."""
        if not self.exit_sent and all(x.exited or not x.open for x in self.streams):
            self.exit_sent = True
            self._control(("x",))
            self._frame()
            self._send(CONTROL_S)
            self._ack()

    def _ack(self) -> None:
        """Tell the program its output is handed over (with this reader's counters for its summary)."""
        counters, self.counters = self.counters, {}
        if self.ack_fd is None:
            if counters:
                _write_stats_line(self.cfg, counters)  # the program is gone: speak for it
            return
        fd, self.ack_fd = self.ack_fd, None
        line = b"{}\n"
        if counters:
            import json

            line = (json.dumps(counters) + "\n").encode()
        try:
            os.write(fd, line)
        except OSError:
            _write_stats_line(self.cfg, counters)
        try:
            os.close(fd)
        except OSError:
            pass


# -- the builder, in the exporter process ---------------------------------------------------------

class ConsoleLogs:
    """The ``console`` builder: one program's output -> log records for the exporter process's logs
    pipeline (``logs.add``), and metadata gauges. ``feed`` returns no spans."""

    def __init__(self, meta, resource, logs, metrics=None):
        _load()
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        meta = meta or {}
        self.names = list(meta.get("streams") or ("stdout", "stderr"))
        mode = meta.get("mode") if meta.get("mode") in cp.MODES else "metadata"
        self.parser = cp.ConsoleParser(mode, _redactor(meta.get("redact") or ()))
        self.resource = resource  # the program's Resource, from its hello
        self.logs = logs
        self.metrics = metrics  # the metrics pipeline, for the metadata gauges
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
                _report.warn_once("console-command:" + r.body[:200], r.body)
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
                attrs = {ATTR_IOSTREAM: r.stream, ATTR_REPEATED: r.count}
            elif kind == cp.DROPPED:
                if disabled:
                    continue
                attrs = {ATTR_IOSTREAM: r.stream, ATTR_DROPPED: r.count}
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
            _report.warn_once("console-gauges-failed", f"console metadata gauges cannot be exported: {exc!r}")
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
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        from evlog import config
        from evlog.exporter.process import PipelineMetrics

        n = config.get().sdk_numbers
        reader = PeriodicExportingMetricReader(PipelineMetrics(metrics),
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
                    _report.warn_once("console-gauges", f"console metadata has more than {MAX_GAUGES} numeric "
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


def _load() -> None:
    global cp, _report, stats
    if cp is None:
        from evlog import stats as stats_module
        from evlog import notices as report_module
        from evlog.builders import console_parse

        _report, stats, cp = report_module, stats_module, console_parse


def _redactor(patterns):
    from evlog.builders.redact import Redactor

    return Redactor(patterns)


def _warn(key: str, message: str) -> None:
    try:
        _load()
        _report.warn_once(key, message)
    except BaseException:
        os.write(2, f"evlog: {message}\n".encode("utf-8", "replace"))


def _write_stats_line(cfg: dict, counters: dict) -> None:
    """The program did not wait for us (os._exit, SIGKILL): its stats line, in its name."""
    import json

    path = cfg.get("stats_file")
    if not path:
        return
    line = json.dumps({"pid": cfg.get("program_pid"), "time": time.time(), **counters}) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def metric_name(key: str) -> str:
    """``evlog.metadata.{key}``, with characters OTel does not allow in names replaced by '_'."""
    safe = "".join(c if (c.isascii() and (c.isalnum() or c in "._-/")) else "_" for c in key)
    return ("evlog.metadata." + safe)[:255]


def _bounded(fn, timeout_s: float) -> None:
    import threading

    t = threading.Thread(target=fn, name="evlog-console-flush", daemon=True)
    t.start()
    t.join(timeout_s)


# -- entry point --------------------------------------------------------------------------------

def main(cfg: dict) -> None:
    """Run as the reader; never returns (os._exit once the program's output has ended)."""
    import _signal as signal  # the C module: "signal" would import enum, slower to start

    code = 0
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)  # the relay ends when the program's output does
        _follow_window_size(cfg)
        Reader(cfg).run()
    except BaseException as exc:
        _warn("console-relay", f"console capture failed: {exc!r}")
        code = 1
    os._exit(code)


def _follow_window_size(cfg: dict) -> None:
    """Keep each pseudo-terminal's size equal to the real terminal's (SIGWINCH)."""
    ptys = [(s["fd"], s["out"]) for s in cfg["streams"] if s.get("pty")]
    if not ptys:
        return
    import _signal as signal
    import fcntl
    import termios

    def copy(*_args):
        for master, real in ptys:
            try:
                fcntl.ioctl(master, termios.TIOCSWINSZ, fcntl.ioctl(real, termios.TIOCGWINSZ, b"\0" * 8))
            except OSError:
                pass

    signal.signal(signal.SIGWINCH, copy)
