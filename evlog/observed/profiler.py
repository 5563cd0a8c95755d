"""The sampling profiler of an observed process: where each task span's thread spends its time.

A task span tells the profiler when its thread starts and stops running it (``enter`` / ``leave``, from
dask_worker.run_task and _taskspan); between the two, a thread of this process (``evlog-profile``,
started at the first task) reads the thread's stack every EVLOG_PROFILE_INTERVAL (default 10 ms; ``off``:
no thread at all). One ``sys._current_frames()`` per tick, and only when some thread is inside a task
span; a stack is walked up to the frame that started the task (the instrumentation's wrapper), so what
is kept is the task's own code. A tick that takes more than a tenth of the interval makes the sampler
skip ticks in proportion (counted), so it never holds the GIL for more than about a tenth of the time.

What a tick keeps is one tuple per sampled thread, appended to this process's records (evlog.observed.records);
the shipping thread folds them into a frame table and counts per task span and stack
(profile_records), and the run's exporter process encodes them (evlog/builders/profiles.py). At the
end of a task ``leave`` gives the task's hottest functions by self samples, which the task span carries
as ``evlog.profile.top`` (its record is built elsewhere; the join is here, in the thread that ran it,
so the attribute never waits for profile records to arrive).

Samples are wall-clock: a task thread waiting on I/O or a lock is sampled where it waits.
"""
from __future__ import annotations

import os
import sys
import threading
import time

from evlog import notices
from evlog.wire.profile_records import KIND, Rec, Task

TOP = 3  # functions named in evlog.profile.top
MAX_FRAMES = 1 << 16  # frame-table entries before the table starts anew (code objects are kept alive by it)
_get_ident = threading.get_ident
_active: dict = {}  # thread ident -> the Slot of the task span it runs now
_sampler: list = []  # [Sampler or None once decided]
_lock = threading.Lock()
# Code that ends a task span, run by the frame that started the task before the span leaves the
# profiler (a pool task span's end()): a sample taken there is evlog's bookkeeping, not the task.
# The sampler's GIL request is often granted at that call, right after the task's function returns.
_ENDING: set = set()


def ends_tasks(code) -> None:
    """``code`` ends task spans (see _ENDING): samples whose outermost kept frame it is are not taken."""
    _ENDING.add(code)


class Slot:
    """One task span as the sampler sees it, while its thread runs it."""

    __slots__ = ("kind", "label", "trace_id", "span_id", "thread", "stop", "leaf", "prev")

    def __init__(self, kind, label, trace_id, span_id, thread, stop, prev):
        self.kind = kind
        self.label = label
        self.trace_id = trace_id
        self.span_id = span_id
        self.thread = thread
        self.stop = stop  # the frame that started the task: stacks are cut there
        self.leaf = {}  # code -> samples with it at the top of the stack (its self samples)
        self.prev = prev  # a task span this thread was already in (nested), restored at leave


def enter(kind: int, label: str, trace_id: int, span_id: int, stop_frame) -> Slot | None:
    """The calling thread runs this task span from now on (until ``leave``); None when profiling is off."""
    s = _sampler[0] if _sampler else _start()
    if s is None:
        return None
    try:
        ident = _get_ident()
        slot = Slot(kind, label, trace_id, span_id, ident, stop_frame, _active.get(ident))
        _active[ident] = slot
        return slot
    except Exception as exc:  # never into the task
        notices.warn_once("profile-enter", f"a task could not be profiled: {exc!r}")
        return None


def leave(slot: Slot | None) -> str | None:
    """The task span of ``slot`` has ended on this thread: its ``evlog.profile.top`` value, or None when
    it got no sample."""
    if slot is None:
        return None
    try:
        ident = slot.thread
        if _active.get(ident) is slot:
            if slot.prev is not None:
                _active[ident] = slot.prev
            else:
                del _active[ident]
        slot.stop = slot.prev = None  # the task's frame (and its arguments) need not outlive it
        leaf = slot.leaf
        return top_text(leaf) if leaf else None
    except Exception as exc:  # never into the task's own outcome
        notices.warn_once("profile-leave", f"a task's profile could not be read: {exc!r}")
        return None


def leave_span(span_id: int) -> str | None:
    """``leave`` for the task span ``span_id`` this thread is in (for callers that keep no slot)."""
    if not _active:
        return None
    slot = _active.get(_get_ident())
    if slot is None or slot.span_id != span_id:
        return None
    return leave(slot)


def top_text(leaf: dict) -> str:
    """``"slow_parse_inner 91%, json.loads 6%"``: the task's hottest functions by their share of its samples."""
    items = sorted(list(leaf.items()), key=_second, reverse=True)  # list(): one step, while the sampler adds
    total = sum(n for _, n in items)
    return ", ".join(f"{_name(code)} {round(100 * n / total)}%" for code, n in items[:TOP])


def _second(item):
    return item[1]


def _name(code) -> str:
    return getattr(code, "co_qualname", code.co_name)


def stats() -> dict:
    """What this process's sampler did so far (the cost benchmark reads it): ticks, samples, skipped
    ticks, and its CPU seconds; empty when it has not started."""
    s = _sampler[0] if _sampler else None
    if s is None:
        return {}
    return {"interval": s.interval, "ticks": s.ticks, "samples": s.samples, "skipped": s.skipped, "cpu_s": s.cpu}


def start():
    """Start this process's sampler now rather than at its first task (a Dask process starts evlog's
    threads with the instrumentation: Dask's tests count the threads a test leaves behind)."""
    if not _sampler:
        _start()


def _start():
    with _lock:
        if _sampler:
            return _sampler[0]
        s = None
        try:
            from evlog import config

            interval = config.get().profile_interval
            if interval is not None:
                if not hasattr(sys, "_current_frames"):
                    notices.warn_once("profile-unsupported", "this Python has no sys._current_frames(); "
                                      "tasks are not profiled (EVLOG_PROFILE_INTERVAL)")
                else:
                    s = Sampler(interval)
        except Exception as exc:
            notices.warn_once("profile-start", f"the task profiler could not start: {exc!r}; tasks are not profiled")
            s = None
        _sampler.append(s)
        return s


class Sampler:
    """The sampling thread and this process's profile records (a source of evlog.observed.records)."""

    def __init__(self, interval: float):
        from evlog.observed import records

        self.interval = interval
        self.ticks = self.samples = self.skipped = 0
        self.cpu = 0.0
        self._sent = (0, 0, 0, 0.0)  # (ticks, samples, skipped, cpu) as of the last shipment
        self._since = time.time_ns()
        self._frames: dict = {}  # code -> index in this process's frame table (shipping thread only)
        self._log = records.source(KIND, meta={"interval": interval}, convert=self._convert)
        self._pid = os.getpid()
        self.thread = threading.Thread(target=self._loop, name="evlog-profile", daemon=True)
        self.thread.start()

    # ---- the sampling thread ----------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            self._sample()
        except Exception as exc:  # never into the program; the profile just stops
            notices.warn_once("profile-loop", f"the task profiler stopped: {exc!r}")

    def _sample(self) -> None:
        interval = self.interval
        budget = interval / 10  # a tick may hold the GIL this long; longer ones make later ticks skip
        cap = int(interval * 10e9)  # one sample stands for at most 10 intervals of wall time
        sleep, now_ns, cpu_time = time.sleep, time.perf_counter_ns, time.thread_time
        current_frames = sys._current_frames
        active, append, ending = _active, self._log.append, _ENDING
        pid = self._pid
        last = now_ns()
        skip = 0
        while True:
            sleep(interval)
            if not active:
                last = now_ns()
                continue
            if skip:
                skip -= 1
                continue
            if os.getpid() != pid:
                return
            c0 = cpu_time()
            t = now_ns()
            dt = min(t - last, cap)
            last = t
            n = 0
            frames = current_frames()
            for slot in list(active.values()):
                f = frames.get(slot.thread)
                if f is None:
                    continue
                stop = slot.stop
                codes = []
                while f is not None and f is not stop:
                    codes.append(f.f_code)
                    f = f.f_back
                if not codes or codes[-1] in ending:
                    continue
                leaf = slot.leaf
                top = codes[0]
                leaf[top] = leaf.get(top, 0) + 1
                append((slot, tuple(codes), dt))
                n += 1
            frames = f = None  # the frames dict keeps every thread's frames alive
            cost = cpu_time() - c0
            self.ticks += 1
            self.samples += n
            self.cpu += cost
            if cost > budget:
                skip = int(cost / budget)
                self.skipped += skip

    # ---- the shipping thread (evlog.observed.records) ----------------------------------------------------

    def _convert(self, items: list) -> list:
        """Raw samples -> profile records: new frame-table entries, the interval, counts per task span."""
        per: dict = {}  # slot -> {codes: [samples, ns]}
        for slot, codes, dt in items:
            stacks = per.get(slot)
            if stacks is None:
                stacks = per[slot] = {}
            c = stacks.get(codes)
            if c is None:
                stacks[codes] = [1, dt]
            else:
                c[0] += 1
                c[1] += dt
        table = self._frames
        first = len(table)
        if first + sum(len(c) for s in per.values() for c in s) > MAX_FRAMES:
            table.clear()
            first = 0
        new = []
        out = []
        for slot, stacks in per.items():
            folded = []
            for codes, (n, ns) in stacks.items():
                idx = []
                for code in codes:
                    i = table.get(code)
                    if i is None:
                        i = table[code] = len(table)
                        new.append((_name(code), code.co_filename, code.co_firstlineno))
                    idx.append(i)
                folded.append((tuple(idx), n, ns))
            out.append((Rec.SAMPLES.value, slot.kind, slot.label, slot.trace_id, slot.span_id, slot.thread,
                        tuple(folded)))
        end = time.time_ns()
        sent, now = self._sent, (self.ticks, self.samples, self.skipped, self.cpu)
        self._sent = now
        head = [(Rec.INTERVAL.value, self._since, end, now[0] - sent[0], now[1] - sent[1], now[2] - sent[2],
                 int((now[3] - sent[3]) * 1e9))]
        self._since = end
        if new or first == 0:
            head.insert(0, (Rec.FRAMES.value, first, tuple(new)))
        return head + out


def dask_enter(sc, prefix, stop_frame) -> Slot | None:
    """``enter`` for a Dask task's execute span (its span context ``sc``; None when not sampled)."""
    if sc is None:
        return None
    return enter(Task.DASK.value, prefix, sc.trace_id, sc.span_id, stop_frame)


def _after_fork_in_child() -> None:
    """A forked child has no sampling thread: it starts its own at its first task."""
    global _lock
    _active.clear()
    _sampler.clear()
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
