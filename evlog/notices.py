"""evlog's own messages to the user: one line on stderr per distinct problem, never a traceback.

Instrumentation must never break the program it observes, so every evlog error goes through here:
reported once (keyed), then counted.
"""
from __future__ import annotations

import os
import sys
import threading

_seen: dict[str, int] = {}
_lock = threading.Lock()


def warn_once(key: str, message: str) -> bool:
    """Print ``evlog: message`` on stderr the first time ``key`` is seen; count later repeats."""
    with _lock:
        n = _seen.get(key, 0)
        _seen[key] = n + 1
    if n:
        return False
    _write(f"evlog: {message}\n")
    return True


def clip(text: str, limit: int = 1000) -> str:
    """At most ``limit`` characters, cut between words (a quoted message in one of evlog's lines)."""
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " [...]"


def exiting() -> bool:
    """The program is on its way out (its main thread has ended): no new thread can start, and a set-up
    that failed for that reason is not worth a message."""
    return sys.is_finalizing() or not threading.main_thread().is_alive()


def repeats() -> dict[str, int]:
    """How many times each reported problem happened (first report included)."""
    with _lock:
        return dict(_seen)


def reset() -> None:
    with _lock:
        _seen.clear()


def _write(text: str) -> None:
    # Straight to the descriptor: sys.stderr may be replaced, closed or captured by the program.
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        try:
            sys.__stderr__.write(text)
        except Exception:
            pass
