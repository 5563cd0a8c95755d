"""Every way out of a process flushes, and none waits long: atexit, SIGTERM, os._exit.

- Normal exit and sys.exit: an atexit hook.
- SIGTERM (pool terminate, nanny kill, the launcher forwarding a signal): if the program left SIGTERM
  at its default, a handler flushes and then dies by SIGTERM as before, so the exit status is unchanged.
- os._exit skips atexit: forked children (multiprocessing fork/forkserver, process pools, bare
  os.fork) leave by it, and so may any program or spawn child; in every process os._exit flushes
  first, then exits with the code it was given.
The flush runs in a helper thread joined with a deadline, so a dead collector or a stuck exporter
costs at most EXIT_TIMEOUT seconds (1 s once an export has already failed).
"""
from __future__ import annotations

import atexit
import os
import signal
import threading
import time

from evlog import _report, stats

EXIT_TIMEOUT = float(os.environ.get("EVLOG_EXIT_TIMEOUT", "5") or 5)
FAILING_WAIT = 1.0  # how long exit still waits once an export has failed
_before_flush: list = []
_done_pid = -1  # the pid whose finish() has started (a forked child starts afresh)
_finished = False
_term_pending = False  # SIGTERM arrived while finish() was running: die by it once flushed
_lock = threading.RLock()  # re-entered by the SIGTERM handler when the signal lands inside finish()
_real_exit = os._exit
_exit_by = [float("inf")]  # monotonic time by which finish() must be done (a host's own shutdown timeout)


def exit_by(deadline: float) -> None:
    """The process is going away by ``deadline`` (monotonic), e.g. a Dask nanny kills its worker after the
    close timeout: the exit flush and shutdown end before it, never extend it."""
    _exit_by[0] = min(_exit_by[0], deadline)


def before_flush(fn) -> None:
    """Run ``fn()`` at exit before the providers flush (push out anything buffered)."""
    _before_flush.append(fn)


def flush(timeout_s: float = EXIT_TIMEOUT) -> bool:
    """Force-flush all providers now, bounded; True if everything was flushed in time."""
    from . import sdk

    provs = sdk.providers()
    if not provs:
        return True
    deadline = time.monotonic() + timeout_s
    results = []

    def run():
        for p in provs:
            remaining = max(0.05, deadline - time.monotonic())
            try:
                results.append(p.force_flush(int(remaining * 1000)))
            except Exception as exc:
                _report.warn_once("flush", f"flushing telemetry failed: {exc}")

    t = threading.Thread(target=run, name="evlog-flush", daemon=True)
    t.start()
    from evlog.exporters import select

    cut = False
    while t.is_alive() and time.monotonic() < deadline:
        t.join(0.05)
        if not cut and select.any_failed():  # the collector is failing: do not wait the full time for it
            deadline = min(deadline, time.monotonic() + FAILING_WAIT)
            cut = True
    return not t.is_alive() and all(results)


def finish() -> None:
    """Flush and shut down once per process (idempotent), then write this process's stats line."""
    global _done_pid, _finished
    with _lock:
        if _done_pid == os.getpid():
            return
        _done_pid = os.getpid()
        _finished = False
    try:
        for fn in list(_before_flush):
            try:
                fn()
            except Exception as exc:
                _report.warn_once(f"before-flush-{getattr(fn, '__name__', fn)}", f"an exit hook failed: {exc}")
        from evlog.exporters import select

        timeout = FAILING_WAIT if select.any_failed() else EXIT_TIMEOUT
        start = time.monotonic()
        timeout = max(0.05, min(timeout, _exit_by[0] - start))
        flushed = flush(timeout)
        if not flushed:
            # exports still under way are given up: their metric points are counted here, their spans and
            # log records with the rest of what was never sent (sdk.unsent, after the shutdown)
            stats.incr("dropped.at_exit", select.abandon().get("metrics", 0))
            if not select.any_failed():  # a failing exporter was reported already
                _report.warn_once("exit-timeout", f"telemetry not fully flushed within {timeout:g}s at exit; the rest is dropped")
        left = timeout - (time.monotonic() - start)
        # once an export has failed there is nothing to wait for: a failing exporter's shutdown only
        # stops its retries (flush() cut its own wait short for the same reason)
        _shutdown(0.2 if select.any_failed() else max(0.2, min(left, _exit_by[0] - time.monotonic())))
        from . import sdk

        unsent = sdk.unsent()  # counted, not read from the SDK's queues: dropped by a full queue or left at exit
        if unsent:
            stats.incr("dropped.unsent", unsent)
            if flushed and not select.any_failed():  # with a failing collector, its message already says why
                _report.warn_once("queue-full", f"{unsent:,} items dropped because export was slower than the "
                                  "program (queue full)")
        stats.write_process_line()
    finally:
        _finished = True
        if _term_pending:
            _die_by_sigterm()


def _shutdown(timeout_s: float) -> None:
    from . import sdk

    def run():
        for p in sdk.providers():
            try:
                p.shutdown()
            except Exception:
                pass

    t = threading.Thread(target=run, name="evlog-shutdown", daemon=True)
    t.start()
    t.join(timeout_s)


def _on_sigterm(signum, frame):
    global _term_pending
    if _done_pid == os.getpid() and not _finished:
        _term_pending = True  # already on the way out (e.g. a pool worker in os._exit): finish first
        return
    finish()
    _die_by_sigterm()


def _die_by_sigterm():
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _exit_flushing(code):
    try:
        finish()
    finally:
        _real_exit(code)


def _after_fork_in_child() -> None:
    global _done_pid, _term_pending
    _done_pid = -1
    _term_pending = False
    os._exit = _exit_flushing


_installed = False


def install() -> None:
    """Hook atexit, SIGTERM (if at its default, main thread only) and os._exit (in every process)."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(finish)
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass
    os._exit = _exit_flushing  # os._exit skips atexit: in any process, it flushes first (bounded)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


def uninstall() -> None:
    global _installed
    if not _installed:
        return
    _installed = False
    atexit.unregister(finish)
    if signal.getsignal(signal.SIGTERM) is _on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if os._exit is _exit_flushing:
        os._exit = _real_exit
