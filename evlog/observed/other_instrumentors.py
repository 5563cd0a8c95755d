"""Every other installed `opentelemetry_instrumentor` (Celery's, logging's, ...), as opentelemetry-instrument
would activate it, but only once its library is imported.

The launcher scans the entry points once per run (scan()) and hands the result to every process in
EVLOG_OTEL_INSTRUMENTORS, so children pay no metadata scan. Each process then activates an instrumentor
when the first module of the library it instruments is imported, or at once when it names none.
OTEL_PYTHON_DISABLED_INSTRUMENTATIONS is honoured by entry-point name.
"""
from __future__ import annotations

import os
import re

from evlog import notices

ENV = "EVLOG_OTEL_INSTRUMENTORS"


def scan_cached() -> list:
    """scan(), cached per set of installed packages (keyed by the sys.path folders and their mtimes)."""
    import sys
    import zlib

    key = []
    for p in sys.path:
        try:
            key.append(f"{p}:{os.stat(p or '.').st_mtime_ns}")
        except OSError:
            key.append(p)
    raw = "\n".join(key).encode()
    digest = f"{zlib.crc32(raw):08x}{zlib.adler32(raw):08x}"  # zlib: hashlib would load OpenSSL
    cache_dir = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "evlog")
    path = os.path.join(cache_dir, f"instrumentors-{digest}.json")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        if text == "[]":  # nothing else installed (the usual case): no json to import
            return []
        import json

        return json.loads(text)
    except (OSError, ValueError):
        pass
    found = scan()
    try:
        os.makedirs(cache_dir, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        import json

        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(found, fh)
        os.replace(tmp, path)
    except OSError:
        pass
    return found


def scan() -> list:
    """[[entry-point name, "module:Class", [top-level modules of the instrumented library]], ...]."""
    from importlib import metadata

    out = []
    try:
        eps = metadata.entry_points(group="opentelemetry_instrumentor")
    except Exception:
        return out
    modules_of = None
    for ep in eps:
        if ep.value.startswith("evlog."):
            continue
        dist = getattr(ep, "dist", None)
        reqs = []
        try:
            for r in (dist.requires or []) if dist else []:
                if 'extra == "instruments"' in r.replace("'", '"'):
                    reqs.append(re.split(r"[\s<>=!~;\[(]", r, maxsplit=1)[0].lower().replace("_", "-"))
        except Exception:
            pass
        modules: list[str] = []
        if reqs:
            if modules_of is None:
                modules_of = {}
                for mod, dists in metadata.packages_distributions().items():
                    for d in dists:
                        modules_of.setdefault(d.lower().replace("_", "-"), []).append(mod)
            for r in reqs:
                modules.extend(modules_of.get(r, []))
            if not modules:
                continue  # its library is not installed: nothing to instrument
        out.append([ep.name, ep.value, sorted(set(modules))])
    return out


def activate(settings) -> None:
    raw = os.environ.get(ENV)
    if not raw:
        return
    import json

    try:
        entries = json.loads(raw)
    except ValueError:
        return
    from evlog.observed.import_hooks import when_imported

    for name, target, modules in entries:
        if not settings.instrumentation_enabled(name):
            continue
        hook = _activator(name, target)
        if not modules:
            hook(None)
        for m in modules:
            when_imported(m, hook, settled=True)


_done: set = set()


def _activator(name: str, target: str):
    def activate(_module):
        if name in _done:
            return
        _done.add(name)
        try:
            import importlib

            mod, _, attr = target.partition(":")
            obj = importlib.import_module(mod)
            for part in attr.split("."):
                obj = getattr(obj, part)
            obj().instrument()
        except Exception as exc:
            notices.warn_once(f"other-{name}", f"the {name} instrumentation ({target}) could not start: {exc!r}")

    return activate
