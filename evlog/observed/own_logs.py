"""evlog's own log records without the OTel SDK: its events (``dask.log_event``, ``evlog.log_event``) and
the Python logging records it takes (python_logging.py).

Dask publishes events of its own in every cluster (a worker added or removed) and logs warnings; the
process that does so need not have made any telemetry of its own. So while this process's
LoggerProvider is not built (the program has not asked for a logger), a record evlog makes becomes an
``otel.log`` record at once (evlog/wire/otel.py: the record the SDK's log records become,
sdk_records.LogRecords), in the current span's context, with the attribute limits the SDK would apply
(OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT and _VALUE_LENGTH_LIMIT, else OTEL_ATTRIBUTE_COUNT_LIMIT and
_VALUE_LENGTH_LIMIT). Once the program has built it, records go through it, so the log record processors
the program added there (a redaction) see evlog's records too, as they always did.
"""
from __future__ import annotations

import os
import threading
from time import time_ns

from evlog import notices
from evlog.observed.atoms import Appender, atom, attrs
from evlog.wire import kinds

_append = Appender(kinds.OTEL_LOG)
_limits: list = []  # (max attributes, max value length or None), read once


class Logger:
    """``emit()`` as the OTel Logs API's, for one instrumentation scope."""

    __slots__ = ("name", "version", "scope", "_sdk", "_lock")

    def __init__(self, name: str, version: str | None = ""):
        self.name = name
        self.version = version
        self.scope = (name, version, "", None)  # an otel.log record's scope, as the SDK's would be
        self._sdk = None
        self._lock = threading.Lock()

    def emit(self, *, timestamp: int | None = None, observed_timestamp: int | None = None,
             severity_number: int | None = None, severity_text: str | None = None, body=None,
             attributes: dict | None = None, event_name: str | None = None) -> None:
        provider = _provider()
        if provider is None:
            return
        if provider.built:
            self._through_sdk(provider).emit(
                timestamp=timestamp, observed_timestamp=observed_timestamp, severity_text=severity_text,
                severity_number=_severity(severity_number), body=body, attributes=attributes, event_name=event_name)
            return
        from opentelemetry import trace

        sc = trace.get_current_span().get_span_context()
        bounded, dropped = _bounded(attributes)
        _append((timestamp, observed_timestamp if observed_timestamp is not None else time_ns(), sc.trace_id,
                 sc.span_id, int(sc.trace_flags), severity_text, severity_number, atom(body), bounded,
                 event_name or None, self.scope, dropped or None))

    def _through_sdk(self, provider):
        logger = self._sdk
        if logger is None:
            with self._lock:
                if self._sdk is None:
                    self._sdk = provider.get_logger(self.name, self.version)
                logger = self._sdk
        return logger


def _provider():
    """This process's LoggerProvider (evlog's lazy one), or None when its logs go nowhere."""
    from evlog import config
    from evlog.observed import sdk

    providers = sdk.providers()
    if not providers or not config.get().exporters.logs:
        return None
    return providers[1]


def _severity(number: int | None):
    if number is None:
        return None
    from opentelemetry._logs import SeverityNumber

    return SeverityNumber(number)


def _bounded(attributes) -> tuple:
    """(attributes as atoms or None, how many the limits dropped)."""
    if not attributes:
        return None, 0
    from opentelemetry.attributes import BoundedAttributes

    maxlen, max_value_len = _limits[0] if _limits else _read_limits()
    out = BoundedAttributes(maxlen=maxlen, attributes=attributes, immutable=False, max_value_len=max_value_len,
                            extended_attributes=True)
    return attrs(out), out.dropped


def _read_limits() -> tuple:
    count = _env_int("OTEL_LOGRECORD_ATTRIBUTE_COUNT_LIMIT", _env_int("OTEL_ATTRIBUTE_COUNT_LIMIT", 128))
    length = _env_int("OTEL_LOGRECORD_ATTRIBUTE_VALUE_LENGTH_LIMIT", _env_int("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", None))
    _limits.append((count, length))
    return _limits[0]


def _env_int(name: str, default):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        notices.warn_once(f"env-{name}", f"{name}={raw!r} is not a whole number, 0 or more; using {default}")
        return default
