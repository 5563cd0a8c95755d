"""A SIGTERM that always ends a multiprocessing child, although evlog handles it in Python.

evlog's SIGTERM handler (evlog.observed.lifecycle) flushes, then dies by SIGTERM, so
``Pool.terminate()`` (and ``Pool.__exit__``) loses no span. But a Python-level handler runs only when
the main thread gets back to the interpreter, and plain Python's default action (die at once) never
had that need. Two races follow, and either leaves a pool worker blocked on the task queue forever,
with ``Pool.__exit__`` waiting for it:

- Fork: CPython clears the signals its C handler caught before a forked child's interpreter is
  ready (``_PySignal_AfterFork``). A worker terminated before it first ran loses the SIGTERM.
  Remedy: while evlog handles SIGTERM, each fork holds SIGTERM blocked from just before the fork
  until the child's at-fork hooks run; a SIGTERM sent in between waits in the kernel. (The SDK's
  threads, re-created by earlier at-fork hooks, keep it blocked, so the kernel gives SIGTERM to the
  main thread.)
- A SIGTERM caught just before the main thread enters a blocking call (the pool's queue lock)
  interrupts nothing: the handler waits for the call to return, which it never does. Remedy: in
  each multiprocessing child, the C handler also writes to a wakeup pipe; a daemon thread reading it
  interrupts the main thread (``pthread_kill``) every half second until the process is gone.

Both act only while the SIGTERM handler is evlog's own; a program's own handler is left alone.
"""
from __future__ import annotations

import os
import signal
import threading
import time

from evlog import notices

_TERM = {signal.SIGTERM}
POKE_EVERY_S = 0.5


def _evlog_handles_sigterm() -> bool:
    from evlog.observed import lifecycle

    return signal.getsignal(signal.SIGTERM) is getattr(lifecycle, "_on_sigterm", None)


class SigtermGuard:
    """The fork hooks (switched by ``on``) and the per-child watcher."""

    on = False
    _hooked = False
    _tls = threading.local()
    _pipe: tuple | None = None  # this process's wakeup pipe (read end, write end)

    @classmethod
    def enable(cls) -> None:
        cls.on = True
        if not cls._hooked and hasattr(os, "register_at_fork"):  # hooks cannot be removed: ``on`` gates them
            os.register_at_fork(before=cls._before_fork, after_in_parent=cls._unblock,
                                after_in_child=cls._after_fork_in_child)
            cls._hooked = True

    @classmethod
    def disable(cls) -> None:
        cls.on = False

    @classmethod
    def _before_fork(cls) -> None:
        cls._tls.unblock = False
        try:
            if cls.on and _evlog_handles_sigterm():
                cls._tls.unblock = signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, _TERM)
        except Exception as exc:
            notices.warn_once("sigterm-fork", f"cannot guard SIGTERM across fork: {exc!r}")

    @classmethod
    def _unblock(cls) -> None:
        if getattr(cls._tls, "unblock", False):
            cls._tls.unblock = False
            try:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, _TERM)
            except Exception as exc:
                notices.warn_once("sigterm-fork", f"cannot guard SIGTERM across fork: {exc!r}")

    @classmethod
    def _after_fork_in_child(cls) -> None:
        pipe, cls._pipe = cls._pipe, None
        if pipe is not None:  # the parent's watcher is not ours: its pipe must not report our signals
            try:
                if signal.set_wakeup_fd(-1) != pipe[1]:
                    notices.warn_once("sigterm-wakeup", "the signal wakeup descriptor was replaced by the program")
                os.close(pipe[0])
                os.close(pipe[1])
            except (OSError, ValueError):
                pass
        cls._unblock()

    @classmethod
    def watch(cls) -> None:
        """In a multiprocessing child's main thread, before its target runs: start the watcher."""
        if not cls.on or cls._pipe is not None or not _evlog_handles_sigterm():
            return
        try:
            r, w = os.pipe()
            os.set_blocking(w, False)
            previous = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            if previous != -1:  # the program uses the wakeup descriptor: leave it to it
                signal.set_wakeup_fd(previous)
                os.close(r)
                os.close(w)
                return
            cls._pipe = (r, w)
            main = threading.get_ident()
            threading.Thread(target=_watch, args=(r, main), name="evlog-sigterm", daemon=True).start()
        except Exception as exc:
            notices.warn_once("sigterm-watch", f"cannot watch for SIGTERM in this process: {exc!r}")


def _watch(r: int, main: int) -> None:
    try:
        while signal.SIGTERM not in os.read(r, 64):  # one byte per signal the C handler caught
            pass
        # Interrupt whatever the main thread waits in, so that it runs the handler (flush, then die),
        # until the process is gone. A repeat while the handler runs is noted by it and changes nothing.
        while _evlog_handles_sigterm():
            signal.pthread_kill(main, signal.SIGTERM)
            time.sleep(POKE_EVERY_S)
    except Exception:
        return  # the process is ending (descriptors closed, interpreter shutting down)
