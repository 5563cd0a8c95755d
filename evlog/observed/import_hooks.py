"""Post-import hooks: run a function once a module is imported, never on a half-made module (the
why is below).
"""
from __future__ import annotations

import sys
import threading

from evlog import notices

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
_made: set = set()  # names whose wrapped loader has run them (and taken their hooks)
_hooks_lock = threading.RLock()
_thread = threading.local()  # .importing: an outermost import is running in this thread; .held: settled hooks waiting for its end
_finder = None


def when_imported(name: str, hook, *, settled: bool = False) -> None:
    """Call ``hook(module)`` once module ``name`` has been imported (at once if it is already).

    With ``settled``, never while a module the hook may import is
    half made: the hook is then held until the thread's outermost import is complete (see above). Without
    it the hook runs as soon as the module is executed, inside the import that brought it: for hooks that
    import nothing (e.g. setting the OTel globals, which the rest of that import may already use)."""
    global _finder
    with _hooks_lock:
        if _finder is None:
            _finder = _Finder()
            sys.meta_path.insert(0, _finder)
        module = sys.modules.get(name)
        if module is None or name in _executing or (name in _watched and name not in _made and _initializing(module)):
            # not imported, or half made: its loader runs the hook (a watched module is in sys.modules, marked
            # initializing, a moment before its wrapped loader starts: that moment counts as half made too)
            _hooks.setdefault(name, []).append((hook, settled))
            return
    _run(hook, module, settled)


def _initializing(module) -> bool:
    """Is the import system still making ``module`` (``__spec__._initializing``, CPython 3.4 to 3.14)?"""
    return getattr(getattr(module, "__spec__", None), "_initializing", False) is True


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
        notices.warn_once(f"import-hook-{module.__name__}", f"set-up on import of {module.__name__} failed: {exc!r}")


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
                _made.add(self.name)
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
