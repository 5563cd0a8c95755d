"""The default consumers (EVLOG_CONSUMERS) in an observed process, and when they come.

They come when the process first runs a task (the Dask instrumentation at ``import distributed``, a
pool's first task span), when the program makes its first span (its tracer provider is built), or once
the process has run GAUGES_AFTER_S without either (a Dask nanny, a supervisor), so that its load, memory
and bytes are reported like any other process's. A process that ends sooner (a ``python -c`` helper, a
short subprocess) pays nothing for them. None of these builds the OTel SDK: the consumers see the task
spans recorded here through their registry (evlog/processors/registry.py), the SDK's spans once the
program makes some (evlog/processors/on_provider.py), and their gauges are evlog's own instruments
(evlog/observed/own_metrics.py).
"""
from __future__ import annotations

import os
import sys
import threading

from evlog import notices

GAUGES_AFTER_S = 1.0  # a process that runs no task and makes no span reports the consumers' gauges once it has run this long


def setup(settings) -> None:
    """At start-up: the consumers come with the tracer provider, or after GAUGES_AFTER_S."""
    if not settings.consumers:
        return
    from evlog.observed import sdk

    sdk.when_built("traces", _with_provider)
    _timer()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_timer)


def install() -> None:
    """Install them now, if the settings name some (idempotent, never raises)."""
    try:
        from evlog import config
        from evlog.observed import own_metrics, sdk

        settings = config.get()
        if not settings.consumers:
            return
        providers = sdk.providers()
        if not providers:  # the SDK is disabled: nothing goes anywhere
            return
        import importlib

        processors = importlib.import_module("evlog.processors")
        processors.install_default(settings, providers[0], own_metrics.registry)
    except Exception as exc:
        if not notices.exiting():  # else it raced the program's exit
            notices.warn_once("consumers", f"the consumers could not start: {exc!r}")


def _with_provider(tracer_provider) -> None:
    install()


def _timer() -> None:
    from evlog.observed import lifecycle

    consumers = sys.modules.get("evlog.processors.registry")  # not imported for this: most processes never need it
    if consumers is not None and consumers.registry.builtin is not None:
        return  # installed already (a forked child has its parent's)

    def fire() -> None:
        if not threading.main_thread().is_alive():  # not once the program is on its way out
            return
        try:
            install()
        except BaseException as exc:  # never a traceback of evlog's thread in the program's stderr
            if not notices.exiting():
                notices.warn_once("gauges-timer", f"the consumers' gauges could not be set up: {exc!r}")

    timer = threading.Timer(GAUGES_AFTER_S, fire)
    timer.daemon = True
    timer.name = "evlog-gauges-timer"
    timer.start()
    lifecycle.before_flush(timer.cancel)
