"""Starting a task's span for a fraction of what ``Tracer.start_span`` costs, with the same result.

A pool task of a trivial function costs a few microseconds of Python. ``Tracer.start_span`` and
``end`` cost about 24 µs of CPU on the project's machine (validated attribute dictionaries, bounded
lists and their locks, the sampler's general path, a ReadableSpan copy at the end); this path costs
about 3.5 µs. ``start()`` does what ``Tracer.start_span`` does (the provider's sampler, id generator,
resource, scope, limits and span processors, ``on_start`` in the running thread) but makes a
``TaskSpan``: an SDK ``Span`` whose attribute, event and link containers are created only when
something writes to them, and which hands itself to ``on_end`` instead of a copy. The default sampler
(parent-based, always on) is decided inline, and the SDK's random id generator's ids are drawn
inline; any other sampler or generator is asked as usual. With the SDK's synchronous multi-processor,
the span processors' hooks are called directly, less those whose body is ``pass``.

Anything that is not the SDK's own tracer (no SDK set up, a vendor's provider) gets the ordinary
``tracer.start_span``.
"""
from __future__ import annotations

import logging
import random
import threading
from time import time_ns as _time_ns

from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk import trace as sdk_trace
from opentelemetry.sdk.trace import SynchronousMultiSpanProcessor, sampling
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.trace import DEFAULT_TRACE_STATE, NonRecordingSpan, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation import _SPAN_KEY

from evlog.exporters import fast_otlp, otlp_json

_logger = logging.getLogger("opentelemetry.sdk.trace")
_Lock = threading.Lock
_CONSUMER = SpanKind.CONSUMER  # run apart from its submitter, as dask.execute
_UNSET = sdk_trace.Status(sdk_trace.StatusCode.UNSET)
_FLAGS = tuple(TraceFlags(i) for i in range(4))  # [sampled (1) | random trace id (2)]
_new = object.__new__
_tuple_new = tuple.__new__
_getrandbits = random.getrandbits
_STATIC_ON = (sampling.DEFAULT_ON, sampling.ALWAYS_ON)


class TaskSpan(sdk_trace.Span):
    """An SDK span with lazily made containers; behaves as ``Span`` for processors, exporters and users."""

    # What Span.__init__ sets to the same value for every task span: class defaults, replaced on write.
    _kind = _CONSUMER
    _instrumentation_info = None
    _events = ()  # made a BoundedList by the first event
    _links = ()
    _status = _UNSET
    _start_time = None
    _end_time = None
    _sampler = None
    _trace_config = None
    _record_exception = True
    _set_status_on_exception = True
    _record_end_metrics = None

    # Instances are made by start() with object.__new__ and plain stores: Span.__new__ and __init__
    # would cost more than all the rest of a task span.

    def _own_attributes(self) -> None:
        if type(self._attributes) is dict:
            lim = self._limits
            self._attributes = BoundedAttributes(
                lim.max_span_attributes, self._attributes, immutable=False, max_value_len=lim.max_span_attribute_length
            )

    def set_attributes(self, attributes) -> None:
        self._own_attributes()
        super().set_attributes(attributes)

    def set_attribute(self, key: str, value) -> None:
        self._own_attributes()
        super().set_attribute(key, value)

    def _add_event(self, event) -> None:
        if type(self._events) is tuple:
            self._events = self._new_events()
        super()._add_event(event)

    def _add_link(self, link) -> None:
        if type(self._links) is tuple:
            self._links = self._new_links(())
        super()._add_link(link)

    _hooks = None  # the processors' hooks, as start() found them (None: through _span_processor)

    def end(self, end_time: int | None = None) -> None:
        with self._lock:
            if self._end_time is not None:
                _logger.warning("Calling end() on an ended span.")
                return
            self._end_time = end_time if end_time is not None else _time_ns()
        if type(self._attributes) is not dict:
            self._attributes._immutable = True
        hooks = self._hooks
        if hooks is None:
            proc = self._span_processor
            proc._on_ending(self)
            proc.on_end(self)  # ended spans refuse every write, so no copy is needed
            return
        for hook in hooks[2]:
            hook(self)
        for hook in hooks[3]:
            hook(self)


def _noop_body(self, span=None, parent_context=None):
    pass


_NOOP = _noop_body.__code__.co_code


def _does_something(cls, name: str) -> bool:
    """Is ``cls.name`` anything but a function whose body is ``pass`` (SpanProcessor's and the batch
    processor's on_start and _on_ending)?"""
    code = getattr(getattr(cls, name, None), "__code__", None)
    return code is None or code.co_code != _NOOP


_hooks_cache: dict = {}  # id(processors tuple) -> (tuple, on_start, _on_ending, on_end hooks)


def _processor_hooks(proc):
    """What SynchronousMultiSpanProcessor would call, as bound methods, less the hooks that do
    nothing: one loop per event instead of a call per processor through the multi-processor.
    None for any other kind of span processor. Follows add_span_processor (a new tuple)."""
    if type(proc) is not SynchronousMultiSpanProcessor:
        return None
    procs = proc._span_processors
    hit = _hooks_cache.get(id(procs))
    if hit is not None and hit[0] is procs:
        return hit
    hit = (procs,
           tuple(p.on_start for p in procs if _does_something(type(p), "on_start")),
           tuple(p._on_ending for p in procs if _does_something(type(p), "_on_ending")),
           tuple(p.on_end for p in procs))
    if len(_hooks_cache) > 16:
        _hooks_cache.clear()
    _hooks_cache[id(procs)] = hit
    global _last_hooks
    _last_hooks = hit
    return hit


_last_hooks: tuple = (None,)  # the hooks start() used last


# The OTLP exporters write task spans with evlog.exporters.fast_otlp (installed by the first start()),
# the run folder with otlp_json's short path.
encoder_patch = fast_otlp.sdk_patch(TaskSpan)
otlp_json.FAST_TYPES.add(TaskSpan)

_NEEDS = ("_instrumentation_scope", "_span_limits", "span_processor", "id_generator", "sampler", "_is_enabled")


def usable(tracer) -> bool:
    """Can ``start`` take its short path with this tracer (the SDK's own, with what it reads)?"""
    return (type(tracer) is sdk_trace.Tracer and all(hasattr(tracer, a) for a in _NEEDS)
            and hasattr(tracer.span_processor, "_on_ending"))


def start(tracer, name: str, attributes: dict, parent) -> trace.Span:
    """A started CONSUMER span ``name`` under the Context ``parent``, as ``tracer.start_span`` makes it."""
    span = parent.get(_SPAN_KEY)
    psc = span.get_span_context() if span is not None else None
    if not tracer._is_enabled():
        return NonRecordingSpan(psc or trace.INVALID_SPAN_CONTEXT)
    ids = tracer.id_generator
    random_ids = type(ids) is RandomIdGenerator  # its ids, drawn here the way it draws them
    if psc is None or not psc.is_valid:
        psc = None
        if random_ids:
            trace_id = _getrandbits(128)
            while not trace_id:
                trace_id = _getrandbits(128)
            random_id = 2
        else:
            trace_id = ids.generate_trace_id()
            random_id = 2 if ids.is_trace_id_random() else 0
    else:
        trace_id = psc.trace_id
        random_id = psc.trace_flags & 2
    sampler = tracer.sampler
    if sampler in _STATIC_ON:
        sampled = recording = psc is None or sampler is sampling.ALWAYS_ON or psc.trace_flags & 1
        state = psc.trace_state if psc is not None else DEFAULT_TRACE_STATE
    else:
        result = sampler.should_sample(parent, trace_id, name, _CONSUMER, attributes, ())
        sampled = 1 if result.decision.is_sampled() else 0
        recording = result.decision.is_recording()
        state = result.trace_state if result.trace_state is not None else DEFAULT_TRACE_STATE
        attributes = dict(result.attributes) if result.attributes else {}
    if random_ids:  # valid ids: the SpanContext made without checking them again
        span_id = _getrandbits(64)
        while not span_id:
            span_id = _getrandbits(64)
        sc = _tuple_new(SpanContext, (trace_id, span_id, False, _FLAGS[sampled | random_id], state, True))
    else:
        sc = SpanContext(trace_id, ids.generate_span_id(), False, _FLAGS[sampled | random_id], state)
    if not recording:
        return NonRecordingSpan(sc)
    span = _new(TaskSpan)
    span._name = name
    span._context = sc
    span._parent = psc
    span._resource = tracer.resource
    span._instrumentation_scope = tracer._instrumentation_scope
    span._attributes = attributes  # shared and read-only until the first write (then copied)
    span._span_processor = proc = tracer.span_processor
    span._limits = tracer._span_limits
    span._lock = _Lock()
    span._start_time = _time_ns()
    hooks = _last_hooks
    if type(proc) is not SynchronousMultiSpanProcessor or proc._span_processors is not hooks[0]:
        hooks = _processor_hooks(proc)
    if hooks is None:
        proc.on_start(span, parent_context=parent)
    else:
        span._hooks = hooks
        for hook in hooks[1]:
            hook(span, parent_context=parent)
    return span
