"""Every way out of a process flushes, and none waits long: atexit, SIGTERM, os._exit.

- Normal exit and sys.exit: an atexit hook.
- SIGTERM (pool terminate, nanny kill, the launcher forwarding a signal): if the program left SIGTERM
  at its default, a handler flushes and then dies by SIGTERM as before, so the exit status is unchanged.
- os._exit skips atexit: forked children (multiprocessing fork/forkserver, process pools, bare
  os.fork) leave by it, and so may any program or spawn child; in every process os._exit flushes
  first, then exits with the code it was given.
At exit, what is buffered is pushed out (``before_flush`` hooks), the providers are flushed (a last
metric collection; the user's own span processors), and then this process's records go to the run's
exporter process (``after_flush`` hooks: a local write). Nothing here waits for a collector: only the
run's exporter process talks to one. The flush runs in a helper thread joined with a deadline, so a
user's own processor that hangs costs at most EXIT_TIMEOUT seconds.
"""
from __future__ import annotations

import atexit
import os
import signal
import threading
import time

from evlog import notices, stats

EXIT_TIMEOUT = float(os.environ.get("EVLOG_EXIT_TIMEOUT", "5") or 5)
_before_flush: list = []
_after_flush: list = []
_done_pid = -1  # the pid whose finish() has started (a forked child starts afresh)
_finished = False
_term_pending = False  # SIGTERM arrived while finish() was running: die by it once flushed
_lock = threading.RLock()  # re-entered by the SIGTERM handler when the signal lands inside finish()
_real_exit = os._exit
_exit_by = [float("inf")]  # monotonic time by which finish() must be done (a host's own shutdown timeout)
_providers = [list]  # -> the SDK providers to flush and shut down (observed/sdk.py names its own: providers_from)


def providers_from(fn) -> None:
    """``fn() -> [providers]``: what flush() and the exit flush (observed/sdk.py's, once it is set up)."""
    _providers[0] = fn


def exit_by(deadline: float) -> None:
    """The process is going away by ``deadline`` (monotonic), e.g. a Dask nanny kills its worker after the
    close timeout: the exit flush and shutdown end before it, never extend it."""
    _exit_by[0] = min(_exit_by[0], deadline)


def before_flush(fn) -> None:
    """Run ``fn()`` at exit before the providers flush (push out anything buffered)."""
    _before_flush.append(fn)


def after_flush(fn) -> None:
    """Run ``fn()`` at exit after the providers flushed (hand what they made to the exporter process)."""
    _after_flush.append(fn)


def flush(timeout_s: float = EXIT_TIMEOUT) -> bool:
    """Force-flush all providers now, bounded; True if everything was flushed in time."""
    provs = _providers[0]()
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
                notices.warn_once("flush", f"flushing telemetry failed: {exc}")

    t = threading.Thread(target=run, name="evlog-flush", daemon=True)
    t.start()
    t.join(max(0.0, deadline - time.monotonic()))
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
        _run_hooks(_before_flush, "before-flush")
        start = time.monotonic()
        timeout = max(0.05, min(EXIT_TIMEOUT, _exit_by[0] - start))
        if not flush(timeout):
            notices.warn_once("exit-timeout", f"telemetry not fully flushed within {timeout:g}s at exit (a span "
                              "processor or metric reader of the program's did not finish); the rest is dropped")
        _shutdown(max(0.2, min(timeout - (time.monotonic() - start), _exit_by[0] - time.monotonic())))
        _run_hooks(_after_flush, "after-flush")
        stats.write_process_line()
    finally:
        _finished = True
        if _term_pending:
            _die_by_sigterm()


def _run_hooks(hooks: list, name: str) -> None:
    for fn in list(hooks):
        try:
            fn()
        except Exception as exc:
            notices.warn_once(f"{name}-{getattr(fn, '__name__', fn)}", f"an exit hook failed: {exc}")


def _shutdown(timeout_s: float) -> None:
    def run():
        for p in _providers[0]():
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
