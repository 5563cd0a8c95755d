"""torch elastic (torchrun): the agent's run as spans, torch's events and metrics as OTel, ranks on workers.

Telemetry (docs/conventions.md, section "torch elastic"):
- agent spans: ``torchelastic.launch`` around torchrun's ``launch_agent``, then ``torchelastic.agent.run``
  around ``SimpleElasticAgent.run``, with children ``torchelastic.rendezvous`` (one per rendezvous
  round), ``torchelastic.workers.start`` (one per start of the local worker group) and
  ``torchelastic.workers.restart`` (stop, rendezvous, start again);
- ``torch.distributed.elastic.events.record(event, destination)``: an OTel event named as the Event,
  ``evlog.event_type`` = ``torchelastic``, body = its metadata (evlog.bridge's path, evlog/observed/torch_events/otel.py);
- rendezvous events (``construct_and_record_rdzv_event``, ``record_rdzv_event``): OTel events with
  ``evlog.event_type`` = ``torchelastic.rendezvous``, also when torch's own handler is its default
  NullHandler (torch then skips building them; evlog builds the OTel event from the call's arguments,
  without torch's ``inspect.stack()``);
- every metric point (``put_metric``, ``@prof``: all go through ``MetricStream.add_value``):
  ``torchelastic.{group}.{name}`` (evlog/observed/torch_events/metrics.py).
Context: the agent writes the ``torchelastic.workers.start`` span's context into each worker's
environment (``PContext.start``) as the configured propagators write it (``TRACEPARENT``, ``TRACESTATE``,
``BAGGAGE`` by default: evlog.propagation); evlog's start-up in the worker continues that trace.
``worker_start()`` gives a worker its ranks, role and run id as resource attributes.

Each patch is installed by a post-import hook of the module that defines it, and every binding of a
patched function (torch imports ``record`` by name into the agent) is patched and unpatched together.
"""
from __future__ import annotations

import os
import sys
import threading

import wrapt

from evlog import notices
from evlog.observed.torch_events import otel

SCOPE = "evlog.torch_elastic"
EVENT_TYPE = "torchelastic"
RDZV_EVENT_TYPE = "torchelastic.rendezvous"
_PKG = "torch.distributed.elastic"
WORKER_ENV = (  # worker environment variable (set by torch's agent) -> resource attribute
    ("RANK", "torch.rank", int),
    ("LOCAL_RANK", "torch.local_rank", int),
    ("GROUP_RANK", "torch.group_rank", int),
    ("ROLE_NAME", "torch.role", str),
    ("TORCHELASTIC_RUN_ID", "torch.run_id", str),
)


class TorchElasticInstrumentor:
    """Patches torch.distributed.elastic as its modules are imported; ``uninstrument()`` undoes all."""

    def __init__(self):
        self._on = False
        self._sites: list = []  # (owner, attribute) of every installed patch

    def instrument(self) -> None:
        if self._on:
            return
        self._on = True
        worker_start()
        for module, patch in _PATCHES:
            wrapt.register_post_import_hook(self._hook(patch), module)

    def uninstrument(self) -> None:
        if not self._on:
            return
        self._on = False
        for owner, attr in self._sites:
            _unpatch(owner, attr)
        self._sites.clear()
        global _metrics
        _metrics = None

    def _hook(self, patch):
        def hook(module):
            if not self._on:
                return  # a hook registered before uninstrument(): wrapt cannot remove it
            try:
                patch(module, self._sites)
            except Exception as exc:
                notices.warn_once(f"torch-patch-{module.__name__}",
                                  f"the torch elastic instrumentation could not patch {module.__name__} ({exc!r}); "
                                  "it runs uninstrumented")

        return hook


# ---- patching: one wrapper type, so a second binding of a patched function is recognised ----

class _Patched(wrapt.FunctionWrapper):
    """A wrapper installed by this module."""


def _patch(owner, attr: str, wrapper, sites: list) -> None:
    current = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if current is None:
        return
    if not isinstance(current, _Patched):
        setattr(owner, attr, _Patched(current, wrapper))
    sites.append((owner, attr))


def _unpatch(owner, attr: str) -> None:
    current = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if isinstance(current, _Patched):
        setattr(owner, attr, current.__wrapped__)


def _patch_events(mod, sites):
    _patch(mod, "record", _record, sites)
    _patch(mod, "record_rdzv_event", _record_rdzv, sites)
    _patch(mod, "construct_and_record_rdzv_event", _construct_rdzv, sites)


def _patch_dynamic_rendezvous(mod, sites):
    _patch(mod, "construct_and_record_rdzv_event", _construct_rdzv, sites)  # imported by name


def _patch_metrics(mod, sites):
    _patch(mod.MetricStream, "add_value", _add_value, sites)


def _patch_agent(mod, sites):
    _patch(mod, "record", _record, sites)  # imported by name
    agent = mod.SimpleElasticAgent
    _patch(agent, "run", _spanned("torchelastic.agent.run", _run_attrs, _run_result), sites)
    _patch(agent, "_rendezvous", _spanned("torchelastic.rendezvous", _group_attrs, _rendezvous_result), sites)
    _patch(agent, "_restart_workers", _spanned("torchelastic.workers.restart", _restart_attrs), sites)


def _patch_local_agent(mod, sites):
    _patch(mod.LocalElasticAgent, "_start_workers",
           _spanned("torchelastic.workers.start", _group_attrs, _start_result), sites)


def _patch_launcher(mod, sites):
    _patch(mod, "launch_agent", _spanned("torchelastic.launch", _launch_attrs, _launch_result), sites)


def _patch_processes(mod, sites):
    _patch(mod.PContext, "start", _start_processes, sites)


_PATCHES = (
    (f"{_PKG}.events", _patch_events),
    (f"{_PKG}.metrics.api", _patch_metrics),
    (f"{_PKG}.rendezvous.dynamic_rendezvous", _patch_dynamic_rendezvous),
    (f"{_PKG}.agent.server.api", _patch_agent),
    (f"{_PKG}.agent.server.local_elastic_agent", _patch_local_agent),
    (f"{_PKG}.multiprocessing.api", _patch_processes),
    ("torch.distributed.launcher.api", _patch_launcher),
)


# ---- events ----

def _record(wrapped, instance, args, kwargs):
    logger = otel._logger or otel.evlog_logger()
    if logger is not None:
        try:
            _emit_event(logger, *args, **kwargs)
        except Exception as exc:
            notices.warn_once("torch-event", f"a torch elastic event could not be sent ({exc!r})")
    return wrapped(*args, **kwargs)


def _emit_event(logger, event, destination="null"):
    source = getattr(event, "source", None)
    attrs = {"torch.event.destination": str(destination)}
    if source is not None:
        attrs["torch.event.source"] = getattr(source, "value", source)
    otel.emit(logger, event.name, EVENT_TYPE, event.metadata, event.timestamp, attrs)


_constructing = threading.local()  # inside construct_and_record_rdzv_event: its record is already sent


def _construct_rdzv(wrapped, instance, args, kwargs):
    logger = otel._logger or otel.evlog_logger()
    if logger is not None:
        try:
            name, body = _rdzv_fields(*args, **kwargs)
            otel.emit(logger, name, RDZV_EVENT_TYPE, body)
        except Exception as exc:
            notices.warn_once("torch-rdzv-event", f"a torch rendezvous event could not be sent ({exc!r})")
    outer = getattr(_constructing, "on", False)
    _constructing.on = True
    try:
        return wrapped(*args, **kwargs)
    finally:
        _constructing.on = outer


def _record_rdzv(wrapped, instance, args, kwargs):
    logger = otel._logger or otel.evlog_logger()
    if logger is not None and not getattr(_constructing, "on", False):
        try:
            event = args[0] if args else kwargs["event"]
            body = {k: v for k, v in vars(event).items() if k != "name"}
            otel.emit(logger, event.name, RDZV_EVENT_TYPE, body)
        except Exception as exc:
            notices.warn_once("torch-rdzv-event", f"a torch rendezvous event could not be sent ({exc!r})")
    return wrapped(*args, **kwargs)


def _rdzv_fields(run_id, message, node_state, name="", hostname="", pid=None, master_endpoint="",
                 local_id=None, rank=None):
    """The RdzvEvent torch would build from construct_and_record_rdzv_event's arguments: (name, body)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith(("evlog.", "wrapt")):
        frame = frame.f_back
    if frame is not None:  # torch names the event "<caller's file>:<name or caller's function>"
        name = f"{os.path.basename(frame.f_code.co_filename)}:{name or frame.f_code.co_name}"
    error_trace = ""
    if getattr(node_state, "value", node_state) == "FAILED":
        import traceback

        error_trace = traceback.format_exc()
    return name, {
        "run_id": run_id, "message": message, "hostname": hostname or _hostname(), "pid": pid or os.getpid(),
        "node_state": node_state, "master_endpoint": master_endpoint, "rank": rank, "local_id": local_id,
        "error_trace": error_trace,
    }


def _hostname() -> str:
    import socket

    return socket.gethostname()


# ---- metrics ----

_metrics = None  # evlog.observed.torch_events.metrics.TorchMetrics on evlog's meter, made on first use


def _add_value(wrapped, instance, args, kwargs):
    try:
        global _metrics
        if _metrics is None:
            from opentelemetry import metrics

            from evlog.observed.torch_events.metrics import SCOPE as METER
            from evlog.observed.torch_events.metrics import TorchMetrics

            _metrics = TorchMetrics(metrics.get_meter(METER))
        _metrics(instance.group_name, *_point(*args, **kwargs))
    except Exception as exc:
        notices.warn_once("torch-metric", f"a torch elastic metric could not be recorded ({exc!r})")
    return wrapped(*args, **kwargs)


def _point(metric_name, metric_value):
    return metric_name, metric_value


# ---- agent spans ----

def _spanned(name: str, before, after=None):
    """A wrapper running the call in span ``name``: attributes from ``before``, result noted by ``after``."""

    def wrapper(wrapped, instance, args, kwargs):
        try:
            attrs = before(instance, *args, **kwargs)
        except Exception as exc:
            attrs = None
            notices.warn_once(f"torch-span-{name}", f"span {name} is missing attributes ({exc!r})")
        with _tracer().start_as_current_span(name, attributes=attrs) as span:
            result = wrapped(*args, **kwargs)
            if after is not None:
                try:
                    after(span, instance, result, *args, **kwargs)
                except Exception as exc:
                    notices.warn_once(f"torch-span-end-{name}", f"span {name} is missing its result ({exc!r})")
            return result

    return wrapper


_tracer_obj = None


def _tracer():
    global _tracer_obj
    if _tracer_obj is None:
        from opentelemetry import trace

        _tracer_obj = trace.get_tracer(SCOPE)
    return _tracer_obj


def _launch_attrs(_none, config, *args, **kwargs) -> dict:
    attrs = {"torch.role": config.role, "torch.rdzv.backend": config.rdzv_backend,
             "torch.max_restarts": config.max_restarts, "torch.nnodes": f"{config.min_nodes}:{config.max_nodes}",
             "torch.local_world_size": config.nproc_per_node}
    if config.run_id:
        attrs["torch.run_id"] = config.run_id
    return attrs


def _launch_result(span, _none, result, config, *args, **kwargs) -> None:
    span.set_attribute("torch.run_id", config.run_id)  # launch_agent makes one up when none was given


def _spec_attrs(spec) -> dict:
    return {"torch.role": spec.role, "torch.run_id": spec.rdzv_handler.get_run_id()}


def _run_attrs(agent, *args, **kwargs) -> dict:
    spec = agent._worker_group.spec
    return {**_spec_attrs(spec), "torch.rdzv.backend": spec.rdzv_handler.get_backend(),
            "torch.max_restarts": spec.max_restarts, "torch.local_world_size": spec.local_world_size}


def _run_result(span, agent, result, *args, **kwargs) -> None:
    if result is None:
        return
    span.set_attribute("torch.state", result.state.name)
    if result.is_failed():
        from opentelemetry.trace import Status, StatusCode

        span.set_status(Status(StatusCode.ERROR, f"workers {result.state.name}"))


def _group_attrs(agent, worker_group, *args, **kwargs) -> dict:
    spec = worker_group.spec
    return {**_spec_attrs(spec), "torch.restart_count": spec.max_restarts - agent._remaining_restarts,
            "torch.local_world_size": spec.local_world_size}


def _rendezvous_result(span, agent, result, *args, **kwargs) -> None:
    wg = agent._worker_group
    span.set_attribute("torch.group_rank", wg.group_rank)
    span.set_attribute("torch.group_world_size", wg.group_world_size)
    state = getattr(getattr(wg.spec.rdzv_handler, "_state_holder", None), "state", None)
    if isinstance(getattr(state, "round", None), int):
        span.set_attribute("torch.rdzv.round", state.round)  # DynamicRendezvousHandler's round number


def _start_result(span, agent, result, *args, **kwargs) -> None:
    if isinstance(result, dict):
        span.set_attribute("torch.worker.pids", [int(p) for p in result.values()])


def _restart_attrs(agent, worker_group, *args, **kwargs) -> dict:
    return {**_spec_attrs(worker_group.spec), "torch.remaining_restarts": agent._remaining_restarts}


# ---- context into the workers ----

def _start_processes(wrapped, instance, args, kwargs):
    try:
        from evlog import propagation

        carrier = propagation.inject()  # the configured propagators' fields: TRACEPARENT, TRACESTATE, BAGGAGE, ...
        if carrier:
            extra = propagation.to_environ(carrier)  # read back by each worker's evlog start-up (boot)
            for env in instance.envs.values():
                env.update(extra)
    except Exception as exc:
        notices.warn_once("torch-traceparent", f"the workers could not be given the trace context ({exc!r})")
    return wrapped(*args, **kwargs)


# ---- worker start-up ----

_worker_pid = -1


def worker_attributes(env) -> dict:
    """Resource attributes of a torchrun worker, from the variables torch's agent sets for it."""
    out = {}
    for var, attr, conv in WORKER_ENV:
        raw = env.get(var)
        if raw is not None:
            try:
                out[attr] = conv(raw)
            except ValueError:
                out[attr] = raw
    return out


def worker_start() -> None:
    """In a torchrun worker (TORCHELASTIC_RUN_ID set), add its ranks, role and run id to the resource.

    Cheap and idempotent: meant for evlog's start-up in every process; also run by ``instrument()``.
    """
    global _worker_pid
    if _worker_pid == os.getpid() or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    _worker_pid = os.getpid()
    try:
        from evlog.observed import sdk

        sdk.update_resource(worker_attributes(os.environ))
    except Exception as exc:
        notices.warn_once("torch-worker-resource", f"the worker's ranks could not be added to its resource ({exc!r})")
