"""Built-in aggregators: callables run by a MultiEventLog after its consumers, with the dict of streams.

    ml.aggregators["window"] = evlog.aggregators.LogWindow(window_s=20, core="core")
"""
from __future__ import annotations

import time

from evlog import notices

__all__ = ["LogWindow"]


def _timestamp(entry) -> int:
    return entry["timestamp"] if isinstance(entry, dict) else entry.timestamp


class LogWindow:
    """Keeps only the last ``window_s`` seconds of every stream, by the timestamps of the ``core`` stream
    (CoreMetrics), telling creation and deletion handlers (TimespanLogging.Events.LogWindow).

    After each event, every creation handler gets ``{name: latest sub-event}``; when entries fall out of
    the window, every deletion handler gets ``n``, the number of entries removed from the front of every
    stream. A handler is a callable, or an object with ``creation_hook(log)`` / ``deletion_hook(n)``
    methods (as DaggerWebDash's D3Renderer). A handler that raises is reported once and skipped.
    """

    def __init__(self, window_s: float, core: str = "core"):
        self.window_ns = int(window_s * 1e9)
        self.core = core
        self.creation_handlers: list = []
        self.deletion_handlers: list = []

    def __call__(self, logs: dict) -> None:
        try:
            core = logs[self.core]
        except KeyError:
            raise KeyError(f"LogWindow: no stream named {self.core!r} (add a CoreMetrics consumer under that name)") from None
        if core and self.creation_handlers:
            latest = {name: (s[-1] if s else None) for name, s in logs.items()}
            for h in list(self.creation_handlers):
                self._call(h, "creation_hook", latest)
        if not core:
            return
        start = time.time_ns() - self.window_ns
        n = 0
        for entry in core:  # entries are in arrival order; stop at the first one inside the window
            if entry is not None and _timestamp(entry) >= start:
                break
            n += 1
        if n == 0:
            return
        for h in list(self.deletion_handlers):
            self._call(h, "deletion_hook", n)
        for s in logs.values():
            del s[:n]

    def _call(self, handler, method: str, arg) -> None:
        try:
            hook = getattr(handler, method, None)
            (hook or handler)(arg)
        except Exception as exc:
            notices.warn_once(f"logwindow-{method}-{id(handler)}",
                              f"LogWindow {method.split('_')[0]} handler {handler!r} raised {exc!r}; skipped, the others go on")

    def __repr__(self) -> str:
        return f"LogWindow(window_s={self.window_ns / 1e9:g}, core={self.core!r})"
