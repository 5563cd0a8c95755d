"""The console relay's reader: a process beside the program, passing its output through and on to the
run's exporter process (whose ``console`` builder, evlog/builders/console.py, makes it telemetry).

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

Nothing per line runs in the program's own process, and lines written just before os._exit or
SIGKILL still arrive (the reader reads until end of file). Its telemetry carries the program's
resource, so the relay is invisible in the data.

The program marks its span changes and its exit in the byte streams themselves (APC escape
sequences carrying a per-run token, see ``encode_marker``), so each line gets the trace context
that was current when it was written, and "everything up to my exit" is exact: the reader hands it
all to the exporter process before it acknowledges the exit. The relay strips the markers before
passing the bytes on.

Records and markers: evlog/wire/console.py; frames: evlog/wire/frames.py.
"""
from __future__ import annotations

import marshal
import os
import select
import time

# The reader runs this file with ``python -S`` and starts reading at once: the wire modules are
# standard library only (and evlog/__init__.py imports nothing at its top).
from evlog.wire.console import CONTROL_S, KIND, KIND_CONTEXT, KIND_EXIT, KIND_LOGGED, MarkerSplitter, marker_prefix
from evlog.wire.frames import HEADER as _HEADER

READ_SIZE = 1 << 18
COALESCE_S = 0.001  # output streaming in: wait this long before each read, to take more at once
FRAME = 1 << 16  # bytes of output per frame to the exporter process (the builder's unit of work)
MAX_UNSENT = 256 << 20  # bytes of frames the reader holds for a slow exporter process before it drops


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


def _warn(key: str, message: str) -> None:
    try:
        from evlog import notices

        notices.warn_once(key, message)
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
