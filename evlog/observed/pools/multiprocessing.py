"""multiprocessing: one span per call of the user's function in Pool, ThreadPool and Process.

Telemetry: span ``multiprocessing.task {function}`` (attributes code.function.name, evlog.pool.kind =
mp.pool | mp.threadpool | mp.process, thread.name for ThreadPool; ERROR status and an exception event
on failure), in the process (or ThreadPool thread) that ran the call, child of the span current where
the work was submitted: ``Pool.apply_async/_map_async/imap/imap_unordered`` (so apply, map, starmap and
their async forms) or ``Process.start()``.

Context travels inside the callable (``_context.Task``): pickled as a few ids for fork, spawn and
forkserver alike. Pool chunks are not wrapped, their function is.
For ``Process``, ``start()`` leaves the context on the process object (pickled with it under spawn and
forkserver) and the child wraps ``target`` (or an overridden ``run``) just before running it.
Processes that pools, managers and Dask start for themselves get nothing.

With EVLOG_POOL_SPANS=chunk (the default; read once per process), the methods that send chunks
(``_map_async`` unless chunksize=1, ``imap``/``imap_unordered`` with chunksize > 1) mark their Task as
chunked; ``Pool._get_tasks``, which cuts their items into chunks, numbers each chunk
(``_chunks.numbered``); and the pool's chunk functions, the module globals ``mapstar`` and
``starmapstar``, are replaced by ``_chunks.runner``: one span ``multiprocessing.chunk {function}`` per
chunk with its calls' count and timing, the function called per item without a span of its own (a
chunk of one item gets a task span). Workers get the replacement by inheritance (fork) or from this
module's hook (spawn, forkserver). With EVLOG_POOL_SPANS=call every call gets a task span.

Nothing is lost at shutdown: spans end when the function returns, before the result goes back, and
every way a worker leaves flushes (evlog.observed.lifecycle): the sentinel (normal exit or
``os._exit``), and the SIGTERM of ``Pool.terminate()`` / ``Pool.__exit__``, which reaches a worker
blocked on the task queue (the lock and the pipe read are interrupted and run the handler).

A Python-level SIGTERM handler can miss a worker blocked on the queue (see _sigterm.py): every fork
and every child is guarded so that SIGTERM always ends it, as it does without evlog.
"""
from __future__ import annotations

import multiprocessing.process as _mp_process
import operator

import wrapt
from opentelemetry.instrumentation.utils import unwrap

from evlog import config, notices
from evlog.observed.import_hooks import when_imported
from evlog.observed.pools import chunks as _chunks
from evlog.observed.pools import context as _context
from evlog.observed.pools.sigterm import SigtermGuard
from evlog.observed.pools.threads import ThreadsInstrumentor

_PARENT = "_evlog_parent"  # on a Process object between start() in the parent and run in the child
_POOL_METHODS = ("apply_async", "_map_async", "imap", "imap_unordered")
# The methods that send chunks: where their chunksize is among the arguments (after self), its default
_CHUNKSIZE = {"_map_async": (3, None), "imap": (2, 1), "imap_unordered": (2, 1)}
_CHUNK_FUNCTIONS = ("mapstar", "starmapstar")
_CUTTER = "_get_tasks"  # Pool's static method that cuts a map's items into chunks


def _pool_submit(thread_pool: type, chunksize=None):
    """The wrapper of a Pool method; ``chunksize``: (position, default) of the method's chunksize when
    its chunks get one span each (EVLOG_POOL_SPANS=chunk), else None."""
    def submit(wrapped, instance, args, kwargs):
        kind = "mp.threadpool" if isinstance(instance, thread_pool) else "mp.pool"
        return _submit(wrapped, kind, args, kwargs, chunksize is not None and _sends_chunks(args, kwargs, *chunksize))

    return submit


def _sends_chunks(args, kwargs, at: int, default) -> bool:
    """Does this call send its items in chunks (chunksize None, the pool's choice, or more than 1)?"""
    size = args[at] if len(args) > at else kwargs.get("chunksize", default)
    try:
        return size is None or operator.index(size) > 1
    except TypeError:  # the pool's own error to raise
        return False


def _submit(wrapped, kind: str, args, kwargs, chunk: bool = False):
    try:
        if args:
            args = (_context.wrap(args[0], kind, chunk),) + args[1:]
        elif "func" in kwargs:
            kwargs = {**kwargs, "func": _context.wrap(kwargs["func"], kind, chunk)}
    except Exception as exc:
        notices.warn_once("mp-pool", f"cannot trace pool tasks: {exc!r}")
    return wrapped(*args, **kwargs)


def _process_start(wrapped, instance, args, kwargs):
    try:
        ctx = _context.current()
        if ctx is not None and not _machinery(instance):
            instance.__dict__[_PARENT] = _context.portable(ctx)
    except Exception as exc:
        notices.warn_once("mp-process", f"cannot trace multiprocessing.Process: {exc!r}")
    try:
        return wrapped(*args, **kwargs)
    finally:
        instance.__dict__.pop(_PARENT, None)  # started: the child has its copy


def _process_bootstrap(wrapped, instance, args, kwargs):
    SigtermGuard.watch()  # every child, pool workers included: terminate() must always end it
    d = instance.__dict__
    if _PARENT in d:
        try:
            carried = d.pop(_PARENT)
            if type(instance).run is _mp_process.BaseProcess.run:
                if instance._target is not None:
                    instance._target = _context.Task(instance._target, "mp.process", carried)
            else:
                instance.run = _context.Task(instance.run, "mp.process", carried)
        except Exception as exc:
            notices.warn_once("mp-process-child", f"cannot trace a multiprocessing.Process: {exc!r}")
    return wrapped(*args, **kwargs)


def _machinery(process) -> bool:
    """Is this a process a library starts for itself (a pool worker, a manager, a Dask worker)?"""
    return _context.is_machinery(process._target if process._target is not None else type(process).run)


class MultiprocessingInstrumentor:
    """Patches BaseProcess.start/_bootstrap and, once multiprocessing.pool is imported, Pool."""

    def __init__(self):
        self._on = False

    def instrument(self) -> None:
        if self._on:
            return
        self._on = True
        ThreadsInstrumentor.acquire()
        SigtermGuard.enable()
        wrapt.wrap_function_wrapper(_mp_process.BaseProcess, "start", _process_start)
        wrapt.wrap_function_wrapper(_mp_process.BaseProcess, "_bootstrap", _process_bootstrap)
        when_imported("multiprocessing.pool", self._patch_pool)

    def uninstrument(self) -> None:
        if not self._on:
            return
        self._on = False
        ThreadsInstrumentor.release()
        SigtermGuard.disable()
        unwrap(_mp_process.BaseProcess, "start")
        unwrap(_mp_process.BaseProcess, "_bootstrap")
        for name in _POOL_METHODS:
            unwrap("multiprocessing.pool.Pool", name)
        import multiprocessing.pool

        for name in _CHUNK_FUNCTIONS:
            _chunks.remove_runner(multiprocessing.pool, name)
        _unnumber(multiprocessing.pool.Pool)

    def _patch_pool(self, module) -> None:
        try:
            if self._on and not _ours(module.Pool, _POOL_METHODS[0]):
                chunks = config.get().pool_spans == "chunk"
                for name in _POOL_METHODS:
                    where = _CHUNKSIZE.get(name) if chunks else None
                    wrapt.wrap_function_wrapper(module.Pool, name, _pool_submit(module.ThreadPool, where))
                if chunks:
                    for name in _CHUNK_FUNCTIONS:
                        _chunks.install_runner(module, name, packed=True)
                    _number(module.Pool)
        except Exception as exc:
            notices.warn_once("mp-pool-patch", f"multiprocessing.Pool is not traced: {exc!r}")


def _numbered(wrapped, instance, args, kwargs):
    """Pool._get_tasks(func, iterable, size): the chunks of a chunk Task numbered (see _chunks)."""
    chunks = wrapped(*args, **kwargs)
    task = args[0] if args else kwargs.get("func")
    if type(task) is _context.Task and task.chunk:
        return _chunks.numbered(task, chunks)
    return chunks


def _number(pool_class) -> None:
    """Number the chunks Pool._get_tasks cuts, where this Python has it (3.10 to 3.14 do): without it
    chunk spans carry no item index."""
    original = pool_class.__dict__.get(_CUTTER)
    if isinstance(original, staticmethod):  # not yet wrapped (a wrapper is a wrapt.FunctionWrapper)
        _saved[pool_class] = original
        wrapt.wrap_function_wrapper(pool_class, _CUTTER, _numbered)


def _unnumber(pool_class) -> None:
    original = _saved.pop(pool_class, None)
    if original is not None:
        setattr(pool_class, _CUTTER, original)  # the staticmethod itself (unwrap would leave its function)


_saved: dict = {}  # Pool -> its own _get_tasks (a staticmethod) while numbered


def _ours(cls, name: str) -> bool:
    """Is cls.name already our wrapper? (instrument() after uninstrument() registers the hook again.)"""
    wrapper = getattr(cls.__dict__.get(name), "_self_wrapper", None)
    return getattr(wrapper, "__module__", None) == __name__
