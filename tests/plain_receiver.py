"""A plain OTLP/gRPC receiver for tests: grpcio and the opentelemetry-proto services, nothing of evlog.

Tests that check what evlog sends use this, so evlog's output is judged by the OTel proto definitions,
not by evlog's own decoder (tests/receiver.py is evlog's receiver, for everything else).

    with PlainReceiver() as r:
        env = {**os.environ, **r.env()}
        ... run something under evlog-instrument ...
        spans = r.spans()   # [(ResourceSpans' resource attributes as a dict, Span message), ...]
        logs = r.logs()     # [(ResourceLogs' resource attributes as a dict, LogRecord message), ...]
        metrics = r.metrics()  # [(ResourceMetrics' resource attributes as a dict, Metric message), ...]
"""
from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


def value(v):
    """An AnyValue message as a Python value."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(value(x) for x in v.array_value.values)
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def attrs(kvs) -> dict:
    return {kv.key: value(kv.value) for kv in kvs}


class PlainReceiver:
    def __init__(self, port: int = 0):
        self.requests: list = []  # ExportTraceServiceRequest messages, as received
        self.log_requests: list = []  # ExportLogsServiceRequest messages, as received
        self.metric_requests: list = []  # ExportMetricsServiceRequest messages, as received
        self._cond = threading.Condition()
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                with receiver._cond:
                    receiver.requests.append(request)
                    receiver._cond.notify_all()
                return trace_service_pb2.ExportTraceServiceResponse()

        class Logs(logs_service_pb2_grpc.LogsServiceServicer):
            def Export(self, request, context):
                with receiver._cond:
                    receiver.log_requests.append(request)
                    receiver._cond.notify_all()
                return logs_service_pb2.ExportLogsServiceResponse()

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                with receiver._cond:
                    receiver.metric_requests.append(request)
                    receiver._cond.notify_all()
                return metrics_service_pb2.ExportMetricsServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(Logs(), self.server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        self.port = self.server.add_insecure_port(f"127.0.0.1:{port}")

    def __enter__(self):
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop(None)

    def env(self) -> dict:
        return {"OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{self.port}",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_INSECURE": "true"}

    def logs(self) -> list:
        """[(ResourceLogs' resource attributes as a dict, LogRecord message), ...]"""
        with self._cond:
            reqs = list(self.log_requests)
        return [(attrs(rl.resource.attributes), rec)
                for req in reqs for rl in req.resource_logs for sl in rl.scope_logs for rec in sl.log_records]

    def metrics(self) -> list:
        """[(ResourceMetrics' resource attributes as a dict, Metric message), ...]"""
        with self._cond:
            reqs = list(self.metric_requests)
        return [(attrs(rm.resource.attributes), m)
                for req in reqs for rm in req.resource_metrics for sm in rm.scope_metrics for m in sm.metrics]

    def spans(self) -> list:
        with self._cond:
            reqs = list(self.requests)
        return [(attrs(rs.resource.attributes), span)
                for req in reqs for rs in req.resource_spans for ss in rs.scope_spans for span in ss.spans]

    def wait_for(self, pred, timeout: float = 30.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                result = pred()
                if result:
                    return result
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; {len(self.requests)} requests arrived")
                self._cond.wait(min(left, 0.2))
