"""Set evlog up in this process, once: settings, SDK, exit hooks, instrumentations, consumers, capture.

Called from evlog's sitecustomize (every Python process under evlog-instrument), from the OTel
configurator entry point (plain opentelemetry-instrument) and from evlog.configure().
"""
from __future__ import annotations

import os

from evlog import config, notices
from evlog.observed.import_hooks import _enter, _leave, watch, when_imported

_started_pid = -1


def start(settings: config.Settings | None = None, *, capture: bool | None = None, ready=None) -> bool:
    """Set up this process; a second call in the same process does nothing. Never raises. ``ready``:
    called with the final settings once the telemetry is set up, before console capture starts."""
    global _started_pid
    if _started_pid == os.getpid():
        return False
    _started_pid = os.getpid()
    outermost = _enter()  # set-up is an import too (sitecustomize): settled hooks wait for its end
    try:
        return _start(settings, capture, ready)
    except Exception as exc:  # evlog must never stop the program from starting
        notices.warn_once("boot", f"set-up failed, the program runs without evlog: {exc!r}")
        return False
    finally:
        if outermost:
            _leave()


def started() -> bool:
    """Has set-up run in this process (whatever its outcome)?"""
    return _started_pid == os.getpid()


def _start(settings, capture, ready=None) -> bool:
    # The owner is the launched program's own process (same pid as the launcher's child).
    owner = os.environ.get("EVLOG_OWNER_PID") == str(os.getpid())
    if owner:
        del os.environ["EVLOG_OWNER_PID"]  # children are not owners
    if settings is None:
        settings = config.load()
    if owner and not os.environ.get("EVLOG_PREPARED"):
        from evlog.observed import run

        settings = run.prepare(settings, os.environ, os.environ.get("EVLOG_SERVICE_NAME") or _service())
    elif not os.environ.get("EVLOG_CONFIG_REPORTED"):
        for p in settings.problems:
            notices.warn_once(f"config-{p}", p)
    if settings.run_dir is None and settings.exporters.run_folder and not settings.sdk_disabled:
        from evlog.observed import run  # evlog.configure() or opentelemetry-instrument: this process makes the folder

        run_dir = run.default_run_dir(os.getcwd(), _service())
        os.environ["EVLOG_RUN_DIR"] = run_dir
        settings = settings.with_overrides(run_dir=run_dir)
    config.set_current(settings)
    if settings.sdk_disabled:
        return False
    from evlog.observed import lifecycle, sdk

    if not sdk.setup(settings):
        return False
    lifecycle.install()
    _join_parent_trace()
    if "TORCHELASTIC_RUN_ID" in os.environ and settings.instrumentation_enabled("torch_elastic"):
        # a torchrun worker: its ranks as resource attributes, even if it never imports torch.distributed.elastic
        from evlog.observed import torch_elastic

        torch_elastic.worker_start()
    _instrument(settings)
    _install_consumers(settings)
    if ready is not None:
        ready(settings)
    if (owner if capture is None else capture) and settings.capture != "off":
        _install_console(settings)
    return True


def _service() -> str:
    from evlog.observed.sdk import service_name

    return service_name()


def _join_parent_trace() -> None:
    """A parent that passed its context in the environment (TRACEPARENT, TRACESTATE and BAGGAGE, or the
    variables of the propagators OTEL_PROPAGATORS names: B3 for b3, ...): this process continues its trace."""
    env = os.environ
    named = {p.strip().lower() for p in env.get("OTEL_PROPAGATORS", "").split(",") if p.strip()}
    if named <= {"tracecontext", "baggage"} and not (env.get("TRACEPARENT") or env.get("BAGGAGE")):
        return  # nothing to continue: no need to load the propagators (their entry points cost ~20 ms)
    from opentelemetry import baggage, context

    from evlog import propagation

    carrier = propagation.from_environ(env)
    if not carrier:
        return
    ctx, parent = propagation.read(carrier)
    if parent is not None or baggage.get_all(ctx):
        context.attach(ctx)
    if parent is None and set(carrier) - {"tracestate", "baggage"}:
        if "traceparent" in carrier:
            notices.warn_once("traceparent", f"TRACEPARENT={carrier['traceparent']!r} is not a valid W3C "
                              "traceparent; ignoring it")
        else:
            given = ", ".join(f"{propagation.env_name(k)}={v!r}" for k, v in sorted(carrier.items()))
            notices.warn_once("traceparent", f"{given}: not a valid trace context for OTEL_PROPAGATORS="
                              f"{env.get('OTEL_PROPAGATORS')!r}; ignoring it")


def _instrument(settings) -> None:
    from evlog.observed.targets import TARGETS

    for name, (module, target) in TARGETS.items():
        if settings.instrumentation_enabled(name):
            when_imported(module, _activator(name, target), settled=True)
    from evlog.observed import other_instrumentors as others

    others.activate(settings)


_active: dict = {}


def _activator(name: str, target: str):
    from evlog.observed.targets import SUBMODULES

    watch(*SUBMODULES.get(name, ()))  # before anything can import them, so no thread imports one unseen

    def activate(_module):
        if name in _active:
            return
        try:
            import importlib

            mod, cls = target.split(":")
            inst = getattr(importlib.import_module(mod), cls)()
            inst.instrument()
            _active[name] = inst
        except Exception as exc:  # an evlog module missing too: a broken install is named, not hidden
            notices.warn_once(f"instrument-{name}", f"the {name} instrumentation could not start: {exc!r}")

    return activate


def active_instrumentors() -> dict:
    return dict(_active)


def _install_consumers(settings) -> None:
    from evlog.observed import default_consumers

    default_consumers.setup(settings)


def _install_console(settings) -> None:
    try:
        from evlog.observed import console

        console.install(settings)
    except Exception as exc:
        notices.warn_once("console", f"console capture could not start: {exc!r}")
