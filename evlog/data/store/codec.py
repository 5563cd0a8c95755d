"""How values sit in the store's columns: JSON text (bytes as hex, anything else as its str), uint64s
clamped to SQLite's INTEGER, and a process's name where it has no Dask worker address."""
from __future__ import annotations

import json
from typing import Any

I64_MAX = (1 << 63) - 1


def u64(v: Any) -> Any:
    """A uint64 (a time, a count) as SQLite's signed 64-bit INTEGER can hold it: values past 2**63 - 1,
    which no clock or counter reaches but a request may carry, are stored as 2**63 - 1."""
    return I64_MAX if v is not None and v > I64_MAX else v


def _default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_default, check_circular=False).encode
"""Compact JSON text of a value (the columns, and the dashboard's answers)."""


def loads(s: str | None) -> Any:
    """A JSON column's value: {} for NULL, "" for ""."""
    if not s:
        return {} if s is None else s
    return json.loads(s)


def process_name(service: str, role: str, pid, host: str) -> str:
    """A process as evlog names it where not by its Dask worker address: ``app worker 4242@host``."""
    return " ".join(x for x in (service, role if role and role not in service else "",
                                f"{pid}@{host}" if pid else host) if x) or "unknown"

