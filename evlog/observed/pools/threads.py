"""Context propagation for threading.Thread and threading.Timer: no spans, only the trace.

A thread runs with the OTel context that was current where ``start()`` was called, so spans the user
opens in a thread (a Thread subclass, a Timer callback, a plain target) join the starter's trace.
Threads that libraries start for their own workings (pool workers, the SDK's exporters; see
_context.MACHINERY) start with an empty context, as without evlog: a pool worker thread lives on
long after the span that happened to be current when it was created.
``Thread.start`` records the context on the thread object; ``Thread._bootstrap_inner`` (which runs
``run()`` in the new thread, whatever subclass overrides it) attaches it for the thread's life.

Activated by both pool instrumentors (it is shared: counted, undone when the last one lets go).
"""
from __future__ import annotations

import threading

import wrapt
from opentelemetry import context as _ctx
from opentelemetry.instrumentation.utils import unwrap

from evlog import notices
from evlog.observed.pools.context import is_machinery

_ATTR = "_evlog_context"


def _start(wrapped, instance, args, kwargs):
    try:
        ctx = _ctx.get_current()
        if ctx and not is_machinery(instance._target if instance._target is not None else type(instance).run):
            setattr(instance, _ATTR, ctx)
    except Exception as exc:
        notices.warn_once("thread-context", f"cannot pass the trace context to a thread: {exc!r}")
    return wrapped(*args, **kwargs)


def _bootstrap_inner(wrapped, instance, args, kwargs):
    ctx = instance.__dict__.pop(_ATTR, None)
    if ctx is None:
        return wrapped(*args, **kwargs)
    token = _ctx.attach(ctx)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _ctx.detach(token)


class ThreadsInstrumentor:
    """Patches threading.Thread; shared by the futures and multiprocessing instrumentors."""

    _users = 0

    @classmethod
    def acquire(cls) -> None:
        if cls._users == 0:  # counted once patched: a failure here leaves nothing half counted
            wrapt.wrap_function_wrapper(threading.Thread, "start", _start)
            wrapt.wrap_function_wrapper(threading.Thread, "_bootstrap_inner", _bootstrap_inner)
        cls._users += 1

    @classmethod
    def release(cls) -> None:
        if cls._users == 0:
            return
        cls._users -= 1
        if cls._users == 0:
            unwrap(threading.Thread, "start")
            unwrap(threading.Thread, "_bootstrap_inner")
