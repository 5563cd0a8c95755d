"""concurrent.futures: one span per call of the user's function in ThreadPoolExecutor and ProcessPoolExecutor.

Telemetry: span ``futures.task {function}`` (attributes code.function.name, evlog.pool.kind = thread |
process, thread.name for threads; ERROR status and an exception event on failure), in the thread or
worker process that ran the call, child of the span current at ``submit()``/``map()``.

Context travels inside the submitted callable (``_context.Task``): as the Context object to a thread,
pickled as a few ids to a worker process (any start method). ``ProcessPoolExecutor.map`` wraps the
function itself, not its chunks; the pool's own machinery (manager thread, queue feeder, worker loop)
is never wrapped. Importing concurrent.futures also switches on
context propagation for plain threads (threads.py). The thread and process modules are patched only
once something imports them.

With EVLOG_POOL_SPANS=chunk (the default; read once per process),
``ProcessPoolExecutor.map(..., chunksize > 1)`` marks its Task as chunked, ``submit`` numbers each
chunk map submits (``_chunks.number``), and the module global ``_process_chunk`` (what each chunk runs
in the worker, pickled by reference) is replaced by ``_chunks.runner``: one span
``futures.chunk {function}`` per chunk with its calls' count and timing, the function called per item
without a span of its own. With EVLOG_POOL_SPANS=call every call gets a task span.
"""
from __future__ import annotations

import wrapt
from opentelemetry.instrumentation.utils import unwrap

from evlog import config, notices
from evlog.observed.import_hooks import when_imported
from evlog.observed.pools import chunks as _chunks
from evlog.observed.pools import context as _context
from evlog.observed.pools.threads import ThreadsInstrumentor


def _submit(kind: str):
    def submit(wrapped, instance, args, kwargs):
        if args:  # map's chunks, partial(_process_chunk, task), are the pool's own: wrap() leaves them
            try:
                fn = _chunks.number(args[0], args[1]) if len(args) == 2 and kind == "process" else args[0]
                args = (_context.wrap(fn, kind),) + args[1:]
            except Exception as exc:
                notices.warn_once("futures-submit", f"cannot trace submitted tasks: {exc!r}")
        return wrapped(*args, **kwargs)

    return submit


def _process_map(chunks: bool):
    """ProcessPoolExecutor.map's wrapper; ``chunks``: a chunk of more than one item gets one span."""
    def process_map(wrapped, instance, args, kwargs):
        if args:
            try:
                size = kwargs.get("chunksize", 1)
                chunk = chunks and type(size) is int and size > 1
                args = (_context.wrap(args[0], "process", chunk),) + args[1:]
            except Exception as exc:
                notices.warn_once("futures-map", f"cannot trace mapped tasks: {exc!r}")
        return wrapped(*args, **kwargs)

    return process_map


class FuturesInstrumentor:
    """Patches ThreadPoolExecutor.submit, ProcessPoolExecutor.submit and ProcessPoolExecutor.map."""

    def __init__(self):
        self._on = False

    def instrument(self) -> None:
        if self._on:
            return
        self._on = True
        ThreadsInstrumentor.acquire()
        when_imported("concurrent.futures.thread", self._patch_thread)
        when_imported("concurrent.futures.process", self._patch_process)

    def uninstrument(self) -> None:
        if not self._on:
            return
        self._on = False
        ThreadsInstrumentor.release()
        unwrap("concurrent.futures.thread.ThreadPoolExecutor", "submit")
        unwrap("concurrent.futures.process.ProcessPoolExecutor", "submit")
        unwrap("concurrent.futures.process.ProcessPoolExecutor", "map")
        import concurrent.futures.process

        _chunks.remove_runner(concurrent.futures.process, "_process_chunk")

    def _patch_thread(self, module) -> None:
        try:
            if self._on and not _ours(module.ThreadPoolExecutor, "submit"):
                wrapt.wrap_function_wrapper(module.ThreadPoolExecutor, "submit", _submit("thread"))
        except Exception as exc:
            notices.warn_once("futures-thread", f"ThreadPoolExecutor is not traced: {exc!r}")

    def _patch_process(self, module) -> None:
        try:
            if self._on and not _ours(module.ProcessPoolExecutor, "submit"):
                chunks = config.get().pool_spans == "chunk"
                wrapt.wrap_function_wrapper(module.ProcessPoolExecutor, "submit", _submit("process"))
                wrapt.wrap_function_wrapper(module.ProcessPoolExecutor, "map", _process_map(chunks))
                if chunks:
                    _chunks.install_runner(module, "_process_chunk", packed=False)
        except Exception as exc:
            notices.warn_once("futures-process", f"ProcessPoolExecutor is not traced: {exc!r}")


def _ours(cls, name: str) -> bool:
    """Is cls.name already our wrapper? (instrument() after uninstrument() registers the hooks again.)"""
    wrapper = getattr(cls.__dict__.get(name), "_self_wrapper", None)
    return getattr(wrapper, "__module__", None) == __name__
