"""This process's resource attributes: evlog's, the user's (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME)
over them, then what the process learns (sdk.update_resource: a Dask worker's address). The SDK's
providers (observed/sdk.py) are built with them; the records channel (observed/records.py) sends them
in each hello.
"""
from __future__ import annotations

import os
import sys
import threading
from types import MappingProxyType

from evlog import notices
from evlog.process_identity import process_attributes

_attrs: dict = {}
lock = threading.RLock()  # also sdk's build lock: no update while a provider is built from them


def service_name() -> str:
    name = os.environ.get("EVLOG_SERVICE_NAME")
    if name:
        return name
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    base = os.path.basename(argv0)
    if base in ("", "-c", "-"):
        return "python"
    return base[:-3] if base.endswith(".py") else base


def _host_name() -> str:
    try:
        return os.uname().nodename
    except AttributeError:  # not POSIX
        import socket

        return socket.gethostname()


def user_attributes(environ=None, bad=None) -> dict:
    """OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, read as the SDK's OTELResourceDetector reads them
    (values percent-decoded; OTEL_SERVICE_NAME over service.name). An item that is not key=value is
    left out and handed to ``bad``."""
    environ = os.environ if environ is None else environ
    out = {}
    raw = environ.get("OTEL_RESOURCE_ATTRIBUTES")
    if raw:
        from urllib.parse import unquote

        for item in raw.split(","):
            key, eq, value = item.partition("=")
            if not eq:
                if bad is not None:
                    bad(item)
                continue
            out[key.strip()] = unquote(value.strip())
    if environ.get("OTEL_SERVICE_NAME"):
        out["service.name"] = environ["OTEL_SERVICE_NAME"]
    return out


def _not_key_value(item: str) -> None:
    notices.warn_once("resource-env", f"OTEL_RESOURCE_ATTRIBUTES: {item!r} is not key=value; ignoring it")


def attributes() -> dict:
    """This process's resource attributes (a copy): what every provider it builds carries."""
    if not _attrs:
        _attrs.update({
            "telemetry.sdk.language": "python",
            "telemetry.sdk.name": "opentelemetry",
            "telemetry.distro.name": "evlog",
            "service.name": service_name(),
            "host.name": _host_name(),
            "process.runtime.name": sys.implementation.name,
            "process.executable.name": os.path.basename(sys.executable or "python"),
            **process_attributes(),
        })
        run_id = os.environ.get("EVLOG_RUN_ID")
        if run_id:
            _attrs["evlog.run.id"] = run_id
        _attrs.update(user_attributes(bad=_not_key_value))
    return dict(_attrs)


def add(attrs: dict) -> None:
    with lock:
        attributes()
        _attrs.update(attrs)


class _View:
    """This process's resource as a span processor reads a span's (``span.resource.attributes``): the current
    attributes, read-only, without the SDK's Resource (for the task spans made here: pools' TaskSpan, a Dask
    worker's LiveSpans)."""

    __slots__ = ("attributes",)

    def __init__(self):
        self.attributes = MappingProxyType(_attrs)


view = _View()
