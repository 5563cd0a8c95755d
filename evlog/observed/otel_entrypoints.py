"""Entry points for plain `opentelemetry-instrument`: distro, configurator, and one instrumentor each.

The instrumentors defer to evlog's post-import hooks, so opentelemetry-instrument imports none of the
target libraries at start-up.

With another distro installed (opentelemetry-distro, which the test extras bring), opentelemetry-instrument
takes the first distro and the first configurator its entry-point scan finds, in the order the
packages happen to be listed on disk; the one that loses is skipped with a line of its own logger.
Nothing of evlog runs before that choice, so evlog cannot make itself win in every order:
- when evlog's distro is the one taken, it names evlog's configurator (OTEL_PYTHON_CONFIGURATOR, unless
  the user set one), so the configurators' order no longer matters;
- when another configurator set the SDK up, evlog's instrumentors (which opentelemetry-instrument loads
  after the configurators) say once what to set, rather than record nothing in silence.
"""
from __future__ import annotations

import os

from opentelemetry.instrumentation.distro import BaseDistro
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.sdk._configuration import _BaseConfigurator

_REPORTED = "EVLOG_OTHER_CONFIGURATOR_REPORTED"  # inherited: the run's children do not repeat the message


class EvlogDistro(BaseDistro):
    """Names evlog's configurator; evlog's defaults are applied where the variables are read."""

    def _configure(self, **kwargs):
        os.environ.setdefault("OTEL_PYTHON_CONFIGURATOR", "evlog")


def _check_configured() -> None:
    """Called as opentelemetry-instrument loads evlog's instrumentors, after its configurators ran."""
    from evlog.observed import boot

    chosen = os.environ.get("OTEL_PYTHON_CONFIGURATOR", "").strip()
    if boot.started() or os.environ.get(_REPORTED) or (chosen and chosen != "evlog"):
        return  # evlog is set up, or the user chose another configurator on purpose
    os.environ[_REPORTED] = "1"
    from evlog import notices

    notices.warn_once("other-configurator", "opentelemetry-instrument set the SDK up with another installed "
                      "distro's configurator, so evlog records nothing; set OTEL_PYTHON_DISTRO=evlog, or run "
                      "evlog-instrument instead")


class EvlogConfigurator(_BaseConfigurator):
    def _configure(self, **kwargs):
        from evlog.observed import boot

        boot.start(capture=False)


def _deferred(name: str):
    from evlog.observed.targets import TARGETS

    module, target = TARGETS[name]

    class Deferred(BaseInstrumentor):
        def instrumentation_dependencies(self):
            return []

        def _instrument(self, **kwargs):
            from evlog.observed import boot

            _check_configured()
            boot.when_imported(module, boot._activator(name, target), settled=True)

        def _uninstrument(self, **kwargs):
            inst = boot_active().pop(name, None)
            if inst is not None:
                inst.uninstrument()

    Deferred.__name__ = Deferred.__qualname__ = f"Evlog{name.title().replace('_', '')}Instrumentor"
    return Deferred


def boot_active():
    from evlog.observed import boot

    return boot._active


DaskInstrumentor = _deferred("dask")
FuturesInstrumentor = _deferred("futures")
MultiprocessingInstrumentor = _deferred("multiprocessing")
TorchElasticInstrumentor = _deferred("torch_elastic")
