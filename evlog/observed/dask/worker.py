"""The worker side: one span per execution, one per transfer, structured events.

``Worker.execute`` (the coroutine that runs one task) is wrapped: the span context of the task's
``dask.execute {prefix}`` span (a new span id, child of the client call's span, whose context came with
the task's compute-task message: dask_context) is current while it runs, in the client call's context
(its baggage and tracestate, read by the configured propagators: evlog.propagation), so the executor thread that
runs the task (Dask copies the context into it), the user's spans inside the task, and what Dask logs
about the task (its "Compute Failed" error) are all in the task's trace. ``distributed.worker._run_task``
(what the executor thread runs) is wrapped to call this process's consumers as the task starts and
finishes, in that thread (``LiveSpan``: what a span processor reads of a span), and to append one
tuple after the task (evlog.observed.records); the shipping thread turns it into a record of atoms (with the
task's other startstops, disk-read, disk-write, as span events) and records ``dask.task.duration``, and
the run's exporter process builds the span (dask_executions). (Tasks run by a process-pool executor
are not traced: they run in another process, without the task's key.)

``Worker.gather_dep`` is wrapped the same way for ``dask.transfer`` spans, in the trace of the task
that needed the data; the consumers see a transfer start and end on the worker's event loop.
"""
from __future__ import annotations

import sys
import threading
import time
import weakref
from time import monotonic

from opentelemetry import context as _ctx
from opentelemetry import trace as _trace
from opentelemetry.trace import NonRecordingSpan

from evlog import notices
from evlog.observed import records
from evlog.observed.dask import context as dc
from evlog.observed.dask import spans as ds
from evlog.observed.profiler import dask_enter as _profile_enter  # the task profiler (which thread runs which span)
from evlog.observed.profiler import leave as _profile_leave
from evlog.processors.registry import registry as _registry
from evlog.wire import dask as dx

_attach, _detach = _ctx.attach, _ctx.detach
_in_context = _trace.set_span_in_context
_time = time.time
_time_ns = time.time_ns
_current_thread = threading.current_thread
_getframe = sys._getframe
_histogram: list = []  # the dask.task.duration instrument, made once per process
_transferred = [0]  # bytes received from other workers by this process's workers (a counter)
_context_of = ds.CONTEXTS.get  # carrier -> (Context, parent SpanContext), extracted once per distinct carrier


def _ids(sc) -> tuple | None:
    """A parent in a record: (trace_id, span_id, flags, tracestate header or None)."""
    if sc is None:
        return None
    ts = sc.trace_state
    return sc.trace_id, sc.span_id, int(sc.trace_flags), ts.to_header() if ts else None


class LiveSpan:
    """A task execution or a transfer as this process's consumers see it (the names a span processor reads
    of an SDK span), started and ended where it happens; the exported span is built elsewhere."""

    __slots__ = ("name", "context", "attributes", "start_time", "end_time", "resource")

    def __init__(self, name, context, attributes, resource):
        self.name = name
        self.context = context
        self.attributes = attributes
        self.resource = resource
        self.start_time = _time_ns()
        self.end_time = None

    def get_span_context(self):
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None


_consumers_of: list = [-1, ()]  # (registry version, its span processors) as last looked up


def _consumers() -> tuple:
    if _consumers_of[0] != _registry.version:
        _consumers_of[1] = tuple(_registry.span_processors())
        _consumers_of[0] = _registry.version
    return _consumers_of[1]


def _start(procs, span) -> None:
    for p in procs:
        p.on_start(span, None)


def _end(procs, span) -> None:
    span.end_time = _time_ns()
    for p in procs:
        p.on_end(span)


class WorkerRecorder:
    """Records executions and transfers; the exporter process builds their spans. Not a WorkerPlugin
    (the worker's plugin list stays the user's): one per Worker, kept in ``_recorders``, set up
    when the worker registers with the scheduler (startup_information) and torn down when it closes."""

    def __init__(self, worker):
        self._worker = weakref.ref(worker)
        self.address = None
        self.carriers = dc.WorkerCarriers(worker)
        self.originals: dict = {}
        self._log = records.source(dx.WORKER, convert=self._convert)
        self._append = self._log.append
        self._names: dict = {}  # prefix -> execute span name
        self.begun: dict = {}  # key -> (ts, span context, parent, first startstop) while Worker.execute runs it
        self._resource = None  # this process's resource (its attributes), for the consumers' LiveSpans

    @property
    def worker(self):
        return self._worker()

    def setup(self, worker):
        if self.address == worker.address:
            return
        self.address = worker.address
        from evlog.observed.dask.roles import roles

        roles.add("worker", worker=worker)
        _instruments()

    def teardown(self, worker):
        records.remove(self._log)

    # ---- in the thread that runs the task ----------------------------------------------------------

    def begin(self, worker, key, at_entry: bool = False):
        """(ts, span context, parent, context token, first startstop of this run) for a task about to
        run: its execute span becomes the current span, as a child of the client call's span from
        the task's annotation. No span context when the task is gone or its trace is not sampled.
        ``at_entry``: called as Worker.execute starts, before it reads the task's data from disk."""
        ts = worker.state.tasks.get(key)
        if ts is None:
            return None, None, None, None, 0
        carrier = self.carriers.get(key)
        if carrier is None:
            ann = ts.annotations  # a carrier Dask kept as an annotation (the handler was not wrapped)
            carrier = ann.get(ds.CARRIER) if ann else None
        # the submitter's context (its baggage too) is the task's, with the execute span in it
        base, parent = _context_of(carrier) if carrier is not None else (None, None)
        if parent is not None:
            if not parent.trace_flags.sampled:
                return ts, None, parent, None, 0
            sc = ds.context(parent.trace_id, ds.new_span_id(), parent.trace_state)
        else:
            sc = ds.context(ds.trace_of_group(ts.span_id), ds.new_span_id())
        token = _attach(_in_context(NonRecordingSpan(sc), base))
        ss = ts.startstops
        n0 = len(ss)
        if n0 and not at_entry and ss[-1].get("action") == "disk-read":
            n0 -= 1  # appended by this run just before it went to the executor
        return ts, sc, parent, token, n0

    def resource(self):
        """This process's resource, looked up once (its attributes are the current ones)."""
        res = self._resource
        if res is None:
            res = self._resource = ds.resource()
        return res

    def started(self, key, ts, sc):
        """The consumers see the task start (in the thread that runs it); the LiveSpan, or None."""
        procs = _consumers()
        if not procs or sc is None:
            return None
        prefix = ts.prefix
        name = self._names.get(prefix)
        if name is None:
            name = self._names[prefix] = f"dask.execute {prefix}"
        th = _current_thread()
        span = LiveSpan(name, sc, {"dask.task.key": key if type(key) is str else str(key), "dask.task.prefix": prefix,
                                   "dask.worker.address": self.address, "thread.id": th.ident,
                                   "thread.name": th.name}, self.resource())
        _start(procs, span)
        return span

    def executed(self, key, ts, sc, parent, n0, msg, delay: float, live=None, top: str | None = None) -> None:
        """``delay``: the worker's scheduler_delay as the task started, the one Dask added to the times in
        ``msg`` (a heartbeat may change it while the task runs; the current one would shift the span);
        ``live``: the task's LiveSpan, ended now for the consumers; ``top``: its evlog.profile.top."""
        if live is not None:
            _end(_consumers(), live)
        if ts is None:
            return
        err = None
        if msg.get("op") != "task-finished":
            exc = msg.get("actual_exception")
            if type(exc).__name__ == "Reschedule":
                err = ("rescheduled", "")  # the task asked to run elsewhere
            else:
                err = (str(msg.get("exception_text") or "error"), str(msg.get("traceback_text") or ""))
        self._append((dx.EXECUTE, key, ts, sc, parent, n0, msg["start"] - delay, msg["stop"] - delay,
                      msg.get("thread"), _current_thread().name, err, top))

    # ---- on the worker's event loop ---------------------------------------------------------------

    def transferred(self, worker, source, keys, nbytes, t0, t1, ev) -> None:
        ok = type(ev).__name__ == "GatherDepSuccessEvent"
        if ok:
            _transferred[0] += nbytes
        tasks = worker.state.tasks
        carrier = self.carriers.get
        parent = None
        for k in keys:
            ts = tasks.get(k)
            # the transfer belongs to the call of a dependent that waits for this data; a dependent
            # already computed (a result an earlier call still holds) is another call's
            deps = ts.dependents if ts is not None else ()
            for dep in sorted(deps, key=_done_last):
                c = carrier(dep.key)
                if c is not None:
                    parent = _context_of(c)[1]
                    break
            if parent is not None:
                break
        self._append((dx.TRANSFER, source, tuple(keys), nbytes, parent, t0, t1, ok, type(ev).__name__))

    # ---- in the shipping thread (evlog.observed.records) ----------------------------------------------------

    def _convert(self, items: list) -> list:
        """What the hot paths appended -> records of atoms for the exporter process; on the way, the
        ``dask.task.duration`` histogram and this process's consumers (which see the same spans)."""
        out = []
        address = self.address
        worker = self._worker()
        delay = worker.scheduler_delay if worker is not None else 0.0
        record = _histogram[0].record if _histogram else None
        for item in items:
            if item[0] == dx.EXECUTE:
                _, key, ts, sc, parent, n0, start, stop, thread, thread_name, err, top = item
                prefix = ts.prefix
                if record is not None:
                    record(max(0.0, stop - start), {"dask.task.prefix": prefix})
                if sc is None:
                    continue  # not sampled
                extra = []
                for ss in ts.startstops[n0:]:
                    action = ss.get("action")
                    if action == "compute":
                        continue
                    s0, s1 = ss["start"], ss["stop"]
                    if action == "transfer":
                        s0, s1 = s0 - delay, s1 - delay
                    src = ss.get("source")
                    extra.append((str(action), float(s0), float(s1), str(src) if src else None))
                # the fields of wire.dask.Execution and Transfer, in order
                out.append((dx.EXECUTE, key, prefix, sc.trace_id, sc.span_id, _ids(parent), start, stop,
                            thread, thread_name, err, tuple(extra), address, top))
            else:
                _, source, keys, nbytes, parent, t0, t1, ok, outcome = item
                if parent is not None and not parent.trace_flags.sampled:
                    continue
                out.append((dx.TRANSFER, str(source), tuple([k if type(k) is str else str(k) for k in keys]),
                            int(nbytes), _ids(parent), t0, t1, ok, outcome, address))
        return out


def _done_last(ts) -> bool:
    """Sort key: a worker's dependents still to run first (waiting for the data being fetched)."""
    return ts.state in ("memory", "released", "forgotten", "error")


def _instruments() -> None:
    """dask.task.duration and dask.transfer.bytes, once per process."""
    if _histogram:
        return
    from evlog.observed import own_metrics  # evlog's path, not the SDK's meter

    meter = own_metrics.get_meter(ds.SCOPE_NAME, ds.VERSION)
    _histogram.append(meter.create_histogram("dask.task.duration", unit="s",
                                             description="task execution time on workers, by prefix"))
    meter.create_observable_counter("dask.transfer.bytes", [_observe_transfer_bytes], unit="By",
                                    description="bytes received from other workers")


def _observe_transfer_bytes(options):
    return [(_transferred[0], None)]


# ---- attaching to a Worker, without a plugin ----------------------------------------------------

_recorders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Worker -> its WorkerRecorder


def attach(worker) -> WorkerRecorder:
    """A new Worker gets its recorder; its compute-task handler passes the trace context on (dask_context)."""
    rec = WorkerRecorder(worker)
    rec.originals = dc.receive_tasks(worker, rec.carriers)
    _recorders[worker] = rec
    worker.startup_information.setdefault("evlog", startup_information)
    return rec


def detach(worker) -> None:
    rec = _recorders.pop(worker, None)
    if worker.startup_information.get("evlog") is startup_information:
        del worker.startup_information["evlog"]
    if rec is not None:
        dc.restore_tasks(worker, rec.originals)
        rec.teardown(worker)


# ---- wrappers (installed by DaskInstrumentor) ---------------------------------------------------

async def execute(wrapped, instance, args, kwargs):
    """Worker.execute: the task's execute span context is current while it runs (in the executor thread
    too: Dask copies the context into it), so what is logged about the task is in its trace."""
    rec = _recorders.get(instance)
    if rec is None:
        return await wrapped(*args, **kwargs)
    try:
        key = args[0] if args else kwargs["key"]
        ts, sc, parent, token, n0 = rec.begin(instance, key, at_entry=True)
        rec.begun[key] = (ts, sc, parent, n0)
    except Exception as exc:
        notices.warn_once("dask-execute", f"a Dask task runs without its span: {exc!r}")
        return await wrapped(*args, **kwargs)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        rec.begun.pop(key, None)
        if token is not None:
            _detach(token)


def _begin(rec, worker, key):
    """(ts, span context, parent, token, n0) of a task about to run: Worker.execute's, or begun here."""
    begun = rec.begun.get(key)
    if begun is not None:
        ts, sc, parent, n0 = begun
        return ts, sc, parent, None, n0  # current already (Dask copied Worker.execute's context)
    return rec.begin(worker, key)


def run_task(wrapped, instance, args, kwargs):
    """distributed.worker._run_task, in the executor thread that runs the task: the consumers see it
    start and finish here; one tuple is kept after. Nothing runs on the worker's event loop."""
    try:
        key, worker = args[3], args[2]["worker"]
        rec = _recorders.get(worker)
    except Exception as exc:  # another Dask version's _run_task
        notices.warn_once("dask-run-task", f"Dask tasks run without their execute spans: {exc!r}")
        rec = None
    if rec is None:
        return wrapped(*args, **kwargs)
    try:
        ts, sc, parent, token, n0 = _begin(rec, worker, key)
        delay = worker.scheduler_delay
        live = rec.started(key, ts, sc)
        # the profiler samples this thread as this task's
        prof = _profile_enter(sc, ts.prefix, _getframe()) if ts is not None else None
    except Exception as exc:
        notices.warn_once("dask-execute", f"a Dask task runs without its span: {exc!r}")
        return wrapped(*args, **kwargs)
    try:
        msg = wrapped(*args, **kwargs)
    finally:
        if token is not None:
            _detach(token)
        top = _profile_leave(prof)  # the task's hottest functions (evlog.profile.top), or None
    try:
        rec.executed(key, ts, sc, parent, n0, msg, delay, live, top)
    except Exception as exc:
        notices.warn_once("dask-executed", f"a Dask task execution could not be recorded: {exc!r}")
    return msg


async def run_task_async(wrapped, instance, args, kwargs):
    """distributed.worker._run_task_async (tasks that are coroutines), as run_task."""
    try:
        from distributed.worker import get_worker

        worker = get_worker()
        key = args[0].key
        rec = _recorders.get(worker)
    except Exception as exc:
        notices.warn_once("dask-run-task", f"Dask tasks run without their execute spans: {exc!r}")
        rec = None
    if rec is None:
        return await wrapped(*args, **kwargs)
    try:
        ts, sc, parent, token, n0 = _begin(rec, worker, key)
        delay = worker.scheduler_delay
        live = rec.started(key, ts, sc)
    except Exception as exc:
        notices.warn_once("dask-execute", f"a Dask task runs without its span: {exc!r}")
        return await wrapped(*args, **kwargs)
    try:
        msg = await wrapped(*args, **kwargs)
    finally:
        if token is not None:
            _detach(token)
    try:
        rec.executed(key, ts, sc, parent, n0, msg, delay, live)
    except Exception as exc:
        notices.warn_once("dask-executed", f"a Dask task execution could not be recorded: {exc!r}")
    return msg


def _transfer_started(rec, args, kwargs):
    """The consumers see a transfer start (on the worker's event loop): its LiveSpan, or None."""
    procs = _consumers()
    if not procs:
        return None
    source = args[0] if args else kwargs.get("worker")
    span = LiveSpan("dask.transfer", ds.context(ds.new_trace_id(), ds.new_span_id()),
                    {"dask.transfer.source": str(source), "dask.worker.address": rec.address}, rec.resource())
    _start(procs, span)
    return span


async def gather_dep(wrapped, instance, args, kwargs):
    """Worker.gather_dep: one dask.transfer span per fetch from another worker."""
    rec = _recorders.get(instance)
    t0 = _time()
    live = None
    if rec is not None:
        try:
            live = _transfer_started(rec, args, kwargs)
        except Exception as exc:
            notices.warn_once("dask-transfer", f"a Dask transfer could not be recorded: {exc!r}")
    try:
        ev = await wrapped(*args, **kwargs)
    finally:
        if live is not None:
            _end(_consumers(), live)
    if rec is not None:
        try:
            source = args[0] if args else kwargs["worker"]
            keys = args[1] if len(args) > 1 else kwargs["to_gather"]
            nbytes = args[2] if len(args) > 2 else kwargs.get("total_nbytes", 0)
            rec.transferred(instance, source, keys, nbytes or 0, t0, _time(), ev)
        except Exception as exc:
            notices.warn_once("dask-transfer", f"a Dask transfer could not be recorded: {exc!r}")
    return ev


async def close(wrapped, instance, args, kwargs):
    """Worker.close: the recorder's last spans go to the processors once the worker is closed. A worker
    of a nanny's process leaves with it: that process's exit flush must end within the close's own
    timeout (the nanny kills the process after it), never extend it."""
    try:
        if getattr(instance, "nanny", None):
            timeout = kwargs.get("timeout", args[0] if args else None)
            if timeout:
                from evlog.observed import lifecycle

                lifecycle.exit_by(monotonic() + EXIT_SHARE * float(timeout))
    except Exception as exc:
        notices.warn_once("dask-worker-close", f"a Dask worker's close timeout could not be read: {exc!r}")
    try:
        return await wrapped(*args, **kwargs)
    finally:
        rec = _recorders.get(instance)
        if rec is not None:
            try:
                rec.teardown(instance)
            except Exception as exc:
                notices.warn_once("dask-worker-teardown", f"a closed Dask worker's last spans are lost: {exc!r}")


EXIT_SHARE = 0.5  # of a nanny worker's close timeout, for its close and the exit flush; the rest for the interpreter


def startup_information(worker) -> str:
    """Tells the scheduler this worker emits its own events (see dask_scheduler.relay_handlers); called
    when the worker registers, its address known: the recorder is set up then."""
    from evlog.version import __version__

    rec = _recorders.get(worker)
    if rec is not None:
        rec.setup(worker)
    return __version__
