"""Values as records carry them, and the records source of one kind per process: what turns telemetry into
records without the SDK (evlog's own metrics, log records and spans: own_metrics.py, own_logs.py,
own_spans.py) and with it (the SDK's providers: sdk_records.py).

Records are tuples of atoms (evlog/wire/otel.py names their fields); marshal carries them to the run's
exporter process, and the garbage collector stops tracking them.
"""
from __future__ import annotations

import os

from evlog.observed import records

_ATOMS = (str, int, float, bool, bytes, type(None))


def atom(value, depth: int = 0):
    """``value`` as marshal carries it: atoms as they are, sequences as tuples, mappings as dicts with str
    keys; anything else as its str() (what the SDK's encoder could not have sent either)."""
    if type(value) in _ATOMS:
        return value
    if depth > 16:
        return str(value)
    if isinstance(value, (list, tuple)):
        return tuple(atom(v, depth + 1) for v in value)
    if isinstance(value, dict) or hasattr(value, "items"):
        try:
            return {str(k): atom(v, depth + 1) for k, v in value.items()}
        except Exception:
            return str(value)
    for base in (bool, int, float, str, bytes):  # subclasses: an IntEnum, a str subclass
        if isinstance(value, base):
            return base(value)
    return str(value)


def attrs(attributes):
    """Attributes as atoms, or None when there are none (a log record's may hold any value)."""
    if not attributes:
        return None
    out = copy(attributes)
    for k, v in out.items():
        if type(v) not in _ATOMS and type(v) is not tuple:
            out[k] = atom(v)
    return out


def copy(attributes) -> dict:
    fn = getattr(attributes, "copy", None)  # BoundedAttributes.copy() is a plain dict's copy, in C
    return fn() if fn is not None else dict(attributes)


class Appender:
    """``append(item)`` to this process's source of ``kind`` (made again in a forked child:
    evlog.observed.records starts afresh there), its items converted by ``convert(items, scopes)`` in the
    shipping thread when given (``scopes``: a cache of the converter's, made with the source)."""

    def __init__(self, kind: str, convert=None, scopes=None):
        self.kind = kind
        self.convert = convert
        self.scopes = scopes
        self._pid = -1
        self._append = None

    def __call__(self, item) -> None:
        if self._pid != os.getpid():
            convert = self.convert
            if convert is not None:
                scopes = self.scopes() if self.scopes is not None else None
                self._append = records.source(self.kind, convert=lambda items: convert(items, scopes)).append
            else:
                self._append = records.source(self.kind).append
            self._pid = os.getpid()
        self._append(item)
