"""One span per chunk of a chunked pool map (EVLOG_POOL_SPANS=chunk, the default), its calls timed.

A map that sends its items in chunks (multiprocessing's ``map``/``starmap`` and their async forms,
``imap``/``imap_unordered`` with chunksize > 1, ``ProcessPoolExecutor.map`` with chunksize > 1) wraps
its function as a chunk Task (``_context.wrap(..., chunk=True)``). Each chunk it sends carries a
``Chunk``: that Task and the index of the chunk's first item in the map, counted where the chunks are
made (``numbered``: multiprocessing's ``Pool._get_tasks``; ``number``: each chunk that
``ProcessPoolExecutor.map`` submits). A Chunk pickles as the Task does, plus that index.

Where the chunk runs, the pool's chunk function (``mapstar``, ``starmapstar``, ``_process_chunk``) is
``runner``'s stand-in: one span ``{prefix}.chunk {function}`` for the chunk, the function called item by
item through the original chunk function (so a traceback shows the frames it shows without evlog), and
the calls timed:
- calls of GROUP_NS or more are timed one by one; faster ones in groups of about GROUP_NS, the group
  growing (at most GROWTH times) as its calls prove fast, one clock reading per group, never per item
  (timing each of a trivial map's calls would cost more than the calls: 0.45 of plain throughput);
- the span gets ``evlog.pool.calls`` (calls made), ``evlog.pool.chunk.first``, the calls' mean, min
  and max seconds, and the slowest call's index (``evlog.pool.call.slowest_index``; with
  ``evlog.pool.call.slowest_calls`` > 1 it is the first of that many calls timed together, their max
  the group's time less the others' share at the fastest rate seen);
- a call that raises ends the chunk as it does without evlog; the span gets ERROR and an ``exception``
  event with ``evlog.pool.call.index``, that call's index (the position the chunk's iterator reached).
A chunk of one item is a call sent alone: it gets the task span a call gets (``_context.Task``).
"""
from __future__ import annotations

import functools
import itertools
from operator import itemgetter, length_hint
from time import perf_counter_ns as _clock

from evlog import notices
from evlog.observed.pools import context as _context
from evlog.observed.pools.context import Task

GROUP_NS = 20_000  # calls that take this long are timed alone; faster ones in groups of about this long
GROWTH = 4  # a group is at most this many times the size of the one before
_second = itemgetter(1)


class Chunk:
    """A chunk Task and the index of the chunk's first item in its map (None: not known)."""

    __slots__ = ("task", "first")

    def __init__(self, task, first):
        self.task = task
        self.first = first

    def __reduce__(self):
        _, (fn, carried, *_) = self.task.__reduce__()
        return _rebuild_chunk, (fn, carried, self.first)

    def __repr__(self):
        return f"<evlog chunk {self.first} of {self.task!r}>"

    def __call__(self, *args, **kwargs):
        """In a worker whose chunk function is the pool's own (evlog not set up there): a span per call."""
        try:
            return self.task(*args, **kwargs)
        except BaseException as exc:
            _context.strip_own_frames(exc)
            raise


def _rebuild_chunk(fn, blob: bytes, first):
    return Chunk(_context._rebuild(fn, blob, True), first)


def numbered(task: Task, chunks):
    """multiprocessing's chunks ``(task, items), ...`` as ``(Chunk(task, first), items), ...``. Made of
    C iterators, so an error of the user's iterable shows no frame of evlog's."""
    a, b = itertools.tee(chunks)
    firsts = itertools.accumulate(map(len, map(_second, a)), initial=0)
    return zip(map(Chunk, itertools.repeat(task), firsts), map(_second, b))


def number(fn, items):
    """One chunk that ProcessPoolExecutor.map submits, ``partial(_process_chunk, task)``, with its Chunk;
    ``fn`` itself when it is not a chunk Task's. Executor.map submits its chunks in order."""
    if type(fn) is not functools.partial or not fn.args or type(fn.args[0]) is not Task or not fn.args[0].chunk:
        return fn
    task = fn.args[0]
    first = task.sent
    task.sent = first + len(items)
    return functools.partial(fn.func, Chunk(task, first), *fn.args[1:], **fn.keywords)


def runner(original, packed: bool):
    """A stand-in for a pool's chunk function ``original``: multiprocessing.pool's ``mapstar`` and
    ``starmapstar`` (``packed``: called with one ``(function, items)`` tuple) or concurrent.futures'
    ``_process_chunk`` (called with ``function, items``). A chunk of a chunk Task runs in one chunk
    span, its calls timed (see the module's docstring); any other chunk goes to ``original`` as it
    came. Either way no frame of evlog's is left in a traceback.

    A plain function under the original's module and name: pickle sends it by reference (the worker
    gets its own module's, the stand-in where evlog has set it up, else the original, whose Chunks make
    a task span per call)."""

    def run(*args):
        span = None
        try:
            head = args[0][0] if packed else args[0]
            if type(head) is Chunk:
                task, first = head.task, head.first
            elif type(head) is Task and head.chunk:  # chunks not numbered (no Pool._get_tasks)
                task, first = head, None
            else:
                return original(*args)
            items = args[0][1] if packed else args[1]
            if type(items) is not tuple and type(items) is not list:
                items = tuple(items)
            if type(task) is not Task or len(items) < 2:  # sent alone: the call's own task span
                return original((task, items)) if packed else original(task, items)
            fn = task.fn
            try:
                span, token = _context.begin(task, len(items))
            except Exception as exc:  # evlog's own failure: the chunk runs untraced
                notices.warn_once("task-span", f"cannot start a task span, tasks run untraced: {exc!r}")
                return original((fn, items)) if packed else original(fn, items)
            n = len(items)
            it = iter(items)  # its length hint says how many calls were made, also when one raises
            marks, sizes = [], []  # when each group of calls started, and its size
            feed = itertools.chain.from_iterable(_paced(it, n, marks, sizes))
            try:
                out = original((fn, feed)) if packed else original(fn, feed)
            except BaseException as exc:
                marks.append(_clock())
                made = n - length_hint(it)  # the failing call is the last one made
                _chunk_failed(span, exc, first, made - 1)
                _settle(span, marks, sizes, made, first)
                raise
            marks.append(_clock())
            _settle(span, marks, sizes, n, first)
            return out
        except BaseException as exc:
            _context.failed(None, exc)
            raise
        finally:
            if span is not None:
                _context.end(span, token)

    functools.update_wrapper(run, original)
    run.evlog_original = original
    return run


def _paced(it, n: int, marks: list, sizes: list):
    """The chunk's items as groups of calls (islices of ``it``), noting when each group starts, which is
    when the previous one's last call has returned: a group of calls that took GROUP_NS or more (each)
    is followed by groups of one call, a faster one by a group of about GROUP_NS (at most GROWTH times
    as big).
    A generator that runs only between groups, never while a call runs (no frame of it in a traceback)."""
    size = done = 0
    while done < n:
        now = _clock()
        if size:
            per = (now - marks[-1]) // size
            size = 1 if per >= GROUP_NS else min(size * GROWTH, GROUP_NS // (per or 1))
        else:
            size = 1
        marks.append(now)
        sizes.append(size)
        yield itertools.islice(it, size)
        done += size


def _chunk_failed(span, exc: BaseException, first, at: int) -> None:
    """The chunk's call ``at`` (its position in the chunk) raised ``exc``."""
    _context.strip_own_frames(exc)
    _context.record_failure(span, exc, None if first is None else {"evlog.pool.call.index": first + at})


def _settle(span, marks: list, sizes: list, calls: int, first) -> None:
    """Put the count and timing of the chunk's ``calls`` calls on its span (see the module's docstring);
    ``marks``: when each group started, and the end."""
    try:
        if not calls or len(marks) < 2:
            return
        groups = []  # (ns, calls) of each group, the last one cut to the calls made
        left = calls
        for i, size in enumerate(sizes):
            k = min(size, left)
            groups.append((marks[i + 1] - marks[i], k))
            left -= k
        fastest = min(ns / k for ns, k in groups if k)
        slowest, at, of, start = -1.0, 0, 1, 0
        for ns, k in groups:
            guess = ns - (k - 1) * fastest  # the others at the fastest rate seen: the rest is the slowest's
            if k and guess > slowest:
                slowest, at, of = guess, start, k
            start += k
        attrs = {"evlog.pool.calls": calls, "evlog.pool.call.mean": (marks[-1] - marks[0]) / calls / 1e9,
                 "evlog.pool.call.min": fastest / 1e9, "evlog.pool.call.max": slowest / 1e9,
                 "evlog.pool.call.slowest_calls": of}
        if first is not None:
            attrs["evlog.pool.chunk.first"] = first
            attrs["evlog.pool.call.slowest_index"] = first + at
        getattr(span, "set_checked_attributes", span.set_attributes)(attrs)  # a TaskSpan's, else the API's
    except Exception as exc:
        notices.warn_once("chunk-timing", f"cannot put a chunk's call timing on its span: {exc!r}")


def install_runner(module, name: str, packed: bool) -> None:
    """Set ``module.name`` (a pool's chunk function) to its runner (once)."""
    current = getattr(module, name)
    if getattr(current, "evlog_original", None) is None:
        setattr(module, name, runner(current, packed))


def remove_runner(module, name: str) -> None:
    """Put back the chunk function that install_runner replaced."""
    original = getattr(getattr(module, name, None), "evlog_original", None)
    if original is not None:
        setattr(module, name, original)
