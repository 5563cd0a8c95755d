"""Which logs are installed in this process: per tracer provider, the default one, the built-in one.

Kept apart from multieventlog so that installing the default consumers at start-up imports only this.
"""
from __future__ import annotations

import os
import weakref

from evlog import notices


class Registry:
    """The installed logs of this process (one object, so tests can reset it)."""

    def __init__(self):
        self.dispatch = weakref.WeakKeyDictionary()  # tracer provider -> its multieventlog.LogDispatch
        self.default = None  # the log fetch_logs() returns, when set by set_log_sink
        self.builtin = None  # the EVLOG_CONSUMERS log (evlog.processors.install_default)
        self.version = 0  # changes whenever the set of span processors may have (span_processors())

    def changed(self) -> None:
        self.version += 1

    def drain(self) -> None:
        """Give the logs now the waiting events of spans handed over already finished (a span processor's
        caller may do that in batches), so a fetch includes everything until now."""
        for d in list(self.dispatch.values()):
            try:
                d.flush()
            except Exception as exc:
                notices.warn_once("drain-flush", f"waiting span events could not be given to the logs: {exc!r}")

    def span_processors(self) -> list:
        """The installed logs' span processors, for task spans recorded here and built out of process (pool
        tasks, Dask executions and transfers): the consumers see them start and end where they run, not
        through the tracer provider (whose processors would hand them on a second time)."""
        procs = list(self.dispatch.values())
        b = self.builtin
        if b is not None and hasattr(b, "on_end") and not any(b is p for p in procs):
            procs.append(b)
        return procs

    def reset(self) -> None:
        """Forget every installed log (tests). Processors stay on their providers but get nothing."""
        for d in list(self.dispatch.values()):
            d.logs = ()
        self.dispatch = weakref.WeakKeyDictionary()
        self.default = None
        self.changed()
        b, self.builtin = self.builtin, None
        if b is not None and hasattr(b, "disable"):
            b.disable()

    def after_fork_in_child(self) -> None:
        """A forked child is another process: its logs start empty, with fresh consumer state."""
        for d in list(self.dispatch.values()):
            d._fresh()
        logs = {id(log): log for d in list(self.dispatch.values()) for log in d.logs}
        for extra in (self.default, self.builtin):
            if extra is not None:
                logs[id(extra)] = extra
        for log in logs.values():
            fresh = getattr(log, "_fresh", None)
            if fresh is not None:
                try:
                    fresh()
                except Exception as exc:
                    notices.warn_once("fork-fresh", f"a log could not start afresh after fork: {exc!r}")


registry = Registry()


def _after_fork_in_child() -> None:
    registry.after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
