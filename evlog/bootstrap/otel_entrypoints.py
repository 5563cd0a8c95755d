"""Entry points for plain `opentelemetry-instrument`: distro, configurator, and one instrumentor each.

The instrumentors defer to evlog's post-import hooks, so opentelemetry-instrument imports none of the
target libraries at start-up.
"""
from __future__ import annotations

from opentelemetry.instrumentation.distro import BaseDistro
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.sdk._configuration import _BaseConfigurator


class EvlogDistro(BaseDistro):
    """Nothing to pre-set: evlog's defaults are applied where the variables are read."""

    def _configure(self, **kwargs):
        pass


class EvlogConfigurator(_BaseConfigurator):
    def _configure(self, **kwargs):
        from . import boot

        boot.start(capture=False)


def _deferred(name: str):
    from evlog.instrumentation import TARGETS

    module, target = TARGETS[name]

    class Deferred(BaseInstrumentor):
        def instrumentation_dependencies(self):
            return []

        def _instrument(self, **kwargs):
            from . import boot

            boot.when_imported(module, boot._activator(name, target), after_otel=True)

        def _uninstrument(self, **kwargs):
            inst = boot_active().pop(name, None)
            if inst is not None:
                inst.uninstrument()

    Deferred.__name__ = Deferred.__qualname__ = f"Evlog{name.title().replace('_', '')}Instrumentor"
    return Deferred


def boot_active():
    from . import boot

    return boot._active


DaskInstrumentor = _deferred("dask")
FuturesInstrumentor = _deferred("futures")
MultiprocessingInstrumentor = _deferred("multiprocessing")
TorchElasticInstrumentor = _deferred("torch_elastic")
