"""Dask distributed: task spans across client, scheduler and workers; structured events; metrics.

Activated in every process that imports ``distributed`` (the bootstrap calls
``DaskInstrumentor().instrument()``), so a LocalCluster's worker processes and ``dask scheduler`` /
``dask worker`` processes started under evlog-instrument are covered with no change to the app.

What it produces (names in docs/conventions.md, section Dask):
- client (client.py): span ``dask.compute`` (PRODUCER) around submit/map/compute/persist/get; its
  context goes out with the graph (context.py);
- scheduler (scheduler.py, a SchedulerPlugin): span ``dask.task {prefix}`` per task life with a
  ``transition`` span event per transition; metrics dask.scheduler.transitions/tasks/workers; Dask's
  own spans (``dask.span {tag}``) and fine performance metrics (``dask.worker.time/bytes/count``),
  read periodically (readings.py);
- worker (worker.py, a recorder per Worker, not a plugin, plus wrappers): span ``dask.execute {prefix}`` (CONSUMER) per
  execution, the current span while the task runs; span ``dask.transfer`` per gather_dep; metrics
  dask.task.duration and dask.transfer.bytes;
- everywhere: event ``dask.log_event`` (attribute dask.topic, body msg) for each log_event, in the
  process that published it; resource attributes dask.role, dask.worker.address, dask.worker.name.

Context travels client -> scheduler -> worker in the ``update-graph`` and ``compute-task`` messages
and nowhere Dask or its users can see it (context.py: no task annotation); scheduler and worker spans are
children of the client's ``dask.compute`` span, and user spans inside a task are children of its
``dask.execute`` span. Hot paths only append tuples (evlog.observed.records); the run's exporter process builds
the spans (dask_lives, dask_executions) and exports them.
"""
from __future__ import annotations

import importlib
import weakref

import wrapt

from evlog import notices
from evlog.observed import events
from evlog.observed.dask.roles import roles

# ---- construction hooks -------------------------------------------------------------------------

def _scheduler_init(wrapped, instance, args, kwargs):
    wrapped(*args, **kwargs)
    try:
        from evlog import config
        from evlog.observed.dask import context as dask_context
        from evlog.observed.dask import scheduler as sched

        rec = sched.SchedulerRecorder(instance, transitions=config.get().dask_transitions)
        instance.add_plugin(rec, name=rec.name, idempotent=True)
        rec.originals = sched.relay_handlers(instance, rec)
        rec.graph_handlers = dask_context.receive_graphs(instance)
        roles.add("scheduler")
        sched.install_metrics()
    except Exception as exc:
        notices.warn_once("dask-scheduler", f"this Dask scheduler runs without evlog's task spans: {exc!r}")


def _worker_init(wrapped, instance, args, kwargs):
    wrapped(*args, **kwargs)
    try:
        from evlog.observed.dask.worker import attach

        attach(instance)
        _workers.add(instance)
    except Exception as exc:
        notices.warn_once("dask-worker", f"this Dask worker runs without evlog's task spans: {exc!r}")


def _nanny_init(wrapped, instance, args, kwargs):
    wrapped(*args, **kwargs)
    roles.add("nanny")


def _client_init(wrapped, instance, args, kwargs):
    wrapped(*args, **kwargs)
    roles.add("client")


def _log_event(wrapped, instance, args, kwargs):
    """Worker, Nanny and Client log_event: emitted here, where the event is published (the scheduler
    takes what they send it as already exported)."""
    result = wrapped(*args, **kwargs)
    try:
        topic = args[0] if args else kwargs["topic"]
        msg = args[1] if len(args) > 1 else kwargs["msg"]
        events.publish(topic, msg, "dask.log_event", "dask.topic")
    except Exception as exc:
        notices.warn_once("dask-log-event", f"a Dask event could not be recorded: {exc!r}")
    return result


_workers: weakref.WeakSet = weakref.WeakSet()


def _patches() -> list:
    """(module, Class.method or function, wrapper): every patch; uninstrument puts each original back."""
    from evlog.observed.dask import client as dask_client
    from evlog.observed.dask import context as dask_context
    from evlog.observed.dask import worker as dask_worker

    table = [
        ("distributed.scheduler", "SchedulerState._task_to_msg", dask_context.task_to_msg),
        ("distributed.worker", "Worker.close", dask_worker.close),
        ("distributed.client", "Client._send_to_scheduler", dask_context.send_to_scheduler),
        ("distributed.scheduler", "Scheduler.__init__", _scheduler_init),
        ("distributed.worker", "Worker.__init__", _worker_init),
        ("distributed.worker", "Worker.execute", dask_worker.execute),
        ("distributed.worker", "_run_task", dask_worker.run_task),
        ("distributed.worker", "_run_task_async", dask_worker.run_task_async),
        ("distributed.worker", "Worker.gather_dep", dask_worker.gather_dep),
        ("distributed.worker", "Worker.log_event", _log_event),
        ("distributed.nanny", "Nanny.__init__", _nanny_init),
        ("distributed.nanny", "Nanny.log_event", _log_event),
        ("distributed.client", "Client.__init__", _client_init),
        ("distributed.client", "Client.log_event", _log_event),
        ("distributed.client", "Client._graph_to_futures", dask_client.graph_to_futures),
    ]
    table += [("distributed.client", f"Client.{m}", dask_client.compute_call(m)) for m in dask_client.METHODS]
    return table


def _drain_all() -> None:
    from evlog.observed import records

    records.flush()  # the scheduler's transitions reach the story ledger as they are shipped


def _start_threads() -> None:
    """evlog's long-lived threads in a Dask process (records shipping, evlog's metrics, the task profiler's
    sampler) start with the instrumentation, when ``distributed`` is imported, not at the first Scheduler,
    Worker or event: a program (or Dask's own test harness) that checks which threads a piece of its work
    left behind sees none of evlog's appear. The default consumers come now too (a process that imports
    distributed runs tasks or sends them). None of this builds the OTel SDK: evlog's Dask telemetry is
    records and its own instruments (own_metrics), so a process whose program makes no telemetry of its
    own imports no ``opentelemetry.sdk``."""
    from evlog.observed import default_consumers, own_metrics, profiler, records

    try:
        records.channel().start()
        default_consumers.install()
        own_metrics.registry.start()
        profiler.start()  # the task profiler's sampling thread (none with EVLOG_PROFILE_INTERVAL=off)
    except Exception as exc:
        notices.warn_once("dask-threads", f"evlog's threads for Dask could not start early: {exc!r}")


_CODE_IGNORE = "distributed.diagnostics.computations.ignore-modules"


def _ignore_in_computation_code(on: bool) -> None:
    """Dask records the user's code that submitted a computation by walking up the stack past the
    modules named in this setting, its documented way for libraries that wrap compute calls; evlog's
    wrappers are in that stack, so ``evlog`` is added to it (and taken out on uninstrument)."""
    try:
        import dask

        mods = list(dask.config.get(_CODE_IGNORE, []) or [])
        if on and "evlog" not in mods:
            dask.config.set({_CODE_IGNORE: mods + ["evlog"]})
        elif not on and "evlog" in mods:
            dask.config.set({_CODE_IGNORE: [m for m in mods if m != "evlog"]})
    except Exception as exc:
        notices.warn_once("dask-code-ignore", f"Dask may record evlog's wrappers as the calling code: {exc!r}")


def _remove_plugin(scheduler, name: str) -> None:
    """Take evlog's SchedulerPlugin off ``scheduler`` (Scheduler.remove_plugin, the same from distributed
    2024.11 to 2026.8); one that is gone already is left so."""
    try:
        scheduler.remove_plugin(name=name)
    except ValueError:  # not among the scheduler's plugins
        pass


class DaskInstrumentor:
    """instrument() patches Dask's classes; uninstrument() restores them and detaches from live
    schedulers and workers. Both idempotent."""

    _active = False
    _undo: list = []  # (owner, attribute, original)

    def instrument(self) -> None:
        cls = DaskInstrumentor
        if cls._active:
            return
        done = []
        try:
            for module, path, wrapper in _patches():
                owner = importlib.import_module(module)
                if "." in path:
                    owner_name, attr = path.rsplit(".", 1)
                    owner = getattr(owner, owner_name)
                else:
                    attr = path
                original = owner.__dict__[attr]
                wrapt.wrap_function_wrapper(owner, attr, wrapper)
                done.append((owner, attr, original))
        except Exception as exc:
            for owner, attr, original in reversed(done):
                setattr(owner, attr, original)
            notices.warn_once("dask-instrument", f"the Dask instrumentation could not start: {exc!r}")
            return
        cls._undo = done
        cls._active = True
        events.add_flusher(_drain_all)
        _start_threads()
        _ignore_in_computation_code(True)

    def uninstrument(self) -> None:
        cls = DaskInstrumentor
        if not cls._active:
            return
        for owner, attr, original in reversed(cls._undo):
            setattr(owner, attr, original)
        cls._undo = []
        cls._active = False
        events.remove_flusher(_drain_all)
        _ignore_in_computation_code(False)
        from evlog.observed import records
        from evlog.observed.dask import context as dask_context
        from evlog.observed.dask import scheduler as dask_scheduler
        from evlog.observed.dask import worker as dask_worker

        for rec in list(dask_scheduler._live):
            try:
                _remove_plugin(rec.scheduler, rec.name)
                dask_scheduler.unrelay_handlers(rec.scheduler, getattr(rec, "originals", {}))
                dask_context.restore_graphs(rec.scheduler, getattr(rec, "graph_handlers", {}))
                rec.readings.close()
                records.remove(rec._log)
                dask_scheduler.retire(rec)
            except Exception as exc:
                notices.warn_once("dask-uninstrument", f"cannot detach from a Dask scheduler: {exc!r}")
        for worker in list(_workers):
            try:
                dask_worker.detach(worker)
            except Exception as exc:
                notices.warn_once("dask-uninstrument", f"cannot detach from a Dask worker: {exc!r}")
        _workers.clear()
