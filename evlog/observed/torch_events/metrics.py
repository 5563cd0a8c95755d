"""torchelastic metric points (``put_metric``, ``@prof``) -> OTel instruments ``torchelastic.{group}.{name}``.

torchelastic has one call for every kind of figure, so the instrument kind comes from the name:
- ``*.duration.ms`` (what ``@prof`` measures): a histogram, unit ``ms``;
- ``*.success``, ``*.failure`` (``@prof``), the agent's ``run_*`` and worker-state names
  (``workers.{role}.healthy``, ...), and names ending in ``count``/``total``: a counter of the values;
- anything else (``remaining_restarts``, ``flakiness``, a program's own figures): a gauge, last value.
Instruments are made once per name; a value that is not a number is reported once and skipped.
"""
from __future__ import annotations

import re
from typing import Any

from evlog import notices, stats

SCOPE = "evlog.torch_elastic"
_COUNTED = frozenset({"success", "failure", "count", "total", "unknown", "init", "healthy", "unhealthy",
                      "stopped", "succeeded", "failed"})
_BAD = re.compile(r"[^-_./a-zA-Z0-9]")


def instrument_name(group: Any, name: Any) -> str:
    """``torchelastic.{group}.{name}``, with characters OTel names cannot hold replaced by ``_``."""
    return _BAD.sub("_", f"torchelastic.{group}.{name}")[:255]


def kind(name: str) -> str:
    if name.endswith(".duration.ms"):
        return "histogram"
    last = name.rsplit(".", 1)[-1]
    if last in _COUNTED or last.startswith("run_") or last.endswith(("_count", "_total")):
        return "counter"
    return "gauge"


class TorchMetrics:
    """Records torchelastic metric points on one meter; callable as ``(group, name, value)``."""

    def __init__(self, meter):
        self._meter = meter
        self._record: dict = {}  # (group, name) -> bound record method of its instrument

    def __call__(self, group: Any, name: Any, value: Any) -> None:
        rec = self._record.get((group, name))
        if rec is None:
            rec = self._record[(group, name)] = self._make(group, name)
        t = type(value)
        if t is not int and t is not float:
            value = self._number(group, name, value)
            if value is None:
                return
        rec(value)

    def _make(self, group: Any, name: Any):
        full = instrument_name(group, name)
        k = kind(str(name))
        if k == "histogram":
            return self._meter.create_histogram(full, unit="ms", description="torchelastic @prof duration").record
        if k == "counter":
            return self._meter.create_counter(full, description="torchelastic put_metric, summed").add
        return self._meter.create_gauge(full, description="torchelastic put_metric, last value").set

    @staticmethod
    def _number(group: Any, name: Any, value: Any) -> float | int | None:
        if isinstance(value, bool):
            return int(value)
        try:
            return float(value)
        except Exception:
            stats.incr("torchelastic.metric_not_a_number")
            notices.warn_once(f"torch-metric-{group}.{name}",
                              f"torchelastic metric {group}.{name} got a value that is not a number ({value!r}); "
                              "such points are skipped and counted")
            return None
