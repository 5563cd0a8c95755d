"""Values as a browser's JSON can take them: NaN and infinities become null; plottable numbers; ns -> s."""
from __future__ import annotations

import math
from typing import Any


def finite(v: Any) -> Any:
    """JSON for browsers: NaN and infinities become null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [finite(x) for x in v]
    return v


def num(v: Any) -> float | None:
    """A JSON number that can be plotted (bools are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def secs(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9

