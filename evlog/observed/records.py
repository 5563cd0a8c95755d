"""Records from the observed process to the run's exporter process.

Instrumentation on a hot path only appends a tuple of atoms (str, int, float, None, tuples of those) to a
deque it got from ``source(kind)``. A thread of this process (``evlog-ship``) swaps those deques out every
INTERVAL seconds and writes them, ``marshal``-ed and length-prefixed, to the run's exporter process over
a Unix socket; that process builds the spans and exports them (evlog/exporter/process.py). So what stays
in the observed process per record is one append, and per batch one C-speed ``marshal.dumps`` and one write.

The exporter process's address is EVLOG_EXPORTER (an abstract Unix socket name), set by evlog-instrument,
which starts it. A process set up without the launcher (``evlog.configure()``, plain
``opentelemetry-instrument``) starts its own on first use and publishes the address to its children.

At exit (``lifecycle.after_flush``, once the SDK's providers have handed over what they hold) everything
recorded is shipped at once: a local write, so closing does not wait for any collector. A process killed
with SIGKILL loses at most its last INTERVAL.
"""
from __future__ import annotations

import marshal
import os
import threading
from collections import deque

from evlog import notices, stats
from evlog.wire import endpoint as _exporter
from evlog.wire.frames import HEADER as _HEADER  # frame bytes, records in it

INTERVAL = 0.5  # seconds between shipments
BUSY = 8192  # records in one shipment past which the next comes sooner (INTERVAL / 5)
FRAME_ITEMS = 4096  # records per frame: a bound on the time one marshal.dumps holds the GIL
SEND_SLICE = 0.2  # seconds a shipment waits for room in the socket; what does not fit waits for the next
EXIT_WAIT = 5.0  # seconds exit waits for the exporter process to take what is still unsent
MAX_UNSENT = 64 << 20  # bytes held for a slow exporter process before the oldest frames are dropped (counted)


class _Source:
    __slots__ = ("kind", "meta", "log", "tap", "convert", "announced")

    def __init__(self, kind: str, meta, tap, convert):
        self.kind = kind
        self.meta = meta
        self.log: deque = deque()
        self.tap = tap
        self.convert = convert
        self.announced = False


class Channel:
    """This process's records and their connection to the exporter process."""

    def __init__(self):
        self._sources: list[_Source] = []
        self._lock = threading.Lock()  # one shipment at a time
        self._wake = threading.Event()
        self._sock = None
        self._thread = None
        self._dead = False
        self._unsent: deque = deque()  # [frame bytes, records in it, bytes of it already sent, has a hello]
        self._unsent_bytes = 0
        self._resource_sent = None
        self._count = 0  # sources made so far
        self._pid = os.getpid()

    # ---- sources --------------------------------------------------------------------------------

    def source(self, kind: str, meta=None, tap=None, convert=None) -> deque:
        """A deque to append records of ``kind`` to. ``meta`` (atoms) goes once, before its first
        records; ``convert(items)``, if given, turns what the hot path appended into the records that
        go (tuples of atoms), in the shipping thread: the place for work too costly for the hot path;
        ``tap(items)`` sees every shipped list in this process (e.g. a local story ledger)."""
        with self._lock:
            self._count += 1
            # one stream per source: two schedulers of one process (a test suite's clusters, one after the
            # other) reuse task keys, and the exporter process must not mix their tasks' lives
            src = _Source(f"{kind}#{self._count}", meta, tap, convert)
            self._sources.append(src)
        self._ensure_thread()
        return src.log

    def start(self) -> None:
        """Start the shipping thread now rather than at the first source."""
        self._ensure_thread()

    def remove(self, log: deque) -> None:
        """Ship what ``log`` holds, then stop shipping it."""
        self.ship()
        with self._lock:
            self._sources = [s for s in self._sources if s.log is not log]

    # ---- shipping -------------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._thread = threading.Thread(target=self._loop, name="evlog-ship", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        n = 0
        while True:
            # a busy process ships more often: what waits here (the records and, at shipping, their
            # bytes) stays a few MB however fast it records
            self._wake.wait(INTERVAL if n < BUSY else INTERVAL / 5)
            self._wake.clear()
            if self._pid != os.getpid():
                return
            try:
                n = self.ship()
            except Exception as exc:  # never let the shipping thread die: later records still go
                notices.warn_once("records-ship", f"a shipment of records failed: {exc!r}")
                n = 0

    def ship(self) -> int:
        """Send everything recorded so far; the number of records sent (or dropped)."""
        with self._lock:
            frames = []
            n = 0
            for src in self._sources:
                log = src.log
                if not log:
                    continue
                pop = log.popleft
                items = [pop() for _ in range(len(log))]
                if src.convert is not None:
                    try:
                        items = src.convert(items)
                    except Exception as exc:
                        notices.warn_once(f"records-convert-{src.kind}", f"records of {src.kind} are lost: {exc!r}")
                        stats.incr("dropped.unconvertible", len(items))
                        continue
                n += len(items)
                if not items:
                    continue
                if src.tap is not None:
                    try:
                        src.tap(items)
                    except Exception as exc:
                        notices.warn_once(f"records-tap-{src.kind}", f"records of {src.kind} not kept here: {exc!r}")
                meta = None
                if not src.announced:
                    meta, src.announced = src.meta, True
                for i in range(0, len(items), FRAME_ITEMS):
                    frames.append((src.kind, meta, items[i:i + FRAME_ITEMS]))
                    meta = None
            if frames:
                self._queue(frames, n)
            if self._unsent:
                self._send(SEND_SLICE)
            return n

    def _queue(self, frames: list, n: int) -> None:
        """Frames become bytes, queued to go out in order (a slow exporter process makes them wait here,
        never the program's threads: only this thread writes)."""
        if self._dead:
            stats.incr("dropped.exporter_gone", n)
            return
        head = self._hello()
        for kind, meta, items in frames:
            try:
                data = marshal.dumps((head, kind, meta, items))
            except ValueError:  # a value marshal cannot carry (a converter let one through): drop that record
                items = _marshallable(kind, items)
                data = marshal.dumps((head, kind, meta, items))
            self._unsent.append([_HEADER.pack(len(data), len(items)) + data, len(items), 0, head is not None])
            self._unsent_bytes += len(data) + _HEADER.size
            head = None
        unsent = self._unsent
        # never one begun (the stream would be torn), nor one with a hello (what follows needs it)
        while self._unsent_bytes > MAX_UNSENT and len(unsent) > 1 and unsent[0][2] == 0 and not unsent[0][3]:
            frame, count, _, _ = unsent.popleft()
            self._unsent_bytes -= len(frame)
            stats.incr("dropped.exporter_behind", count)

    def _send(self, wait_s: float) -> bool:
        """Write queued frames for at most ``wait_s`` seconds; True once none is left."""
        import time

        unsent = self._unsent
        deadline = time.monotonic() + wait_s
        try:
            sock = self._sock or self._connect()
            while unsent:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                sock.settimeout(left)
                entry = unsent[0]
                try:
                    sent = sock.send(memoryview(entry[0])[entry[2]:])
                except TimeoutError:
                    return False
                entry[2] += sent
                if entry[2] == len(entry[0]):
                    unsent.popleft()
                    self._unsent_bytes -= len(entry[0])
            return True
        except Exception as exc:
            self._dead = True
            lost = sum(e[1] for e in unsent)
            unsent.clear()
            self._unsent_bytes = 0
            stats.incr("dropped.exporter_gone", lost)
            notices.warn_once("records-send", f"the exporter process cannot be reached ({exc}); this process's "
                              "task telemetry is dropped and counted from now on, the program goes on")
            return False

    def _hello(self):
        """This process's resource (and the run's settings), when they changed since the last frame."""
        from evlog.observed import resource

        res = resource.attributes()
        if res == self._resource_sent:
            return None
        self._resource_sent = res
        env = {k: v for k, v in os.environ.items() if k.startswith(("OTEL_", "EVLOG_"))}
        from evlog import config

        run_dir = config.get().run_dir  # evlog.configure(run_dir=...) is a setting, not a variable
        if run_dir:
            env["EVLOG_RUN_DIR"] = run_dir
        return {"pid": os.getpid(), "resource": res, "env": env}

    def _connect(self):
        import socket

        addr = os.environ.get(_exporter.ENV)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if not addr:
                raise FileNotFoundError
            sock.connect("\0" + addr)
        except (FileNotFoundError, ConnectionRefusedError):
            # none named, or one that is gone (a variable left from an earlier run): this process starts its own
            sock.connect("\0" + _start_own())
        self._sock = sock
        return sock

    def close(self) -> None:
        """At exit: ship everything, waiting at most EXIT_WAIT for a slow exporter process (the rest is
        dropped and counted)."""
        self.ship()
        with self._lock:
            if self._unsent and not self._send(EXIT_WAIT):
                lost = sum(e[1] for e in self._unsent)
                self._unsent.clear()
                stats.incr("dropped.exporter_behind", lost)
                notices.warn_once("records-exit", f"the exporter process did not take this process's last {lost:,} "
                                  f"records within {EXIT_WAIT:g} s; they are dropped and counted")
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


def _marshallable(kind: str, items: list) -> list:
    """The records of ``items`` that marshal can carry; the others are dropped, counted and named once."""
    keep = []
    for item in items:
        try:
            marshal.dumps(item)
        except ValueError as exc:
            stats.incr("dropped.unmarshallable")
            notices.warn_once(f"records-marshal-{kind}", f"a record of {kind} holds a value that cannot be sent "
                              f"({exc}); such records are dropped and counted")
        else:
            keep.append(item)
    return keep


_own: list = []  # (starter's pid, control pipe, exporter's pid) of an exporter process started here


def _start_own() -> str:
    """No launcher started an exporter process: start one for this process and its children. This
    process's exit ends it and waits for its flush (bounded), as the launcher does."""
    addr, control, pid = _exporter.start(dict(os.environ))
    _own.append((os.getpid(), control, pid))
    os.environ[_exporter.ENV] = addr
    return addr


def exporter_address() -> str:
    """The run's exporter process's address (EVLOG_EXPORTER) for a process that sends to it by itself (the
    console relay's reader); a process set up without the launcher starts its own now, ended at its exit."""
    addr = os.environ.get(_exporter.ENV)
    if not addr:
        channel()  # its exit hook ends the exporter process started here
        addr = _start_own()
    return addr


def _end_own() -> None:
    for starter, control, pid in list(_own):
        if starter == os.getpid():
            _own.remove((starter, control, pid))
            _exporter.end(control, pid)


_channel: Channel | None = None
_guard = threading.Lock()


def channel() -> Channel:
    global _channel
    ch = _channel
    if ch is None or ch._pid != os.getpid():
        with _guard:
            if _channel is None or _channel._pid != os.getpid():
                _channel = Channel()
                _hook_exit()
            ch = _channel
    return ch


def source(kind: str, meta=None, tap=None, convert=None) -> deque:
    return channel().source(kind, meta, tap, convert)


def flush() -> None:
    """Ship this process's records now (their converters and taps run: e.g. before a log is read)."""
    ch = _channel
    if ch is not None and ch._pid == os.getpid():
        ch.ship()


def remove(log: deque) -> None:
    ch = _channel
    if ch is not None and ch._pid == os.getpid():
        ch.remove(log)


_exit_hooked = False


def _hook_exit() -> None:
    global _exit_hooked
    if _exit_hooked:
        return
    _exit_hooked = True
    from evlog.observed import lifecycle

    lifecycle.after_flush(_at_exit)  # after the providers' last flush: what they made goes too


def _at_exit() -> None:
    ch = _channel
    if ch is not None and ch._pid == os.getpid():
        ch.close()
    if _own:
        _end_own()


def _after_fork_in_child() -> None:
    """A forked child is not the scheduler or worker its parent is: it ships only its own records."""
    global _channel, _guard
    _channel = None
    _guard = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
