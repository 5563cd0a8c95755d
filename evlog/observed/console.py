"""Console capture: the launched program's stdout and stderr, at the file-descriptor level.

``install(settings)`` runs once, in the launched program's own process (evlog's bootstrap calls it;
children inherit the captured descriptors and are not captured again). For each of descriptors 1
and 2 it makes a pseudo-terminal if the original is a terminal (so ``isatty()`` stays true, and
colours, progress bars and prompts behave as before), a pipe otherwise, puts it in place with
``dup2`` and starts the relay's reader (console_relay.py): a helper process passing every byte on to
the original descriptor unchanged, at once, and handing it to the run's exporter process, which makes
the lines OTel log records (names in docs/conventions.md, section Console). So print, C extensions,
``os.write(1, ...)`` and every child process that inherits the descriptors are seen, and the program
never runs per-line work.

Two things are written into the streams for the relay (and removed by it): a marker at each change
of the main thread's innermost span, so lines carry the trace context that was current when they
were written; and, at exit (a ``before_flush`` hook: normal exit and SIGTERM), an exit marker, after
which the program waits (bounded) until the reader has handed everything before it to the exporter
process (a local write, never a wait on a collector).
"""
from __future__ import annotations

import os
import select
import subprocess
import sys
import threading

from evlog import notices, stats
from evlog.wire import console as markers

MARKS_ENV = "EVLOG_CONSOLE_MARKS"  # token:dev:ino of fd 1:dev:ino of fd 2, for children's logged marks
_capture = None  # the active _Capture of this process, or None
_hooked_pid = -1  # the process whose exit hook, span processor and fork hook are registered
# The relay: its path is evlog, its own standard library, then the program's other entries (no
# current or script directory: a user's "select.py" must not shadow the standard library there);
# console_relay.py runs as a plain file, so reading starts before the evlog package is imported (it
# then imports only evlog.wire's modules). Its code comes from its cached bytecode, made once if missing.
_BOOT = ("import sys;c=eval(sys.argv[1],{'__builtins__':{}});std=[p for p in sys.path if p];"
         "sys.path[:]=c['path'][:1]+std+[p for p in c['path'][1:] if p not in std];"
         "import marshal;f=c['code'];b=open(f,'rb').read();"
         "k=marshal.loads(b[16:]) if f.endswith('.pyc') else compile(b,f,'exec');"
         "g={'__name__':'evlog_console_relay'};exec(k,g);g['main'](c)")
READY_S = 2.0  # how long install() waits for the relay's reader to start
_PIPE_SIZE = 1 << 18  # 4x the default; more would eat the per-user pipe-buffer budget (64 MiB soft)


def install(settings) -> bool:
    """Capture stdout and stderr of this process from now on; False if it cannot (reported)."""
    global _capture
    if _capture is not None and _capture.pid == os.getpid():
        return False
    if getattr(settings, "capture", "metadata") == "off" or not hasattr(os, "openpty") or not sys.executable:
        return False
    try:
        _hook()  # first: at exit the program's output is handed over before its own exporter process ends
        cap = _Capture(settings)
        if not cap.start():
            return False
    except Exception as exc:
        notices.warn_once("console-install", f"console capture could not start; output is not captured: {exc!r}")
        return False
    _capture = cap
    return True


def uninstall() -> None:
    """Stop capturing: everything written so far is exported, the original descriptors are back."""
    global _capture
    cap, _capture = _capture, None
    if cap is not None and cap.pid == os.getpid():
        cap.stop()
        threading.Thread(target=cap.reap, name="evlog-console-reap", daemon=True).start()


def active() -> bool:
    return _capture is not None and _capture.pid == os.getpid()


class _Stream:
    def __init__(self, fd: int, name: str):
        self.fd = fd  # 1 or 2
        self.name = name
        self.orig = -1  # a copy of the original descriptor
        self.read = -1  # read end (pipe) or master (pty): the relay's
        self.write = -1  # write end or slave: becomes fd 1/2; this copy is for markers
        self.pty = False


class _Capture:
    def __init__(self, settings):
        self.settings = settings
        self.pid = os.getpid()
        self.main_ident = threading.main_thread().ident
        self.token = os.urandom(8).hex()
        self.prefix = markers.marker_prefix(self.token)
        self.streams: list[_Stream] = []
        self.active_spans: dict = {}  # span_id -> SpanContext, main thread, innermost last
        self.procs: list = []  # the relay's reader
        self.ack = -1
        self.stopped = False
        self._lock = threading.Lock()

    def start(self) -> bool:
        try:
            for fd, name in ((1, "stdout"), (2, "stderr")):
                try:
                    os.fstat(fd)
                except OSError:
                    continue  # closed: nothing to capture
                s = self._open(fd, name)
                if s is not None:
                    self.streams.append(s)
            if not self.streams:
                return False
            self.ack, ack_w = (_high(x) for x in os.pipe())
            ready_r, ready_w = (_high(x) for x in os.pipe())
            try:
                self.procs = self._spawn(ack_w, ready_w)
            finally:
                os.close(ack_w)
                os.close(ready_w)
            try:
                ready = _wait_ready(ready_r)
            finally:
                os.close(ready_r)
            if ready is False:
                raise RuntimeError("the console relay did not start")
            if os.environ.get("EVLOG_STATS_FILE"):  # the launcher waits for it if the program is killed
                from evlog import stats

                stats.append_line(os.environ["EVLOG_STATS_FILE"], {"relay": self.procs[0].pid})
        except BaseException:
            for p in self.procs:
                p.kill()
            self._close_all()
            raise
        for s in self.streams:
            os.close(s.read)
            s.read = -1
            os.dup2(s.write, s.fd)  # from here on the program writes to the relay
        if self.settings.capture == "enabled":  # children mark their logged lines too (logged())
            ids = {s.fd: _identity(s.fd) for s in self.streams}
            os.environ[MARKS_ENV] = ":".join([self.token] + [f"{ids[fd][0]}:{ids[fd][1]}" if fd in ids else "-:-"
                                                             for fd in (1, 2)])
        return True

    def _open(self, fd: int, name: str) -> _Stream | None:
        s = _Stream(fd, name)
        if os.isatty(fd):
            try:
                master, slave = (_high(x) for x in os.openpty())
            except OSError as exc:  # a terminal must stay a terminal: rather not capture it
                notices.warn_once(f"console-pty-{name}", f"{name} is a terminal but no pseudo-terminal "
                                  f"could be opened ({exc.strerror}); {name} is not captured")
                return None
            s.pty = True
            s.read, s.write = master, slave
            _copy_terminal(fd, slave)
            s.orig = _high(os.dup(fd))
            return s
        s.orig = _high(os.dup(fd))
        s.read, s.write = (_high(x) for x in os.pipe())
        try:
            import fcntl

            fcntl.fcntl(s.write, 1031, _PIPE_SIZE)  # F_SETPIPE_SZ: room for bursts while the relay works
        except (OSError, ImportError):
            pass
        return s

    def _spawn(self, ack_w: int, ready_w: int) -> list:
        """Start the relay's reader (see console_relay.py)."""
        import evlog

        root = os.path.dirname(os.path.dirname(os.path.abspath(evlog.__file__)))
        script = os.path.dirname(os.path.abspath(sys.argv[0])) if getattr(sys, "argv", None) and sys.argv[0] else None
        cfg = {
            "path": [root] + [p for p in sys.path if p and p != root and os.path.abspath(p) != script],
            "code": _relay_code(),
            "streams": [{"name": s.name, "fd": s.read, "out": s.fd, "pty": s.pty} for s in self.streams],
            "token": self.token,
            "mode": self.settings.capture,
            "redact": list(getattr(self.settings, "redact", ()) or ()),
            "exporter": _exporter_address(),
            "hello": _hello(self.settings),
            "program_pid": self.pid,
            "stats_file": os.environ.get("EVLOG_STATS_FILE"),
        }
        by_fd = {s.fd: s.orig for s in self.streams}
        argv = [sys.executable or "python3", "-S", "-c", _BOOT]
        return [subprocess.Popen(
            argv + [repr({**cfg, "ready_fd": ready_w, "ack_fd": ack_w})],
            stdin=subprocess.DEVNULL, stdout=by_fd.get(1), stderr=by_fd.get(2),
            pass_fds=[s.read for s in self.streams] + [ready_w, ack_w], close_fds=True)]

    # while running ------------------------------------------------------------------------------

    def mark(self, span_context) -> None:
        """Tell the relay which span is current from this point of both streams on."""
        if self.stopped:
            return
        _flush_python_streams()
        if span_context is None:
            m = markers.encode_marker(self.prefix, markers.KIND_NONE)
        else:
            m = markers.encode_marker(self.prefix, markers.KIND_CONTEXT, span_context.trace_id,
                                    span_context.span_id, int(span_context.trace_flags))
        for s in self.streams:
            try:
                os.write(s.write, m)
            except OSError:
                pass

    # stopping -----------------------------------------------------------------------------------

    def stop(self) -> None:
        """Exit marker, wait (bounded) until the reader has handed over what came before, restore."""
        with self._lock:
            if self.stopped:
                return
            self.stopped = True
        _flush_python_streams()
        m = markers.encode_marker(self.prefix, markers.KIND_EXIT)
        for s in self.streams:
            try:
                os.write(s.write, m)
            except OSError:
                pass
        counters = _read_ack(self.ack, markers.CONTROL_S + READY_S)
        if counters is None:
            stats.incr("console.exit_timeouts")
        else:
            for k, v in counters.items():
                if isinstance(v, int):
                    stats.incr(k, v)
        for s in self.streams:
            try:
                if _same_file(s.fd, s.write):  # the program may have redirected it itself
                    os.dup2(s.orig, s.fd)
            except OSError:
                pass
        self._close_all()

    def _close_all(self) -> None:
        for s in self.streams:
            for attr in ("orig", "read", "write"):
                fd = getattr(s, attr)
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
                    setattr(s, attr, -1)
        if self.ack >= 0:
            try:
                os.close(self.ack)
            except OSError:
                pass
            self.ack = -1

    def reap(self) -> None:
        for p in self.procs:
            try:
                p.wait(30)
            except Exception:
                pass


# -- hooks: exit, spans, fork -----------------------------------------------------------------------

def _hook() -> None:
    global _hooked_pid
    if _hooked_pid == os.getpid():
        return
    _hooked_pid = os.getpid()
    try:
        from evlog.observed import lifecycle

        lifecycle.before_flush(_at_exit)
    except Exception as exc:
        notices.warn_once("console-exit-hook", f"console capture cannot hook exit; the last lines may be late: {exc!r}")
    try:
        from opentelemetry import trace

        from evlog.observed import own_spans
        from evlog.processors.on_provider import add_span_processor, takes_span_processors

        marks = SpanMarks()
        own_spans.watch(marks)  # evlog's own spans (a Dask client call's)
        provider = trace.get_tracer_provider()
        if takes_span_processors(provider):  # the program's spans, once it makes some
            add_span_processor(provider, marks)
    except Exception as exc:
        notices.warn_once("console-spans", f"console lines will carry no trace context: {exc!r}")
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_forget_in_child)


def _at_exit() -> None:
    cap = _capture
    if cap is not None and cap.pid == os.getpid():
        cap.stop()


def _forget_in_child() -> None:
    # A forked child writes into the same pipes (its output is captured) but is not the program:
    # no markers, no exit handshake from it.
    global _capture
    _capture = None


class SpanMarks:
    """A span processor that marks each change of the main thread's innermost span in the streams
    (cheap elsewhere); on the SDK's provider through evlog.processors.on_provider."""

    def on_start(self, span, parent_context=None) -> None:
        cap = _capture
        if cap is None or threading.get_ident() != cap.main_ident or cap.pid != os.getpid():
            return
        try:
            sc = span.get_span_context()
            cap.active_spans[sc.span_id] = sc
            cap.mark(sc)
        except Exception as exc:
            notices.warn_once("console-mark", f"console trace context failed: {exc!r}")

    def on_end(self, span) -> None:
        cap = _capture
        if cap is None or not cap.active_spans or cap.pid != os.getpid():
            return
        try:
            if cap.active_spans.pop(span.get_span_context().span_id, None) is None:
                return
            cap.mark(next(reversed(cap.active_spans.values()), None))
        except Exception as exc:
            notices.warn_once("console-mark", f"console trace context failed: {exc!r}")


# -- logged lines: Python logging records exported by python_logging.py, not sent twice -----------------

_marks: list = [None, None]  # (the value of MARKS_ENV it was read from, (prefix, {fd: identity}) or None)


def _marks_now():
    raw = os.environ.get(MARKS_ENV)
    if raw != _marks[0]:
        parsed = None
        try:
            token, d1, i1, d2, i2 = raw.split(":") if raw else (None,) * 5
            if token:
                ids = {fd: (int(d), int(i)) for fd, d, i in ((1, d1, i1), (2, d2, i2)) if d != "-"}
                parsed = (markers.marker_prefix(token), ids)
        except ValueError:
            parsed = None
        _marks[:] = [raw, parsed]
    return _marks[1]


def logged(record, logger) -> str | None:
    """A Python logging record python_logging.py exported (capture mode enabled): before each of the
    program's handlers that will write it to a captured stdout or stderr, a marker tells the relay which
    lines follow (the first's CRC-32, how many), and the console's builder drops them. In any process
    of the run whose stdout/stderr are the captured ones (MARKS_ENV). Returns the stream marked
    ("stdout" or "stderr", stderr first), or None."""
    marks = _marks_now()
    if marks is None:
        return None
    import logging
    import zlib

    from evlog.wire.console_render import render

    prefix, ids = marks
    marked = set()
    for handler in _handlers(logger, record, logging):
        stream = getattr(handler, "stream", None)
        try:
            fd = stream.fileno()
        except Exception:
            continue
        if fd not in ids or _identity(fd) != ids[fd]:
            continue
        lines = handler.format(record).split("\n")
        first = lines[0]
        if "\r" in first or "\x1b" in first or "\b" in first:
            first = render(first)
        _flush_python_streams()
        try:
            stream.flush()
            os.write(fd, markers.encode_logged(prefix, zlib.crc32(first.encode("utf-8", "surrogatepass")), len(lines)))
            marked.add(fd)
        except (OSError, ValueError):
            pass
    return "stderr" if 2 in marked else "stdout" if 1 in marked else None


def _handlers(logger, record, logging) -> list:
    """The handlers ``Logger.callHandlers`` will give ``record`` to (their level, not their filters)."""
    out, found, c = [], 0, logger
    while c is not None:
        for h in c.handlers:
            found += 1
            if record.levelno >= h.level:
                out.append(h)
        if not c.propagate:
            break
        c = c.parent
    last = logging.lastResort
    if not found and last is not None and record.levelno >= last.level:
        out.append(last)
    return out


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


# -- small helpers ----------------------------------------------------------------------------------

def _high(fd: int) -> int:
    """Keep our descriptors off 0-2 (one of them may be closed) and out of exec'd children."""
    if fd > 2:
        return fd
    import fcntl

    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.close(fd)
    return new


def _copy_terminal(real: int, slave: int) -> None:
    """The pty looks like the real terminal (modes, size), but passes bytes through untranslated."""
    try:
        import fcntl
        import termios

        attrs = termios.tcgetattr(real)
        attrs[1] &= ~termios.OPOST  # the real terminal does the output processing, once
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        fcntl.ioctl(slave, termios.TIOCSWINSZ, fcntl.ioctl(real, termios.TIOCGWINSZ, b"\0" * 8))
    except Exception:
        pass


def _flush_python_streams() -> None:
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None:
                f.flush()
        except Exception:
            pass


def _same_file(a: int, b: int) -> bool:
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino, sa.st_rdev) == (sb.st_dev, sb.st_ino, sb.st_rdev)


def _wait_ready(fd: int) -> bool | None:
    """Wait (bounded) until the relay's reader reads: output written before would only fill the
    pipe and hold the program. True: ready; False: it died; None: not yet (capture goes on)."""
    while True:
        try:
            if not select.select([fd], [], [], READY_S)[0]:
                return None
            return os.read(fd, 1) == b"r"
        except InterruptedError:
            continue


def _read_ack(fd: int, timeout_s: float) -> dict | None:
    if fd < 0:
        return None
    import time

    deadline = time.monotonic() + timeout_s
    data = b""
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        try:
            chunk = os.read(fd, 65536)
        except InterruptedError:
            continue
        except OSError:
            return None
        if not chunk:
            return None  # the relay is gone
        data += chunk
    line = data.split(b"\n", 1)[0]
    if line == b"{}":  # nothing to count: the usual answer
        return {}
    import json

    try:
        value = json.loads(line)
        return value if isinstance(value, dict) else None
    except ValueError:
        return None


def _relay_code() -> str:
    """console_relay's cached bytecode if it is at least as new as its source, else the source."""
    import importlib.util

    spec = importlib.util.find_spec("evlog.relay.console_relay")  # its files, not the module: it runs elsewhere
    source, cached = spec.origin, spec.cached
    try:
        if cached and os.stat(cached).st_mtime >= os.stat(source).st_mtime:
            with open(cached, "rb") as fh:
                head = fh.read(16)
            if head[:4] == importlib.util.MAGIC_NUMBER:
                return cached
    except OSError:
        pass
    try:  # no fresh bytecode (nothing imports the relay's module): make it once, where Python would
        import py_compile

        if cached and py_compile.compile(source, cfile=cached, doraise=True):
            return cached
    except Exception:  # a read-only install: the relay compiles its source each time
        pass
    return source


def _exporter_address() -> str | None:
    """The run's exporter process (EVLOG_EXPORTER; a process set up without the launcher starts its own)."""
    try:
        from evlog.observed import records

        return records.exporter_address()
    except Exception as exc:
        notices.warn_once("console-exporter", f"console capture has no exporter process; output is passed "
                          f"through but not exported: {exc!r}")
        return None


def _hello(settings) -> dict:
    """The first frame's hello: the relay's telemetry speaks in the program's name and with its settings."""
    env = {k: v for k, v in os.environ.items() if k.startswith(("OTEL_", "EVLOG_"))}
    if getattr(settings, "run_dir", None):
        env["EVLOG_RUN_DIR"] = settings.run_dir  # evlog.configure(run_dir=...) is a setting, not a variable
    return {"pid": os.getpid(), "resource": _resource(), "env": env}


def _resource() -> dict:
    """This process's resource attributes: the relay's telemetry speaks in the program's name."""
    try:
        from evlog.observed import sdk

        if sdk.providers():
            return {k: v for k, v in sdk.resource_attributes().items()
                    if isinstance(v, (str, bool, int)) or (isinstance(v, float) and v == v and abs(v) != float("inf"))}
    except Exception:
        pass
    return {"process.pid": os.getpid()}
