"""The tests' OTLP receiver: a real evlog.data.receiver.OTLPReceiver on loopback (gRPC and HTTP)
that keeps every decoded row in memory, plus the OTEL_* variables that point exporters at it.

    r = CollectingReceiver().start()
    env = {**os.environ, **r.env("grpc")}            # or r.env("http/protobuf")
    ... run something under evlog-instrument with env ...
    r.wait_for(lambda: any(s["name"] == "futures.task inc" for s in r.spans()))
    r.stop()

Rows are those of evlog.data.otlp_decode (span, log and metric point dicts). ``fail_with(status)`` makes
every export fail on purpose (a gRPC code name such as "UNAVAILABLE", or an HTTP status such as 503 or
429; each mapped to the other transport) until ``clear_failure()``, or for the next ``times`` exports.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from evlog.data.receiver import OTLPReceiver

PROTOCOLS = ("grpc", "http/protobuf", "http/json")

# gRPC code name -> HTTP status (for fail_with), after the OTLP retry rules: the retryable gRPC
# codes map to the retryable HTTP statuses.
_GRPC_TO_HTTP = {
    "INVALID_ARGUMENT": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "RESOURCE_EXHAUSTED": 429,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_HTTP_TO_GRPC = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "RESOURCE_EXHAUSTED",
    429: "UNAVAILABLE",  # retryable on both sides, as 429 is for OTLP/HTTP
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


class CollectingReceiver(OTLPReceiver):
    """An OTLPReceiver whose sink keeps all rows, thread-safe, with bounded waits."""

    def __init__(self, **kwargs: Any):
        super().__init__(self._collect, **kwargs)
        self._cond = threading.Condition(threading.RLock())
        self._rows: dict[str, list] = {"traces": [], "logs": [], "metrics": []}
        self._failing = threading.Lock()
        self._failure: tuple[int, str, str] | None = None
        self._failures_left: int | None = None

    def _collect(self, signal: str, rows: list) -> None:
        with self._cond:
            self._rows[signal].extend(rows)
            self._cond.notify_all()

    def spans(self) -> list[dict]:
        with self._cond:
            return list(self._rows["traces"])

    def logs(self) -> list[dict]:
        with self._cond:
            return list(self._rows["logs"])

    def metrics(self) -> list[dict]:
        with self._cond:
            return list(self._rows["metrics"])

    def clear(self) -> None:
        with self._cond:
            for rows in self._rows.values():
                rows.clear()

    def wait_for(self, pred: Callable[[], Any], timeout: float = 30.0) -> Any:
        """Wait until ``pred()`` is truthy (re-checked whenever rows arrive, and at least every
        0.2 s); returns its value. On timeout raises AssertionError showing what arrived."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = pred()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"receiver: condition not met within {timeout} s; {self.describe()}")
                self._cond.wait(min(left, 0.2))

    def describe(self, limit: int = 20) -> str:
        """A short account of what arrived, for failure messages."""
        with self._cond:
            spans, logs, metrics = self._rows["traces"], self._rows["logs"], self._rows["metrics"]
            span_names = sorted({s["name"] for s in spans})
            events = sorted({r["event_name"] or "(log)" for r in logs})
            metric_names = sorted({m["name"] for m in metrics})
        stats = self.stats()
        return (
            f"{len(spans)} spans {span_names[:limit]}, {len(logs)} logs {events[:limit]}, "
            f"{len(metrics)} metric points {metric_names[:limit]}; requests {stats['requests']}, "
            f"rejected {stats['rejected']}, sink errors {stats['sink_errors']}"
            + (f", last error: {stats['last_error']}" if stats["last_error"] else "")
        )

    def fail_with(self, status: str | int, times: int | None = None, message: str | None = None) -> None:
        """Fail every export (or the next ``times``) with ``status``: a gRPC code name
        ("UNAVAILABLE", "RESOURCE_EXHAUSTED", ...) or an HTTP status (503, 429, ...)."""
        import grpc

        if isinstance(status, int) and not isinstance(status, bool):
            http_status = status
            code = _HTTP_TO_GRPC.get(status, "UNKNOWN" if status < 500 else "INTERNAL")
        elif isinstance(status, str) and status.upper() in grpc.StatusCode.__members__:
            code = status.upper()
            http_status = _GRPC_TO_HTTP.get(code, 500)
        else:
            raise ValueError(f"fail_with: expected a gRPC code name or an HTTP status, got {status!r}")
        if not 400 <= http_status <= 599:
            raise ValueError(f"fail_with: HTTP status {http_status} is not an error")
        with self._failing:
            self._failure = (http_status, code, message or f"failing on purpose ({code}, {http_status})")
            self._failures_left = times

    def clear_failure(self) -> None:
        with self._failing:
            self._failure = None
            self._failures_left = None

    def _refusal(self) -> tuple[int, str, str] | None:
        with self._failing:
            f = self._failure
            if f is not None and self._failures_left is not None:
                self._failures_left -= 1
                if self._failures_left <= 0:
                    self._failure = None
                    self._failures_left = None
            return f

    def env(self, protocol: str = "grpc") -> dict[str, str]:
        """OTEL_* variables that send all three signals here with short export delays."""
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
        endpoint = self.grpc_endpoint if protocol == "grpc" else self.http_endpoint
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_METRICS_EXPORTER": "otlp",
            "OTEL_LOGS_EXPORTER": "otlp",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_BLRP_SCHEDULE_DELAY": "100",
            "OTEL_METRIC_EXPORT_INTERVAL": "200",
        }
