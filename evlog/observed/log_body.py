"""Event metadata -> an OTel log body (AnyValue): every key kept, nothing raised. For evlog.bridge's and
torch's events (torch_events/otel.py) and the messages of log_event (events.py).

torchelastic says metadata values are str, int, float, bool or None, but programs pass anything:
nested dicts, tuples, enums, numpy scalars, tensors, their own objects. The OTLP encoders raise on a
type they do not know, and one such record fails its whole export batch, so the body is made safe
when the event is recorded: plain values pass, containers are converted item by item, numbers-like
objects become numbers, anything else becomes its ``str()``. None stays None (an empty AnyValue).
A dict of plain values, the usual case, is only copied (the program may change it afterwards).
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping
from enum import Enum
from typing import Any

MAX_DEPTH = 8  # deeper (or cyclic) structures become their str() at this depth
_PLAIN = frozenset({str, float, bool, bytes, type(None)})
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1  # OTLP int_value is int64


def body(metadata: Any) -> Any:
    """``metadata`` as a log body; a shallow copy when it is a dict of plain values (the hot path)."""
    if type(metadata) is dict:
        for k, v in metadata.items():
            t = type(v)
            if t in _PLAIN or (t is int and _INT_MIN <= v <= _INT_MAX):
                if type(k) is str:
                    continue
            return value(metadata)
        return metadata.copy()
    return value(metadata)


def value(v: Any, depth: int = 0) -> Any:
    """Any Python value as an AnyValue-compatible value (str, bool, int64, float, bytes, list, dict, None)."""
    t = type(v)
    if t in _PLAIN:
        return v
    if t is int:
        return v if _INT_MIN <= v <= _INT_MAX else str(v)
    try:
        return _convert(v, depth)
    except Exception:  # a __str__, __iter__ or item() of the program's own that raises
        return _text(v)


def key(k: Any) -> str:
    if type(k) is str:
        return k
    if isinstance(k, Enum):
        k = k.value
    return str.__str__(k) if isinstance(k, str) else _text(k)


def _convert(v: Any, depth: int) -> Any:
    if isinstance(v, bool):
        return bool(v)
    if isinstance(v, Enum):
        return value(v.value, depth + 1) if depth < MAX_DEPTH else _text(v)
    if isinstance(v, str):
        return str.__str__(v)  # str subclasses (e.g. str-Enums) as plain text
    if isinstance(v, numbers.Integral):
        i = int(v)
        return i if _INT_MIN <= i <= _INT_MAX else str(i)
    if isinstance(v, numbers.Real):
        return float(v)
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    if depth >= MAX_DEPTH:
        return _text(v)
    if isinstance(v, Mapping):
        return {key(k): value(x, depth + 1) for k, x in v.items()}
    if isinstance(v, (list, tuple, set, frozenset)):
        return [value(x, depth + 1) for x in v]
    if getattr(v, "ndim", None) == 0 and callable(getattr(v, "item", None)):
        return value(v.item(), depth + 1)  # numpy and torch scalars
    return _text(v)


def _text(v: Any) -> str:
    try:
        return str(v)
    except Exception:
        try:
            return repr(v)
        except Exception:
            return f"<{type(v).__name__}>"
