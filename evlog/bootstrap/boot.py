"""Set evlog up in this process, once: settings, SDK, exit hooks, instrumentations, consumers, capture.

Called from evlog's sitecustomize (every Python process under evlog-instrument), from the OTel
configurator entry point (plain opentelemetry-instrument) and from evlog.configure().
"""
from __future__ import annotations

import os
import sys
import threading

from evlog import _report, config

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
        _report.warn_once("boot", f"set-up failed, the program runs without evlog: {exc!r}")
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
        from evlog import run

        settings = run.prepare(settings, os.environ, os.environ.get("EVLOG_SERVICE_NAME") or _service())
    elif not os.environ.get("EVLOG_CONFIG_REPORTED"):
        for p in settings.problems:
            _report.warn_once(f"config-{p}", p)
    if settings.run_dir is None and settings.exporters.run_folder and not settings.sdk_disabled:
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
    if ready is not None:
        ready(settings)
    if (owner if capture is None else capture) and settings.capture != "off":
        _install_console(settings)
    return True


def _service() -> str:
    from .sdk import service_name

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
            _report.warn_once("traceparent", f"TRACEPARENT={carrier['traceparent']!r} is not a valid W3C "
                              "traceparent; ignoring it")
        else:
            given = ", ".join(f"{propagation.env_name(k)}={v!r}" for k, v in sorted(carrier.items()))
            _report.warn_once("traceparent", f"{given}: not a valid trace context for OTEL_PROPAGATORS="
                              f"{env.get('OTEL_PROPAGATORS')!r}; ignoring it")


def _instrument(settings) -> None:
    from evlog.instrumentation import TARGETS

    for name, (module, target) in TARGETS.items():
        if settings.instrumentation_enabled(name):
            when_imported(module, _activator(name, target), settled=True)
    from . import others

    others.activate(settings)


_active: dict = {}


def _activator(name: str, target: str):
    from evlog.instrumentation import SUBMODULES

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
    """The default consumers come with the tracer provider: installed when it is built (first use)."""
    if not settings.consumers:
        return
    from . import sdk

    def install_consumers(tracer_provider) -> None:
        try:
            import importlib

            processors = importlib.import_module("evlog.processors")
            install = getattr(processors, "install_default", None)
            if install:
                install(settings, tracer_provider, sdk.providers()[2])
        except Exception as exc:
            _report.warn_once("consumers", f"the consumers could not start: {exc!r}")

    sdk.when_built("traces", install_consumers)
    _gauges_timer()
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_gauges_timer)


GAUGES_AFTER_S = 1.0  # a process that makes no span reports the consumers' gauges once it has run this long


def _gauges_timer() -> None:
    """The consumers come with the first span; a process that has run GAUGES_AFTER_S without one (a Dask
    nanny, a supervisor) gets them then, so its load, memory and bytes are reported like any other's.
    A process that ends sooner (a `python -c` helper, a short subprocess) pays nothing for them."""
    from . import lifecycle, sdk

    tracer_provider = sdk.providers()[0] if sdk.providers() else None
    if tracer_provider is None or tracer_provider.built:
        return

    def build() -> None:
        if threading.main_thread().is_alive():  # not once the program is on its way out
            tracer_provider.real()

    timer = threading.Timer(GAUGES_AFTER_S, build)
    timer.daemon = True
    timer.name = "evlog-gauges-timer"
    timer.start()
    lifecycle.before_flush(timer.cancel)


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


# -- post-import hooks ------------------------------------------------------------------------------
# evlog's own, light ones (wrapt's module imports importlib.metadata, which every process would pay at
# start-up). One finder first on sys.meta_path wraps the loader of every watched module, to run its hooks
# once the module is executed, and of each thread's outermost import, to know when that thread has
# finished importing. A target is often imported by the import of another module: asyncio imports
# concurrent.futures, and asyncio is imported by wrapt (2.5, not 2.1), by OpenTelemetry, by tornado. A hook that
# ran then could find a module it imports itself half made (with wrapt 2.5, `import multiprocessing` first
# made the futures hook import a partial wrapt). A "settled" hook is held while such a module is being
# imported, and runs when the thread's outermost import is complete; otherwise (the target imported by
# the user's own module) at once, so that module can use what the hook instruments at import time.
# A module that another thread is importing is in sys.modules half made: a hook on it registered then
# (an instrumentor starting in one thread while another imports concurrent.futures.thread) waits for
# that import's loader to finish it. For that, the loaders of modules that hooks are registered on later
# (an instrumentor's submodules: watch()) are wrapped from the start, and the registration and the
# loader's end take turns under _hooks_lock.

_hooks: dict = {}  # module name -> [(hook, settled), ...], until that module is imported
_watched: set = set()  # names whose loader is wrapped even with no hook yet (watch())
_executing: set = set()  # names whose wrapped loader is running: their hooks run at its end
_hooks_lock = threading.RLock()
_thread = threading.local()  # .importing: an outermost import is running in this thread; .held: settled hooks waiting for its end
_finder = None


def when_imported(name: str, hook, *, settled: bool = False, after_otel: bool = False) -> None:
    """Call ``hook(module)`` once module ``name`` has been imported (at once if it is already).

    With ``settled`` (``after_otel`` is its former name), never while a module the hook may import is
    half made: the hook is then held until the thread's outermost import is complete (see above). Without
    it the hook runs as soon as the module is executed, inside the import that brought it: for hooks that
    import nothing (e.g. setting the OTel globals, which the rest of that import may already use)."""
    global _finder
    with _hooks_lock:
        if _finder is None:
            _finder = _Finder()
            sys.meta_path.insert(0, _finder)
        module = sys.modules.get(name)
        if module is None or name in _executing:  # not imported, or half made: its loader runs the hook
            _hooks.setdefault(name, []).append((hook, settled or after_otel))
            return
    _run(hook, module, settled or after_otel)


def watch(*names: str) -> None:
    """Wrap the loaders of these modules from now on, though no hook is registered on them yet: a hook
    registered later, while another thread is importing one, then runs once that import has made it."""
    global _finder
    with _hooks_lock:
        _watched.update(names)
        if _finder is None:
            _finder = _Finder()
            sys.meta_path.insert(0, _finder)


def _run(hook, module, settled: bool, executed: bool = False) -> None:
    """``executed``: called by the module's loader, at the end of its execution."""
    if settled and getattr(_thread, "importing", False) and _half_made(module, executed):
        _thread.held.append((hook, module))
        return
    try:
        hook(module)
    except Exception as exc:
        _report.warn_once(f"import-hook-{module.__name__}", f"set-up on import of {module.__name__} failed: {exc!r}")


# What settled hooks import besides the standard library and their target's own package: evlog, wrapt,
# OpenTelemetry and what OpenTelemetry's API imports.
_HOOK_IMPORTS = frozenset(("evlog", "wrapt", "opentelemetry", "typing_extensions", "importlib_metadata", "zipp",
                           "deprecated"))


def _half_made(target, executed: bool) -> bool:
    """Is a module that a hook on ``target`` may import being imported now (in any thread: other threads'
    only make this err on the side of holding)? A module in the standard library, in _HOOK_IMPORTS or in
    the target's own package; the target too, unless ``executed`` (its loader has just run it).

    The import system marks a module being imported with ``__spec__._initializing`` (CPython 3.4 to 3.14;
    its "partially initialized module" message reads it). Not set on a target that is being imported
    means a Python without that mark: hold then, as if something were half made."""
    if executed and getattr(getattr(target, "__spec__", None), "_initializing", None) is not True:
        return True
    stdlib = getattr(sys, "stdlib_module_names", ())
    own = target.__name__.partition(".")[0]
    for name, module in list(sys.modules.items()):
        if (executed and module is target) or not getattr(getattr(module, "__spec__", None), "_initializing", False):
            continue
        root = name.partition(".")[0]
        if root in stdlib or root in _HOOK_IMPORTS or root == own:
            return True
    return False


def _enter() -> bool:
    """This thread starts importing; True when this is its outermost import (the caller then _leave()s)."""
    if getattr(_thread, "importing", False):
        return False
    _thread.importing = True
    if not hasattr(_thread, "held"):
        _thread.held = []
    return True


def _leave() -> None:
    """The outermost import is over (done or failed): run the settled hooks held for it. Their own
    imports are outermost ones again, whose end runs what they bring in turn."""
    _thread.importing = False
    while _thread.held:
        held, _thread.held = _thread.held, []
        for hook, module in held:
            _run(hook, module, False)


def _asked_not_imported() -> bool:
    """Is find_spec called by importlib.util.find_spec (runpy, pkgutil, "is it installed?" checks) rather
    than by an import? That spec goes to its caller and may never be executed: its loader is left alone."""
    try:
        return sys._getframe(3).f_globals.get("__name__") == "importlib.util"  # ours, _find_spec, util.find_spec
    except ValueError:
        return False


class _Finder:
    """Finds nothing itself: asks the finders after it, and wraps the loader of a watched module or of a
    thread's outermost import."""

    def find_spec(self, name, path=None, target=None):
        watched = name in _hooks or name in _watched
        if not watched and (getattr(_thread, "importing", False) or _asked_not_imported()):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            if find is None and not watched and finder is not self:
                return None  # a legacy finder (find_module only): the import system asks it as it would
            spec = find(name, path, target) if find is not None else None
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, name)
        return spec


class _Loader:
    """The module's own loader, then the module's hooks; at the end of an outermost import, the held ones."""

    def __init__(self, loader, name: str):
        self.loader = loader
        self.name = name

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        if getattr(module, "__loader__", None) is self:  # the module keeps its real loader
            module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        outermost = _enter()
        with _hooks_lock:
            _executing.add(self.name)
        try:
            try:
                self.loader.exec_module(module)
            except BaseException:
                with _hooks_lock:
                    _executing.discard(self.name)  # its hooks wait for the next import of it
                raise
            with _hooks_lock:  # one step: a hook registered from now on finds the module made
                hooks = _hooks.pop(self.name, ())
                _executing.discard(self.name)
            if hooks:
                module = sys.modules.get(self.name, module)
                parent, _, child = self.name.rpartition(".")
                if parent in sys.modules:  # as the import system does next: a hook may use parent.child
                    setattr(sys.modules[parent], child, module)
            for hook, settled in hooks:
                _run(hook, module, settled, executed=True)
        finally:
            if outermost:
                _leave()

    def __getattr__(self, name: str):
        return getattr(self.loader, name)
