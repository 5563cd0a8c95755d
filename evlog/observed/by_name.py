"""Tracers, loggers, meters and instruments from evlog's providers pickle by name, as the API's proxies do.

The OpenTelemetry documentation's own pattern is a module-level ``tracer = trace.get_tracer(__name__)`` (or
a meter's counter) used inside functions. Without a configured SDK the API hands out proxy objects that
pickle; the SDK's own tracer and meter hold locks and do not, so a function that refers to one could not
be sent to a Dask worker (cloudpickle takes the module-level object along with a ``__main__`` function;
Dask's tokenizer fails on it). evlog's providers therefore hand out the SDK's objects inside a transparent
proxy (wrapt.ObjectProxy: attribute access, isinstance and equality are the SDK object's) whose pickled
form is the way to get it again: ``(get_tracer, (name, version, schema_url, attributes))``, and the like.
Unpickled in another process, it is that process's own tracer (evlog's if evlog runs there, else whatever
the OTel API gives). Observable instruments come back without their callbacks (those stay where they were
registered); asking for an instrument a process has already created returns that one, as the SDK does.
"""
from __future__ import annotations

import wrapt


class _ByName(wrapt.ObjectProxy):
    def __init__(self, wrapped, remake, args: tuple):
        super().__init__(wrapped)
        self._self_remake = (remake, args)

    def __reduce_ex__(self, protocol):
        return self._self_remake

    def __reduce__(self):
        return self._self_remake

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _scope_args(args: tuple, kwargs: dict, names: tuple) -> tuple:
    """The (name, version, schema_url, attributes) a get_tracer/get_meter/get_logger call asked for."""
    out = dict(zip(names, args))
    out.update({k: v for k, v in kwargs.items() if k in names})
    attrs = out.get(names[3])
    return (out.get(names[0]), out.get(names[1]), out.get(names[2]), dict(attrs) if attrs else None)


_TRACER = ("instrumenting_module_name", "instrumenting_library_version", "schema_url", "attributes")
_METER = ("name", "version", "schema_url", "attributes")
_LOGGER = ("name", "version", "schema_url", "attributes")


def tracer(real, args: tuple, kwargs: dict):
    return _ByName(real, get_tracer, _scope_args(args, kwargs, _TRACER))


def logger(real, args: tuple, kwargs: dict):
    return _ByName(real, get_logger, _scope_args(args, kwargs, _LOGGER))


def meter(real, args: tuple, kwargs: dict):
    return _Meter(real, get_meter, _scope_args(args, kwargs, _METER))


def get_tracer(name, version=None, schema_url=None, attributes=None):
    from opentelemetry import trace

    return trace.get_tracer(name, version, schema_url=schema_url, attributes=attributes)


def get_logger(name, version=None, schema_url=None, attributes=None):
    from opentelemetry import _logs

    return _logs.get_logger(name, version or "", schema_url=schema_url, attributes=attributes)


def get_meter(name, version=None, schema_url=None, attributes=None):
    from opentelemetry import metrics

    return metrics.get_meter(name, version or "", schema_url=schema_url, attributes=attributes)


def get_instrument(meter_args: tuple, method: str, name: str, unit: str, description: str, extra: dict):
    return getattr(get_meter(*meter_args), method)(name, unit=unit, description=description, **extra)


class _Meter(_ByName):
    """A meter whose instruments pickle by name too."""

    def _made(self, method: str, inst, extra: dict | None = None):
        return _ByName(inst, get_instrument, (self._self_remake[1], method, inst.name, inst.unit or "",
                                              inst.description or "", extra or {}))

    def create_counter(self, *args, **kwargs):
        return self._made("create_counter", self.__wrapped__.create_counter(*args, **kwargs))

    def create_up_down_counter(self, *args, **kwargs):
        return self._made("create_up_down_counter", self.__wrapped__.create_up_down_counter(*args, **kwargs))

    def create_gauge(self, *args, **kwargs):
        return self._made("create_gauge", self.__wrapped__.create_gauge(*args, **kwargs))

    def create_histogram(self, *args, **kwargs):
        advisory = kwargs.get("explicit_bucket_boundaries_advisory")
        extra = {"explicit_bucket_boundaries_advisory": list(advisory)} if advisory is not None else None
        return self._made("create_histogram", self.__wrapped__.create_histogram(*args, **kwargs), extra)

    def create_observable_counter(self, *args, **kwargs):
        return self._made("create_observable_counter", self.__wrapped__.create_observable_counter(*args, **kwargs))

    def create_observable_up_down_counter(self, *args, **kwargs):
        return self._made("create_observable_up_down_counter",
                          self.__wrapped__.create_observable_up_down_counter(*args, **kwargs))

    def create_observable_gauge(self, *args, **kwargs):
        return self._made("create_observable_gauge", self.__wrapped__.create_observable_gauge(*args, **kwargs))
