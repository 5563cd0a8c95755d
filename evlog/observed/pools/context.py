"""The carrier that takes a submitter's context to the thread or process that runs the task.

``Task(fn, kind, context)`` wraps a user's function at submission. Called (in a pool thread, a pool
worker process, a ``multiprocessing.Process`` child), it runs ``fn`` inside one span named
``futures.task {function}`` or ``multiprocessing.task {function}``, child of the span that was
current at submission, with that context attached, so the user's own spans nest under it.

Threads get the submitter's whole OTel Context object. Processes get it by pickle: ``Task`` pickles
as ``(fn, blob)``, the blob being ``(kind, carrier)`` pickled once per submitter context (the carrier: a
dict the configured propagators write, evlog.propagation, so span, tracestate and baggage as
OTEL_PROPAGATORS says), and only when ``fn`` pickles, so an unpicklable function fails exactly as
it would without evlog (the same exception from the same place). The process that runs the tasks
keeps one Task per (function, blob): the items of one ``imap`` or ``map`` restore their context and
name once. On failure the span gets ERROR status and the exception as an event, and the exception goes
on to the pool unchanged.

With EVLOG_POOL_SPANS=chunk (the default), a Task that a pool sends with chunks of items (``Task.chunk``,
set at submission) runs under ``_chunks.runner``, the stand-in for the pool's chunk function: one span
per chunk, ``futures.chunk {function}`` or ``multiprocessing.chunk {function}``, and the user's function
called item by item without a span of its own.

The span is a recorded one (``_taskspan``), started and ended around the call in the thread that runs
it (so the process's consumers see both moments), ended before the result goes back; the run's exporter
process builds and exports it. A task still running when its process is told
to exit (SIGTERM from ``Pool.terminate()``, ``os._exit``) has its span ended with ERROR before the exit
flush.
"""
from __future__ import annotations

import contextvars
import functools
import pickle
import threading
from types import BuiltinFunctionType, FunctionType

from opentelemetry import context as _ctx
from opentelemetry import trace
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.trace import Status, StatusCode

from evlog import notices, propagation
from evlog.observed.pools import taskspan as _taskspan
from evlog.observed.profiler import ends_tasks as _profile_ends_tasks

# evlog.pool.kind -> (span name prefix, instrumentation scope, chunk span name prefix)
KINDS = {
    "thread": ("futures.task", "evlog.futures", "futures.chunk"),
    "process": ("futures.task", "evlog.futures", "futures.chunk"),
    "mp.pool": ("multiprocessing.task", "evlog.multiprocessing", "multiprocessing.chunk"),
    "mp.threadpool": ("multiprocessing.task", "evlog.multiprocessing", "multiprocessing.chunk"),
    "mp.process": ("multiprocessing.task", "evlog.multiprocessing", "multiprocessing.chunk"),
}
THREAD_KINDS = ("thread", "mp.threadpool")
# Libraries that run their own internals on pools and threads (pool workers and managers, Dask's
# executors and offloading, tornado's and gRPC's executors, the SDK's resource detectors and batch
# threads): their callables get no task span and their threads no context; only user work does.
MACHINERY = ("concurrent.futures.", "multiprocessing.", "distributed.", "tornado.", "grpc.", "opentelemetry.",
             "evlog.")
_NOT_YET = object()
_EMPTY = _ctx.Context()
_last: tuple = (None, None)  # the last carrier restored, and its Context
_attach, _detach, _get_current = _ctx.attach, _ctx.detach, _ctx.get_current
_set_span = trace.set_span_in_context
_Context = _ctx.Context
_enabled = is_instrumentation_enabled  # False inside suppress_instrumentation()
_partial = functools.partial

_starters: dict = {}  # kind -> start(name, attributes, parent Context) -> span; a fork keeps them
_names: dict = {}  # (kind, named_callable(fn)) -> (span name, attributes); bounded
_chunk_names: dict = {}  # (id(task attributes), calls) -> (task attributes, chunk span name, its attributes)
_open: dict = {}  # id(span) -> span of tasks running now in this process
_blobs: dict = {}  # (kind, id(Context)) -> (Context, pickled (kind, portable form)): one per submitter context
_received: dict = {}  # (function, pickled context, chunk) -> Task, where they run: one per submitter
_thread_attrs: dict = {}  # (id(attributes), thread name) -> (attributes, attributes + thread.name)


def current():
    """The context to send with a task, or None when instrumentation is suppressed here."""
    ctx = _get_current()
    return ctx if _enabled() else None


def wrap(fn, kind: str, chunk: bool = False):
    """``fn`` as a Task carrying the current context; ``fn`` itself when suppressed or already wrapped.
    ``chunk``: the pool sends the Task with chunks of items, and each chunk runs in one span (see _chunks)."""
    t = type(fn)
    if t is Task:
        return fn
    if t is _partial and type(fn.func) is FunctionType and (fn.func.__module__ or "").startswith(MACHINERY):
        return fn  # the pools' own chunks (partial(_process_chunk, task, ...)), once per item: the short way
    ctx = _get_current()
    if not _enabled() or is_machinery(fn):
        return fn
    return Task(fn, kind, ctx, chunk=chunk)


def is_machinery(fn) -> bool:
    """Does ``fn`` belong to a library's own workings (see MACHINERY) rather than to the user?"""
    return (getattr(named_callable(fn), "__module__", None) or "").startswith(MACHINERY)


def portable(ctx):
    """A picklable form of an OTel Context: its carrier (the configured propagators' dict of str: the
    span, tracestate and baggage), or None."""
    if ctx is None or type(ctx) is dict:
        return ctx
    return propagation.inject(ctx)


def restore(carried):
    """The OTel Context of a carrier (the parent span as a remote span context, and the baggage)."""
    global _last
    if carried is None:
        return _EMPTY
    last = _last
    if carried == last[0]:  # tasks of one submitter arrive in a row: one Context serves them all
        return last[1]
    ctx = propagation.extract(carried)
    _last = (carried, ctx)
    return ctx


def _blob(kind: str, parent) -> bytes:
    """What a Task pickles besides its function: (kind, portable context), pickled once per context."""
    if type(parent) is not _Context:
        return pickle.dumps((kind, portable(parent)), pickle.HIGHEST_PROTOCOL)
    key = (kind, id(parent))
    hit = _blobs.get(key)
    if hit is not None and hit[0] is parent:
        return hit[1]
    blob = pickle.dumps((kind, portable(parent)), pickle.HIGHEST_PROTOCOL)
    if len(_blobs) > 256:
        _blobs.clear()
    _blobs[key] = (parent, blob)
    return blob


def _rebuild(fn, blob: bytes, chunk: bool = False):
    """The Task again, in the process that runs it. Tasks of one function from one submitter context
    (imap's items, a map's chunks) are one Task here, so its context and name are worked out once."""
    try:
        if type(fn) is FunctionType or type(fn) is BuiltinFunctionType:  # long-lived: safe to keep
            key = (fn, blob, chunk)
            task = _received.get(key)
            if task is None:
                if len(_received) > 256:
                    _received.clear()
                kind, carried = pickle.loads(blob)
                task = _received[key] = Task(fn, kind, carried, blob, chunk)
            return task
        kind, carried = pickle.loads(blob)
        return Task(fn, kind, carried, blob, chunk)
    except Exception as exc:  # evlog's own failure: the function runs untraced
        notices.warn_once("task-rebuild", f"cannot restore a task's context, tasks run untraced: {exc!r}")
        return fn


class Task:
    """A user's function with the submitter's context; calling it runs the function in a task span."""

    __slots__ = ("fn", "kind", "parent", "carried", "how", "chunk", "sent")

    def __init__(self, fn, kind: str, parent, carried=_NOT_YET, chunk: bool = False):
        self.fn = fn
        self.kind = kind
        self.parent = parent  # an OTel Context (same process) or its carrier (after pickling)
        self.carried = carried  # the pickled (kind, portable form), made once (imap pickles one Task per item)
        self.how = None  # (span name, attributes, start) once known
        self.chunk = chunk  # sent with chunks of items: a pool's chunk function runs each chunk in one span
        self.sent = 0  # items sent so far in chunks (where ProcessPoolExecutor.map submits them: _chunks.number)

    def __reduce__(self):
        carried = self.carried
        if carried is _NOT_YET:
            carried = self.carried = _blob(self.kind, self.parent)
        # fn first: if it does not pickle, pickling fails exactly where and how it would without evlog.
        return _rebuild, (self.fn, carried, True) if self.chunk else (self.fn, carried)

    def __repr__(self):
        return f"<evlog task {self.fn!r}>"

    def __call__(self, *args, **kwargs):
        try:
            how = self.how
            if how is None:
                span, token = begin(self)
            else:  # the usual case, begin's last steps inline: a task of a process pool seen before
                parent = self.parent
                span = how[2](how[0], how[1], parent)
                _open[id(span)] = span
                token = _attach(_set_span(span, parent))
        except Exception as exc:  # evlog's own failure: run the task untraced
            notices.warn_once("task-span", f"cannot start a task span, tasks run untraced: {exc!r}")
            return self.fn(*args, **kwargs)
        try:
            return self.fn(*args, **kwargs)
        except BaseException as exc:
            failed(span, exc)
            raise
        finally:
            end(span, token)


def begin(task: Task, calls: int = 0):
    """Start the task's span (a chunk span of ``calls`` calls if given) and make it current."""
    parent = task.parent
    if type(parent) is not _Context:
        parent = task.parent = restore(parent)
    how = task.how
    if how is None:
        how = _how(task)
    name, attrs, start = how
    if calls:
        name, attrs = _describe_chunk(task.kind, name, attrs, calls)
    if start is None:  # a thread kind: its thread's name; or a starter not settled yet
        kind = task.kind
        if kind in THREAD_KINDS:
            attrs = _with_thread_name(attrs)
        start = _starters.get(kind) or _starter(kind)
    span = start(name, attrs, parent)
    _open[id(span)] = span
    return span, _attach(_set_span(span, parent))


def _with_thread_name(attrs: dict) -> dict:
    """attrs + thread.name, one dict per (attributes, thread) shared by its tasks, read-only as attrs are
    (so the exporters format it once)."""
    thread = threading.current_thread().name
    key = (id(attrs), thread)
    hit = _thread_attrs.get(key)
    if hit is not None and hit[0] is attrs:
        return hit[1]
    if len(_thread_attrs) > 1024:
        _thread_attrs.clear()
    with_name = {**attrs, "thread.name": thread}
    _thread_attrs[key] = (attrs, with_name)
    return with_name


def _how(task: Task) -> tuple:
    name, attrs = _describe(task.kind, task.fn)
    start = None if task.kind in THREAD_KINDS else _starters.get(task.kind)
    how = (name, attrs, start)
    if start is not None:  # settled for this process (and no per-thread attribute): kept on the task
        task.how = how
    return how


def end(span, token) -> None:
    try:
        _detach(token)
        if _open.pop(id(span), None) is not None:
            span.end()
    except Exception as exc:
        notices.warn_once("task-span-end", f"cannot end a task span: {exc!r}")


_profile_ends_tasks(end.__code__)  # a sample taken here (detaching the task's context) is not the task's


def failed(span, exc: BaseException) -> None:
    """In evlog's frame that caught ``exc``: leave evlog's frames out of its traceback (the pool shows
    the traceback it shows without evlog), then record ``exc`` on ``span`` (if any)."""
    strip_own_frames(exc)
    if span is not None:
        record_failure(span, exc)


_OWN_MODULES = (__name__, __name__.rpartition(".")[0] + ".chunks")  # frames a task's traceback leaves out


def strip_own_frames(exc: BaseException) -> None:
    """Take evlog's frames (the one that caught ``exc`` and any of its callers') off the front of its
    traceback."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_globals.get("__name__") in _OWN_MODULES:
        tb = tb.tb_next
    exc.__traceback__ = tb


def record_failure(span, exc: BaseException, attributes: dict | None = None) -> None:
    """ERROR status and an ``exception`` event (with ``attributes``) on ``span``."""
    try:
        if isinstance(exc, SystemExit) and exc.code in (0, None):
            return  # a clean sys.exit() in a process target is not a failure
        try:
            text = f"{type(exc).__name__}: {exc}"
        except Exception:
            text = type(exc).__name__
        span.set_status(Status(StatusCode.ERROR, text))
        span.record_exception(exc, attributes, escaped=True)
    except Exception as err:
        notices.warn_once("task-span-fail", f"cannot record a task's exception: {err!r}")


def _starter(kind: str):
    """How this process starts spans of this kind: as records when the tracer provider is evlog's (which
    is not built for them), with the default consumers then installed."""
    scope = KINDS[kind][1]
    if _taskspan.usable(trace.get_tracer_provider()):
        from evlog.observed import default_consumers

        default_consumers.install()
        start = _starters[kind] = functools.partial(_taskspan.start, scope)
        return start
    tracer = trace.get_tracer(scope)

    def start(name, attrs, parent):
        return tracer.start_span(name, parent, kind=trace.SpanKind.CONSUMER, attributes=attrs)

    if not isinstance(tracer, trace.ProxyTracer):  # a proxy: ask again once a provider is set
        _starters[kind] = start
    return start


def named_callable(fn):
    """The object that names ``fn``: the function under partials, bound methods and
    ``partial(context.run, f, ...)`` (asyncio.to_thread's form), else its type.

    Module-level and long-lived, so caching on it neither grows per call nor keeps the task's data alive.
    """
    while isinstance(fn, functools.partial):
        inner = fn.func
        if isinstance(getattr(inner, "__self__", None), contextvars.Context) and fn.args:
            fn = fn.args[0]  # partial(ctx.run, f, *args) runs f
        else:
            fn = inner
    fn = getattr(fn, "__func__", fn)
    return fn if isinstance(getattr(fn, "__qualname__", None), str) else type(fn)


def function_names(fn) -> tuple[str, str]:
    """(qualified name, module-qualified name) of any callable: functions, methods, partials, objects."""
    fn = named_callable(fn)
    qual = fn.__qualname__
    module = getattr(fn, "__module__", None)
    if module == "__mp_main__":  # the main script as spawn and forkserver children import it
        module = "__main__"
    return qual, f"{module}.{qual}" if isinstance(module, str) and module else qual


def _describe(kind: str, fn):
    try:
        key = (kind, named_callable(fn))
        hit = _names.get(key)
    except TypeError:  # an unhashable callable type
        key, hit = None, None
    if hit is not None:
        return hit
    qual, full = function_names(fn)
    hit = (f"{KINDS[kind][0]} {qual}", {"code.function.name": full, "evlog.pool.kind": kind})
    if key is not None:
        if len(_names) > 4096:
            _names.clear()
        _names[key] = hit
    return hit


def _describe_chunk(kind: str, name: str, attrs: dict, calls: int):
    """(span name, attributes) of a chunk span from its task span's: ``{prefix}.chunk {function}``,
    with ``evlog.pool.calls``; one dict per (function, calls), read-only as the task span's."""
    key = (id(attrs), calls)
    hit = _chunk_names.get(key)
    if hit is None or hit[0] is not attrs:
        if len(_chunk_names) > 4096:
            _chunk_names.clear()
        hit = _chunk_names[key] = (attrs, f"{KINDS[kind][2]} {name.partition(' ')[2]}",
                                   {**attrs, "evlog.pool.calls": calls})
    return hit[1], hit[2]


def end_open_spans() -> None:
    """Before the exit flush: end the spans of tasks cut short by the exit, as errors."""
    while _open:
        try:
            _, span = _open.popitem()
        except KeyError:
            return
        try:
            # A SIGTERM handler runs between two bytecodes of the task: if it was inside this span's
            # lock (setting an attribute), leave the span rather than wait for a lock that never frees.
            lock = getattr(span, "_lock", None)
            if lock is not None:
                if not lock.acquire(timeout=0.2):
                    continue
                lock.release()
            span.set_status(Status(StatusCode.ERROR, "the process exited while the task was running"))
            span.end()
        except Exception as exc:
            notices.warn_once("task-span-exit", f"cannot end a running task's span at exit: {exc!r}")


def _after_fork_in_child() -> None:
    _open.clear()  # the parent's running tasks are not this process's


def _register_exit_hook() -> None:
    import os

    try:
        from evlog.observed import lifecycle

        lifecycle.before_flush(end_open_spans)
    except Exception as exc:
        notices.warn_once("task-exit-hook", f"running tasks' spans will not be ended at exit: {exc!r}")
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)


_register_exit_hook()
