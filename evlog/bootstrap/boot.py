"""Set evlog up in this process, once: settings, SDK, exit hooks, instrumentations, consumers, capture.

Called from evlog's sitecustomize (every Python process under evlog-instrument), from the OTel
configurator entry point (plain opentelemetry-instrument) and from evlog.configure().
"""
from __future__ import annotations

import os

from evlog import _report, config

_started_pid = -1


def start(settings: config.Settings | None = None, *, capture: bool | None = None) -> bool:
    """Set up this process; a second call in the same process does nothing. Never raises."""
    global _started_pid
    if _started_pid == os.getpid():
        return False
    _started_pid = os.getpid()
    try:
        return _start(settings, capture)
    except Exception as exc:  # evlog must never stop the program from starting
        _report.warn_once("boot", f"set-up failed, the program runs without evlog: {exc!r}")
        return False


def _start(settings, capture) -> bool:
    # The owner is the launched program's own process (same pid as the launcher's child).
    owner = os.environ.get("EVLOG_OWNER_PID") == str(os.getpid())
    if owner:
        del os.environ["EVLOG_OWNER_PID"]  # children are not owners
    if settings is None:
        settings = config.load()
    if owner and not os.environ.get("EVLOG_PREPARED"):
        from evlog import run

        settings = run.prepare(settings, os.environ, os.environ.get("EVLOG_SERVICE_NAME") or _service())
    elif not os.environ.get("EVLOG_CONFIG_REPORTED"):
        for p in settings.problems:
            _report.warn_once(f"config-{p}", p)
    if settings.run_dir is None and settings.exporters.embedded and not settings.sdk_disabled:
        from evlog import run  # evlog.configure() or opentelemetry-instrument: this process makes the folder

        run_dir = run.default_run_dir(os.getcwd(), _service())
        os.environ["EVLOG_RUN_DIR"] = run_dir
        settings = settings.with_overrides(run_dir=run_dir)
    config.set_current(settings)
    if settings.sdk_disabled:
        return False
    from . import lifecycle, sdk

    if not sdk.setup(settings):
        return False
    lifecycle.install()
    _join_parent_trace()
    if "TORCHELASTIC_RUN_ID" in os.environ and settings.instrumentation_enabled("torch_elastic"):
        # a torchrun worker: its ranks as resource attributes, even if it never imports torch.distributed.elastic
        from evlog.instrumentation import torch_elastic

        torch_elastic.worker_start()
    _instrument(settings)
    _install_consumers(settings)
    if (owner if capture is None else capture) and settings.capture != "off":
        _install_console(settings)
    return True


def _service() -> str:
    from .sdk import service_name

    return service_name()


def _join_parent_trace() -> None:
    """A parent that passed TRACEPARENT (W3C) in the environment: this process continues its trace."""
    tp = os.environ.get("TRACEPARENT")
    if not tp:
        return
    from opentelemetry import context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": tp, "tracestate": os.environ.get("TRACESTATE", "")}
    ctx = TraceContextTextMapPropagator().extract(carrier)
    from opentelemetry import trace

    if trace.get_current_span(ctx).get_span_context().is_valid:
        context.attach(ctx)
    else:
        _report.warn_once("traceparent", f"TRACEPARENT={tp!r} is not a valid W3C traceparent; ignoring it")


def _instrument(settings) -> None:
    import wrapt

    from evlog.instrumentation import TARGETS

    for name, (module, target) in TARGETS.items():
        if settings.instrumentation_enabled(name):
            wrapt.register_post_import_hook(_activator(name, target), module)
    from . import others

    others.activate(settings)


_active: dict = {}


def _activator(name: str, target: str):
    def activate(_module):
        if name in _active:
            return
        try:
            import importlib

            mod, cls = target.split(":")
            inst = getattr(importlib.import_module(mod), cls)()
            inst.instrument()
            _active[name] = inst
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("evlog"):
                return  # that instrumentation is not built yet
            _report.warn_once(f"instrument-{name}", f"the {name} instrumentation could not start: {exc!r}")
        except Exception as exc:
            _report.warn_once(f"instrument-{name}", f"the {name} instrumentation could not start: {exc!r}")

    return activate


def active_instrumentors() -> dict:
    return dict(_active)


def _install_consumers(settings) -> None:
    if not settings.consumers:
        return
    try:
        import importlib

        processors = importlib.import_module("evlog.processors")
        install = getattr(processors, "install_default", None)
        if install:
            install(settings)
    except Exception as exc:
        _report.warn_once("consumers", f"the consumers could not start: {exc!r}")


def _install_console(settings) -> None:
    import importlib

    try:
        console = importlib.import_module("evlog.instrumentation.console")
    except ModuleNotFoundError:
        return  # not built yet
    try:
        console.install(settings)
    except Exception as exc:
        _report.warn_once("console", f"console capture could not start: {exc!r}")
