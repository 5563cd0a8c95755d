"""The console relay: two helper processes that pass the program's output through and export it.

console.install() points the program's stdout and stderr at pipes (or pseudo-terminals) and starts
this file with ``python -S`` (no evlog set-up of its own) as the reader, which forks the processor when
there is first something to export (a program that writes nothing pays for one small process only):
- the reader holds the read ends. It does nothing but read, pass every byte on unchanged to the
  original descriptors, and forward the bytes to the processor over a non-blocking SOCK_SEQPACKET
  socket. It is single-threaded and light, so it is never waiting for a lock or a GIL while the
  program's pipe fills: when the processor falls behind, the socket is full and the reader drops
  the bytes and counts them (``console.dropped``), never holding the program.
- the processor feeds the bytes to the line parser and emits OTel records, at a lower priority
  (its own session and scheduling group, niced): it uses an idle core fully and yields a busy one
  to the program. Telemetry carries the
  program's resource (its process.pid and service.instance.id), so the relay is invisible in the
  data.
Nothing per line runs in the program's own process, and lines written just before os._exit or
SIGKILL still arrive (the reader reads until end of file).

The program marks its span changes and its exit in the byte streams themselves (APC escape
sequences carrying a per-run token, see ``encode_marker``), so each line gets the trace context
that was current when it was written, and "everything up to my exit" is exact. The relay strips
the markers before passing the bytes on.
"""
from __future__ import annotations

import os
import select
import time

# The relay runs this file with ``python -S``: the reader starts reading at once; only the
# processor imports the parser, the redactor and evlog's helpers (``_load``).
cp = _report = stats = None

READ_SIZE = 1 << 18
COALESCE_S = 0.001  # output streaming in: wait this long before each read, to take more at once
MESSAGE = 1 << 15  # bytes of output per message to the processor
LINE_CAP = 1 << 16  # bytes of one line (since its last \n or \r) forwarded; the parser keeps 8,192 characters
_WINDOW = LINE_CAP // 2  # every window this long holds a line end: no line in the chunk passes LINE_CAP
SOCKET_BUFFER = 1 << 18  # the queue between reader and processor (the kernel may allow less)
BACKLOG_S = 1.5  # at the program's exit, time allowed for the (bounded) backlog, ...
SETUP_S = 5.0  # ... and for the processor's one-time OTel set-up (imports), on a busy machine
CONTROL_S = 5.0  # how long the reader waits to hand over an end-of-stream or exit message
NICE = 10  # the processor's priority: an idle core it uses fully, a busy one it leaves to the program
IDLE_S = 1.0  # repeat notices are emitted after this long without output
_NO_CTX = b"-" * 50
MAX_GAUGES = 100
KIND_CONTEXT, KIND_NONE, KIND_EXIT = b"c", b"n", b"x"
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
            if buf[i + size - len(_END): i + size] != _END or kind not in (KIND_CONTEXT, KIND_NONE, KIND_EXIT):
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
        self.index = b"%d" % index
        self.fd = spec["fd"]  # read end of the pipe, or the pty master
        self.out = spec["out"]  # where the program's bytes go on to (the original descriptor)
        self.splitter = MarkerSplitter(prefix)
        self.ctx = _NO_CTX  # the program's current span (marker payload), or none
        self.open = True
        self.exited = False  # the program's exit marker came through
        self.lost = 0  # newlines in bytes dropped and not yet reported to the processor
        self.gap = False  # bytes were dropped since the last report
        self.partial = False  # ... and the last of them ended inside a line
        self.seg = 0  # bytes of the current line (since its last \n or \r) forwarded
        self.cut = 0  # bytes of the current line past LINE_CAP, not forwarded (told when the line ends)


class Reader:
    """Read, pass through, forward; drop (counted) what the processor has no room for."""

    def __init__(self, cfg: dict):
        prefix = marker_prefix(cfg["token"])
        self.cfg = cfg
        self.streams = [_Stream(i, spec, prefix) for i, spec in enumerate(cfg["streams"])]
        self.sock = None  # to the processor, started with the first bytes for it
        self.ack_fd = cfg.get("ack_fd")  # the program's exit acknowledgement: the processor's once started
        self.exit_sent = False
        self.ready_fd = cfg.get("ready_fd")

    def _processor(self):
        """The socket to the processor, which is forked now if it is not running yet (None if it cannot be)."""
        if self.sock is None and self.cfg is not None:
            cfg, self.cfg = self.cfg, None
            try:
                self.sock = _fork_processor(cfg, self.streams, self.ack_fd)
                self.ack_fd = None  # the processor acknowledges from now on
            except OSError as exc:
                _warn("console-processor", f"console capture cannot export: {exc!r}")
        return self.sock

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
        while any(s.open for s in self.streams):
            events = poller.poll()
            # While output streams in, reading each write as it comes would cost the program a
            # wake-up per write (Linux wakes a pipe's reader only when the pipe was empty): let a
            # millisecond's worth gather instead. Output after a pause (a prompt) passes at once.
            if time.monotonic() - done < COALESCE_S:
                time.sleep(COALESCE_S)
            for fd, _ev in events:
                s = by_fd[fd]
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
                        if self.sock is not None:
                            self.sock.close()
                        self._chunk = self._write
                        self._write(s, data)
                if not data or not s.open:
                    self._close(s, poller)
            done = time.monotonic()
        self._control(b"z")

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
            else:
                s.ctx = x[1] if x[0] == KIND_CONTEXT else _NO_CTX

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
        """Forward ``data``, each line cut at LINE_CAP bytes: a huge line would fill the socket and
        make the reader drop the lines after it. The terminal still gets every byte (``_write``)."""
        if s.cut or _long_line(s.seg, data):
            self._forward_cut(s, data)
            return
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        s.seg = s.seg + len(data) if end < 0 else len(data) - end - 1
        self._send(s, data)

    def _forward_cut(self, s: _Stream, data: bytes) -> None:
        pos, n = 0, len(data)
        keep = []
        while pos < n:
            j = _line_end(data, pos)
            end = n if j < 0 else j
            room = max(0, LINE_CAP - s.seg)
            if end - pos <= room:
                keep.append(data[pos:end])
                s.seg += end - pos
            else:
                keep.append(data[pos:pos + room])
                s.seg = LINE_CAP
                s.cut += end - pos - room
            if j < 0:
                break
            if s.cut:  # the line ends: tell the processor how much of it was not forwarded
                self._send(s, b"".join(keep))
                keep = []
                self._send_control(b"t" + s.index + b"%d" % s.cut)
            keep.append(data[j:j + 1])
            s.seg = s.cut = 0
            pos = j + 1
        if keep:
            self._send(s, b"".join(keep))

    def _send_control(self, message: bytes) -> None:
        sock = self.sock or self._processor()
        if sock is not None:
            try:
                sock.send(message)
            except OSError:  # no room (the count of cut bytes is then short) or no processor
                pass

    def _send(self, s: _Stream, data: bytes) -> None:
        if not data:
            return
        sock = self.sock or self._processor()
        if sock is None:
            return
        head = b"d" + s.index + s.ctx + b"%020d" % time.time_ns()
        for i in range(0, len(data), MESSAGE):
            part = data[i:i + MESSAGE] if len(data) > MESSAGE else data
            try:
                if s.gap:
                    sock.send(self._gap_message(s))
                    s.lost, s.gap = 0, False
                sock.send(head + part)
            except (BlockingIOError, InterruptedError):
                n = part.count(b"\n")  # no room: drop it; the processor counts the lines lost
                s.lost += n
                s.partial = not part.endswith(b"\n") if n else (s.partial or s.gap or bool(part))
                s.gap = True
            except OSError:
                return  # the processor is gone: passing through is all that is left to do

    @staticmethod
    def _gap_message(s: _Stream) -> bytes:
        return b"g" + s.index + b"%d,%d" % (s.lost, 1 if s.partial else 0)

    def _control(self, message: bytes) -> None:
        """Hand over an end or exit message (after any pending gap reports), waiting if need be."""
        if self.sock is None:  # no processor: nothing was exported, so the program's exit is acknowledged here
            if message == b"x" and self.ack_fd is not None:
                try:
                    os.write(self.ack_fd, b"{}\n")
                    os.close(self.ack_fd)
                except OSError:
                    pass
                self.ack_fd = None
            return
        for s in self.streams:
            if s.gap and self._send_waiting(self._gap_message(s)):
                s.lost, s.gap = 0, False
        self._send_waiting(message)

    def _send_waiting(self, message: bytes) -> bool:
        deadline = time.monotonic() + CONTROL_S
        while True:
            try:
                self.sock.send(message)
                return True
            except (BlockingIOError, InterruptedError):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                select.select([], [self.sock], [], left)
            except OSError:
                return False

    def _close(self, s: _Stream, poller) -> None:
        s.open = False
        try:
            poller.unregister(s.fd)
        except (KeyError, ValueError):
            pass
        held = s.splitter.release()
        if held:
            self._write(s, held)
            self._forward(s, held)
        try:
            os.close(s.fd)  # a program still writing now gets EPIPE, as without evlog
        except OSError:
            pass
        self._control(b"e" + s.index)
        self._maybe_exit()

    def _maybe_exit(self) -> None:
        if not self.exit_sent and all(x.exited or not x.open for x in self.streams):
            self.exit_sent = True
            self._control(b"x")


def _line_end(data: bytes, pos: int) -> int:
    """Index of the first \n or \r at or after ``pos``, or -1."""
    nl, cr = data.find(b"\n", pos), data.find(b"\r", pos)
    return nl if cr < 0 else cr if nl < 0 else min(nl, cr)


def _long_line(seg: int, data: bytes) -> bool:
    """Could a line run past LINE_CAP in ``data`` (``seg`` bytes of it already forwarded)? A few
    finds per chunk, never a loop per line."""
    first = _line_end(data, 0)
    if seg + (len(data) if first < 0 else first) > LINE_CAP:
        return True
    for k in range(0, len(data) - _WINDOW + 1, _WINDOW):
        if data.find(b"\n", k, k + _WINDOW) < 0 and data.find(b"\r", k, k + _WINDOW) < 0:
            return True
    return False


# -- the processor process ----------------------------------------------------------------------

class Processor:
    """Messages from the reader -> the line parser -> OTel records; acknowledges the program's exit."""

    def __init__(self, cfg: dict):
        import _socket

        self.cfg = cfg
        self.names = [spec["name"] for spec in cfg["streams"]]
        self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, cfg["sock_fd"])
        self._parser = None  # made with the first message to parse: a quiet program's exit is quick
        self.ack_fd = cfg.get("ack_fd")
        self.acked = False
        self.exit_timeout = float(cfg.get("exit_timeout", 5))
        self.emitter = None  # built on the first record to export: a quiet program pays nothing
        self._emitter_failed = False
        self._contexts: dict = {}

    @property
    def parser(self):
        if self._parser is None:
            _load()
            self._parser = cp.ConsoleParser(self.cfg.get("mode", "metadata"), _redactor(self.cfg.get("redact", ())))
        return self._parser

    def run(self) -> None:
        idle_flushed = True
        while True:
            if not select.select([self.sock], [], [], IDLE_S)[0]:
                if not idle_flushed and self._parser is not None:
                    self._emit(self.parser.flush(), None, time.time_ns())  # pending repeat notices
                    idle_flushed = True
                continue
            try:
                msg = self.sock.recv(MESSAGE + 256)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                msg = b""
            kind = msg[:1]
            if kind == b"d":
                self._wait_for_room()
                name, ctx, t = self.names[int(msg[1:2])], msg[2:52], int(msg[52:72])
                self._emit(self.parser.feed(name, msg[72:]), ctx, t)
                idle_flushed = False
            elif kind == b"t":  # bytes the reader cut off the end of the current line
                # the parser's own overflow count of that line (it reports "N more bytes")
                self.parser._stream(self.names[int(msg[1:2])]).overflow += int(msg[2:])
            elif kind == b"g":
                lost, partial = msg[2:].split(b",")
                self.parser.discard(self.names[int(msg[1:2])], int(lost), partial == b"1")
                idle_flushed = False
            elif kind == b"e":
                if self._parser is not None:
                    self._emit(self.parser.close(self.names[int(msg[1:2])]), None, time.time_ns())
            elif kind == b"x":
                if self._parser is not None:
                    self._emit(self.parser.flush(partial=True), None, time.time_ns())
                if self.emitter:
                    self.emitter.flush(self.exit_timeout)
                self._ack()
            else:  # b"z" or end of file: every stream is closed
                if self._parser is not None:
                    self._emit(self.parser.flush(partial=True), None, time.time_ns())
                if self.emitter:
                    self.emitter.shutdown(self.exit_timeout)
                self._ack()  # or, if the program already had it, a stats line for the rest
                return

    def _wait_for_room(self) -> None:
        """Never emit more than the SDK's queue holds (it would drop records uncounted): wait for
        the exporter instead; meanwhile the socket fills and the reader drops, counted."""
        e = self.emitter
        while e is not None and e.backlog() > e.room:
            time.sleep(0.01)

    def _emit(self, records: list, ctx_hex, t: int) -> None:
        if not records:
            return
        for r in records:
            if r.kind == cp.WARNING:
                _report.warn_once("console-command:" + r.body[:200], r.body)
            elif r.kind == cp.DROPPED:
                stats.incr("console.dropped", r.count)
        if self.parser.mode == "disabled":  # counted, but nothing of the console is exported
            records = [r for r in records if r.kind != cp.DROPPED]
        if self.emitter is None and not self._emitter_failed:
            if all(r.kind == cp.WARNING for r in records):
                return
            try:
                self.emitter = Emitter(self.cfg)
            except Exception as exc:
                self._emitter_failed = True
                _report.warn_once("console-otel", f"console capture cannot export: {exc!r}")
        if self.emitter is not None:
            self.emitter.emit(records, self._context(ctx_hex), t)

    def _context(self, ctx_hex):
        if ctx_hex is None or ctx_hex == _NO_CTX:
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

    def _ack(self) -> None:
        """Tell the program its output is exported (with this relay's counters for its summary)."""
        counters = dict(stats.counters) if stats else {}
        if stats:
            stats.reset()
        if self.ack_fd is None or self.acked:
            if counters:
                _write_stats_line(self.cfg, counters)  # the program is gone: speak for it
            return
        self.acked = True
        try:
            if counters:
                import json

                os.write(self.ack_fd, (json.dumps(counters) + "\n").encode())
            else:
                os.write(self.ack_fd, b"{}\n")
            os.close(self.ack_fd)
        except OSError:
            _write_stats_line(self.cfg, counters)


def _load() -> None:
    global cp, _report, stats
    if cp is None:
        from evlog import _report as report_module, stats as stats_module
        from evlog.instrumentation import console_parse

        _report, stats, cp = report_module, stats_module, console_parse
        stats.no_progress()  # its counters reach the summary through the program (_ack)


def _redactor(patterns):
    from evlog.instrumentation.redact import Redactor

    return Redactor(patterns)


def _warn(key: str, message: str) -> None:
    try:
        _load()
        _report.warn_once(key, message)
    except BaseException:
        os.write(2, f"evlog: {message}\n".encode("utf-8", "replace"))


def _write_stats_line(cfg: dict, counters: dict) -> None:
    """The program died without waiting for us (os._exit, SIGKILL): its stats line, in its name."""
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


# -- OTel: records -> log records, metadata -> gauges ----------------------------------------------

class Emitter:
    """This relay's own LoggerProvider and MeterProvider, with the program's resource."""

    def __init__(self, cfg: dict):
        from opentelemetry import metrics
        from opentelemetry._logs import get_logger, set_logger_provider
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        from evlog import config
        from evlog.bootstrap import sdk
        from evlog.exporters import select as exporters

        settings = config.load()
        if cfg.get("run_dir"):
            settings = settings.with_overrides(run_dir=cfg["run_dir"])
        route = getattr(sdk, "route_sdk_logging", None)
        if route:
            route()  # SDK warnings -> one evlog line each, as in every other process

        n = settings.sdk_numbers  # validated, with the same defaults as every other process of the run
        resource = Resource(cfg.get("resource") or {})
        lp = LoggerProvider(resource=resource, shutdown_on_exit=False)
        self.room = max(64, n["OTEL_BLRP_MAX_QUEUE_SIZE"] * 3 // 4)  # records in flight before the processor waits
        self.emitted = 0
        self._exported: list = []  # one [count] per exporter: records it was handed
        for kind in settings.exporters.logs:
            make = exporters.factory("logs", kind, settings)
            if make:
                cell = [0]
                self._exported.append(cell)
                lp.add_log_record_processor(BatchLogRecordProcessor(
                    _counting(exporters.managed_log_exporter(make), cell),
                    max_queue_size=n["OTEL_BLRP_MAX_QUEUE_SIZE"], schedule_delay_millis=n["OTEL_BLRP_SCHEDULE_DELAY"],
                    max_export_batch_size=n["OTEL_BLRP_MAX_EXPORT_BATCH_SIZE"],
                    export_timeout_millis=n["OTEL_BLRP_EXPORT_TIMEOUT"]))
        readers = []
        for kind in settings.exporters.metrics:
            make = exporters.factory("metrics", kind, settings)
            if make:
                readers.append(PeriodicExportingMetricReader(
                    exporters.managed_metric_exporter(make),
                    export_interval_millis=n["OTEL_METRIC_EXPORT_INTERVAL"],
                    export_timeout_millis=n["OTEL_METRIC_EXPORT_TIMEOUT"]))
        mp = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
        set_logger_provider(lp)
        metrics.set_meter_provider(mp)
        self.providers = (lp, mp)
        self.logger = get_logger("evlog.console")
        self.meter = metrics.get_meter("evlog.console")
        self.values: dict[str, float] = {}
        self._stdout = {ATTR_IOSTREAM: "stdout"}
        self._stderr = {ATTR_IOSTREAM: "stderr"}

    def backlog(self) -> int:
        """Records emitted and not yet handed to the slowest exporter (the SDK queue's length)."""
        return self.emitted - min((c[0] for c in self._exported), default=self.emitted)

    def emit(self, records: list, ctx, t: int) -> None:
        emit = self.logger.emit
        self.emitted += sum(1 for r in records if r.kind != cp.WARNING)
        for r in records:
            kind = r.kind
            attrs = self._stdout if r.stream == "stdout" else self._stderr
            if kind == cp.TEXT:
                emit(timestamp=t, context=ctx, body=r.body, attributes=attrs)
            elif kind == cp.METADATA:
                emit(timestamp=t, context=ctx, body=r.body, attributes=attrs, event_name="evlog.metadata")
                self._gauges(r.body)
            elif kind == cp.COMMAND:
                emit(timestamp=t, context=ctx, body=r.body, attributes=attrs, event_name="evlog.console.command")
            elif kind == cp.REPEATED:
                emit(timestamp=t, context=ctx, body=r.body,
                     attributes={ATTR_IOSTREAM: r.stream, ATTR_REPEATED: r.count})
            elif kind == cp.DROPPED:
                emit(timestamp=t, context=ctx, body=r.body,
                     attributes={ATTR_IOSTREAM: r.stream, ATTR_DROPPED: r.count})

    def _gauges(self, body: dict) -> None:
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

    def flush(self, timeout_s: float) -> None:
        _bounded(lambda: [p.force_flush(int(timeout_s * 1000)) for p in self.providers], timeout_s)

    def shutdown(self, timeout_s: float) -> None:
        self.flush(timeout_s)
        _bounded(lambda: [p.shutdown() for p in self.providers], 1.0)


def _counting(exporter, cell: list):
    """``exporter``, counting into ``cell`` the records it is handed (exported or not)."""
    from opentelemetry.sdk._logs.export import LogRecordExporter

    class Counting(LogRecordExporter):
        def export(self, batch):
            try:
                return exporter.export(batch)
            finally:
                cell[0] += len(batch)

        def shutdown(self):
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return Counting()


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
    """Run as the reader or the processor; never returns (os._exit after a bounded flush)."""
    import _signal as signal  # the C module: "signal" would import enum, slower to start

    code = 0
    try:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_IGN)  # the relay ends when the program's output does
        if cfg["role"] == "reader":
            _follow_window_size(cfg)
            Reader(cfg).run()
        else:
            _lower_priority()
            Processor(cfg).run()
    except BaseException as exc:
        _warn("console-relay", f"console capture failed ({cfg.get('role')}): {exc!r}")
        code = 1
    os._exit(code)


def _fork_processor(cfg: dict, streams: list, ack_fd):
    """Fork the processor off the (single-threaded) reader; returns the reader's end of their socket."""
    import _signal as signal
    import _socket

    mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # the processor: a session of its own (see _lower_priority), none of the reader's streams
        code = 0
        try:
            mine.close()
            for s in streams:
                try:
                    os.close(s.fd)
                except OSError:
                    pass
            signal.signal(signal.SIGWINCH, signal.SIG_DFL)
            os.setsid()
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 0)
            os.dup2(null, 1)  # a console exporter's output must not land in the program's stdout
            os.close(null)
            _lower_priority()
            Processor({**cfg, "role": "processor", "sock_fd": theirs.detach(), "ack_fd": ack_fd}).run()
        except BaseException as exc:
            _warn("console-relay", f"console capture failed (processor): {exc!r}")
            code = 1
        os._exit(code)
    theirs.close()
    if ack_fd is not None:
        os.close(ack_fd)
    mine.setblocking(False)
    try:
        mine.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDBUF, SOCKET_BUFFER)
    except OSError:
        pass
    return mine


def _lower_priority() -> None:
    """Export is background work. With autogroup scheduling (Linux's default on desktops and most
    servers) CPU is shared between sessions before nice values count: the processor runs in a
    session of its own (console.py starts it so) whose group it lowers, so it takes nothing from
    the program's. Before any thread starts: the exporter threads inherit the thread's nice."""
    try:
        with open("/proc/self/autogroup", "w") as fh:
            fh.write(str(NICE))
    except OSError:
        pass
    try:
        os.nice(NICE)
    except OSError:
        pass


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
