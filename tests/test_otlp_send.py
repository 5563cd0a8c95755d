"""evlog/exporter/otlp_send.py: the spans evlog encodes, sent over OTLP/gRPC and OTLP/HTTP, with every
OTEL_EXPORTER_OTLP_* variable the stock span exporters read, one test per variable.

Against real servers on loopback: a grpcio server with the opentelemetry-proto TraceService servicer
(plain, TLS, and TLS that requires a client certificate) and an HTTP server from the standard library
(plain, HTTPS, HTTPS that requires a client certificate), with a CA, server and client certificates made
here. What a server got is read with opentelemetry-proto, never with evlog's decoder; a raw TCP relay
counts the bytes on the wire where only they can tell (gRPC compression)."""
from __future__ import annotations

import base64
import datetime
import gzip
import http.server
import ipaddress
import json
import os
import socket
import ssl
import threading
import zlib
from concurrent import futures

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

from evlog import stats
from evlog.builders.span_data import SpanData, SpanEvent, SpanLink, readable
from evlog.exporter import export_failures, otlp_send, span_encoding

ExportTraceServiceRequest = trace_service_pb2.ExportTraceServiceRequest


def _spans(n: int = 3, big: int = 0) -> list:
    res = Resource({"service.name": "app", "process.pid": 7})
    scope = InstrumentationScope("evlog.dask", "0.1")
    return [SpanData(f"dask.task inc-{i}", SpanContext(0xABC, i + 1, False), None, res,
                     {"dask.task.key": f"inc-{i}", "pad": "z" * big}, [SpanEvent("transition", 5, {"n": i})],
                     instrumentation_scope=scope) for i in range(n)]


# ---- certificates -----------------------------------------------------------------------------------------

def _name(cn: str):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer_name, issuer_key, ca: bool = False, server: bool = False):
    now = datetime.datetime.now(datetime.timezone.utc)
    b = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer_name)
         .public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        b = b.add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                         x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                            critical=False)
    return b.sign(issuer_key, hashes.SHA256())


class Certs:
    """A CA made for the test, a server certificate for 127.0.0.1/localhost and a client certificate, as
    PEM files in ``folder`` (``ca``, ``server_cert``, ``server_key``, ``client_cert``, ``client_key``)."""

    def __init__(self, folder):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = _cert("evlog test CA", ca_key, _name("evlog test CA"), ca_key, ca=True)
        server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
        server = _cert("127.0.0.1", server_key, ca.subject, ca_key, server=True)
        client = _cert("evlog client", client_key, ca.subject, ca_key)
        for name, data in (("ca", ca.public_bytes(serialization.Encoding.PEM)),
                           ("server_cert", server.public_bytes(serialization.Encoding.PEM)),
                           ("server_key", _pem_key(server_key)),
                           ("client_cert", client.public_bytes(serialization.Encoding.PEM)),
                           ("client_key", _pem_key(client_key))):
            path = os.path.join(folder, name + ".pem")
            with open(path, "wb") as f:
                f.write(data)
            setattr(self, name, path)

    def read(self, name: str) -> bytes:
        with open(getattr(self, name), "rb") as f:
            return f.read()


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return Certs(str(tmp_path_factory.mktemp("certs")))


@pytest.fixture(autouse=True)
def _no_otel_variables(monkeypatch):
    """Only what a test sets: no OTEL_* of the developer's shell."""
    for k in list(os.environ):
        if k.startswith(("OTEL_", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_")) or k.lower().endswith("_proxy"):
            monkeypatch.delenv(k)


# ---- the gRPC receiver --------------------------------------------------------------------------------------

class GrpcReceiver:
    """The TraceService on three ports: ``plain``, ``tls``, ``mtls`` (a client certificate required)."""

    def __init__(self, certs: Certs):
        self.got: list = []  # (ExportTraceServiceRequest, metadata dict)
        self.answer = None  # a callable(context) run before answering: abort, wait, ...
        self.response = trace_service_pb2.ExportTraceServiceResponse()
        receiver = self

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver.got.append((request, dict(context.invocation_metadata())))
                if receiver.answer is not None:
                    receiver.answer(context)
                return receiver.response

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        pair = [(certs.read("server_key"), certs.read("server_cert"))]
        self.plain = self.server.add_insecure_port("127.0.0.1:0")
        self.tls = self.server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(pair))
        self.mtls = self.server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials(
            pair, root_certificates=certs.read("ca"), require_client_auth=True))
        self.server.start()


@pytest.fixture
def grpc_receiver(certs):
    r = GrpcReceiver(certs)
    try:
        yield r
    finally:
        r.server.stop(None)


def _export_grpc(n: int = 3) -> otlp_send.Sent:
    sender = otlp_send.GrpcSpans()
    try:
        return sender.export(_spans(n))
    finally:
        sender.shutdown()


def _assert_got_the_spans(request, n: int = 3) -> None:
    assert request == encode_spans([readable(s) for s in _spans(n)])


def test_grpc_traces_endpoint_wins_over_the_general_one(grpc_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{_dead_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.plain}")
    assert _export_grpc() == otlp_send.Sent(True)
    [(request, _)] = grpc_receiver.got
    _assert_got_the_spans(request)


def test_grpc_general_endpoint_https_is_tls_even_with_insecure_set(grpc_receiver, certs, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://127.0.0.1:{grpc_receiver.tls}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", certs.ca)
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_endpoint_without_a_scheme_is_tls_unless_insecure(grpc_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"127.0.0.1:{grpc_receiver.plain}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    assert not _export_grpc().ok and not grpc_receiver.got  # TLS spoken to the plain port
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_traces_insecure_true_is_plain_text(grpc_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"127.0.0.1:{grpc_receiver.plain}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "false")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "True")
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_http_scheme_is_plain_text_and_traces_insecure_false_makes_it_tls(grpc_receiver, certs, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.tls}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    assert not _export_grpc().ok  # plain text to the TLS port
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_INSECURE", "false")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", certs.ca)
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_certificate_is_the_ca_trusted_and_without_it_the_systems_roots_refuse(grpc_receiver, certs, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{grpc_receiver.tls}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    assert not _export_grpc().ok and not grpc_receiver.got
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", certs.ca)
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_traces_certificate_takes_the_traces_client_key_and_certificate(grpc_receiver, certs, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{grpc_receiver.mtls}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", certs.ca)
    # the general client key and certificate are not the traces' ones: the stock exporter takes the
    # traces variables together once OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE is set
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", certs.client_key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", certs.client_cert)
    assert not _export_grpc().ok and not grpc_receiver.got
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", certs.client_key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", certs.client_cert)
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_general_client_key_and_certificate_for_mutual_tls(grpc_receiver, certs, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"https://127.0.0.1:{grpc_receiver.mtls}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", certs.ca)
    assert not _export_grpc().ok and not grpc_receiver.got  # the server asks for a client certificate
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_KEY", certs.client_key)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", certs.client_cert)
    assert _export_grpc().ok and len(grpc_receiver.got) == 1


def test_grpc_a_client_certificate_without_its_key_is_said_and_left_out(grpc_receiver, certs, monkeypatch, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{grpc_receiver.tls}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", certs.ca)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", certs.client_cert)  # and no key: gRPC
    said = say(_export_grpc)  # itself would abort the process
    assert said[0].ok and len(grpc_receiver.got) == 1
    assert "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY and OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE go together" in said[1]


def test_grpc_headers_percent_decoded_traces_ones_win(grpc_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.plain}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1")
    assert _export_grpc().ok
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "X-Token=a%20b%3Dc,x-tenant=t1")
    assert _export_grpc().ok
    (_, first), (_, second) = grpc_receiver.got
    assert first["x-general"] == "1" and "x-token" not in first
    assert (second["x-token"], second["x-tenant"]) == ("a b=c", "t1") and "x-general" not in second
    assert second["user-agent"].startswith("evlog/")


def test_grpc_timeout_is_in_seconds_traces_one_first(grpc_receiver, monkeypatch, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.plain}")
    release = threading.Event()
    grpc_receiver.answer = lambda context: release.wait(0.5)  # the collector takes half a second
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5")  # seconds, so this one is enough
    assert _export_grpc().ok
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0.1")
    said = say(lambda: _export_grpc())
    assert not said[0].ok and "DEADLINE_EXCEEDED" in said[1], said
    release.set()


def test_grpc_compression_gzip_shrinks_the_request_on_the_wire(grpc_receiver, monkeypatch):
    with TcpRelay(grpc_receiver.plain) as relay:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{relay.port}")
        sender = otlp_send.GrpcSpans()
        assert sender.export(_spans(2, big=1 << 20)).ok
        sender.shutdown()
        plain = relay.sent()
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "GZip ")
        sender = otlp_send.GrpcSpans()
        assert sender.export(_spans(2, big=1 << 20)).ok
        sender.shutdown()
        gzipped = relay.sent() - plain
    assert plain > 2 << 20 and gzipped < plain / 50, (plain, gzipped)
    (first, _), (second, _) = grpc_receiver.got
    assert first == second


def test_grpc_traces_compression_wins_and_an_unknown_one_is_refused(grpc_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.plain}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "deflate")  # not a gRPC compression
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_COMPRESSION"):
        otlp_send.GrpcSpans()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip")
    assert otlp_send.grpc_settings().compression is grpc.Compression.Gzip
    assert _export_grpc().ok


def test_grpc_retryable_codes_carry_the_retry_info_delay(grpc_receiver, monkeypatch, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.plain}")
    delay = b"\x0a\x04\x08\x03\x10\x05"  # google.rpc.RetryInfo{retry_delay: {seconds: 3, nanos: 5}}

    def exhausted(context):
        context.set_trailing_metadata((("google.rpc.retryinfo-bin", delay),))
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "slow down")

    grpc_receiver.answer = exhausted
    said = say(_export_grpc)
    assert said[0] == otlp_send.Sent(False, 0, 3.000000005) and "RESOURCE_EXHAUSTED" in said[1], said
    monkeypatch.setenv("OTEL_PYTHON_EXPORTER_OTLP_GRPC_RETRYABLE_ERROR_CODES", "unavailable, aborted")
    assert _export_grpc() == otlp_send.Sent(False)  # not retryable now: no delay to honour


def test_grpc_partial_success_counts_the_rejected_spans(grpc_receiver, monkeypatch, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{grpc_receiver.plain}")
    grpc_receiver.response = trace_service_pb2.ExportTraceServiceResponse(
        partial_success=trace_service_pb2.ExportTracePartialSuccess(rejected_spans=2, error_message="too old"))
    before = stats.counters.get("dropped.rejected", 0)
    said = say(_export_grpc)
    assert said[0] == otlp_send.Sent(True, 2)
    assert stats.counters.get("dropped.rejected", 0) - before == 2
    assert "the collector rejected 2 of 3 spans: too old" in said[1], said


def test_grpc_unavailable_then_the_collector_comes_back(certs, monkeypatch, say):
    port = _dead_port()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "3")
    sender = otlp_send.GrpcSpans()
    try:
        said = say(lambda: sender.export(_spans()))
        assert not said[0].ok and "UNAVAILABLE" in said[1] and export_failures.failing(), said
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        got = []

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                got.append(request)
                return trace_service_pb2.ExportTraceServiceResponse()

        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        try:
            assert sender.export(_spans()).ok and len(got) == 1  # a new channel: no reconnection backoff
        finally:
            server.stop(None)
    finally:
        sender.shutdown()


# ---- the HTTP receiver --------------------------------------------------------------------------------------

class HttpReceiver:
    """An OTLP/HTTP receiver on three servers: ``plain``, ``tls``, ``mtls`` (a client certificate required).
    ``got``: (path, headers, request body as sent, decompressed body); ``status``, ``headers`` and
    ``body`` are the answer."""

    def __init__(self, certs: Certs):
        self.got: list = []
        self.status, self.headers, self.body = 200, {}, b""
        self.delay = 0.0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                encoding = self.headers.get("content-encoding")
                body = gzip.decompress(raw) if encoding == "gzip" else zlib.decompress(raw) if encoding == "deflate" else raw
                receiver.got.append((self.path, {k.lower(): v for k, v in self.headers.items()}, raw, body))
                if receiver.delay:
                    threading.Event().wait(receiver.delay)
                self.send_response(receiver.status)
                for k, v in receiver.headers.items():
                    self.send_header(k, v)
                self.send_header("content-length", str(len(receiver.body)))
                self.end_headers()
                self.wfile.write(receiver.body)

            def log_message(self, *args):
                pass

        self.servers = []
        for name, ctx in (("plain", None), ("tls", self._context(certs, False)), ("mtls", self._context(certs, True))):
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            if ctx is not None:
                server.socket = ctx.wrap_socket(server.socket, server_side=True)
            # shutdown() waits for serve_forever's next poll (0.5 s by default), for each of the three
            threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
            self.servers.append(server)
            setattr(self, name, server.server_address[1])

    @staticmethod
    def _context(certs: Certs, client_auth: bool):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs.server_cert, certs.server_key)
        if client_auth:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(certs.ca)
        return ctx

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def http_receiver(certs):
    r = HttpReceiver(certs)
    try:
        yield r
    finally:
        r.stop()


def _export_http(n: int = 3, json: bool = False) -> otlp_send.Sent:
    sender = otlp_send.HttpSpans(json=json)
    try:
        return sender.export(_spans(n))
    finally:
        sender.shutdown()


def test_http_traces_endpoint_is_taken_as_it_is(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{_dead_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/custom/path")
    assert _export_http() == otlp_send.Sent(True)
    [(path, headers, _raw, body)] = http_receiver.got
    assert path == "/custom/path" and headers["content-type"] == "application/x-protobuf"
    _assert_got_the_spans(ExportTraceServiceRequest.FromString(body))


@pytest.mark.parametrize("base", ["", "/", "/otlp", "/otlp/"])
def test_http_general_endpoint_gets_v1_traces(http_receiver, monkeypatch, base):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}{base}")
    assert _export_http().ok
    [(path, *_)] = http_receiver.got
    assert path == base.rstrip("/") + "/v1/traces"


def test_http_headers_percent_decoded_traces_ones_win(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1")
    assert _export_http().ok
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "Authorization=Bearer%20abc%3D%3D,x-tenant=t1")
    assert _export_http().ok
    (_, first, *_), (_, second, *_) = http_receiver.got
    assert first["x-general"] == "1" and "authorization" not in first
    assert (second["authorization"], second["x-tenant"]) == ("Bearer abc==", "t1") and "x-general" not in second
    assert second["user-agent"].startswith("evlog/")


@pytest.mark.parametrize("how", ["gzip", "deflate"])
def test_http_compression(http_receiver, monkeypatch, how):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", how.upper())
    assert _export_http().ok
    [(_, headers, raw, body)] = http_receiver.got
    assert headers["content-encoding"] == how and raw != body
    _assert_got_the_spans(ExportTraceServiceRequest.FromString(body))


def test_http_general_compression_and_an_unknown_one_is_said_and_ignored(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    assert _export_http().ok
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "brotli")
    assert _export_http().ok
    (_, first, *_), (_, second, *_) = http_receiver.got
    assert first["content-encoding"] == "gzip" and "content-encoding" not in second


def test_http_timeout_is_in_seconds_traces_one_first(http_receiver, monkeypatch, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    http_receiver.delay = 0.5
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "5")
    assert _export_http().ok
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
    said = say(_export_http)
    assert not said[0].ok and "Timeout" in said[1], said


def test_http_certificate_is_the_ca_trusted(http_receiver, certs, monkeypatch, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{http_receiver.tls}/v1/traces")
    said = say(_export_http)
    assert not said[0].ok and "SSLError" in said[1] and not http_receiver.got, said
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", certs.ca)
    assert _export_http().ok
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", certs.client_cert)  # not the CA: refused
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", certs.ca)  # the traces one wins
    assert _export_http().ok and len(http_receiver.got) == 2


@pytest.mark.parametrize("which", ["general", "traces"])
def test_http_client_key_and_certificate_for_mutual_tls(http_receiver, certs, monkeypatch, which):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"https://127.0.0.1:{http_receiver.mtls}/v1/traces")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", certs.ca)
    assert not _export_http().ok and not http_receiver.got
    infix = "TRACES_" if which == "traces" else ""
    monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{infix}CLIENT_KEY", certs.client_key)
    monkeypatch.setenv(f"OTEL_EXPORTER_OTLP_{infix}CLIENT_CERTIFICATE", certs.client_cert)
    assert _export_http().ok and len(http_receiver.got) == 1


@pytest.mark.parametrize("status,retry_after,expected", [
    (503, "2", 2.0), (429, "Wed, 21 Oct 2015 07:28:00 GMT", 0.0), (502, None, None), (504, "soon", None),
    (400, "2", None), (500, None, None)])
def test_http_retryable_status_codes_carry_the_retry_after_delay(http_receiver, monkeypatch, status, retry_after,
                                                                  expected, say):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    http_receiver.status = status
    http_receiver.headers = {"Retry-After": retry_after} if retry_after else {}
    said = say(_export_http)
    assert said[0] == otlp_send.Sent(False, 0, expected) and f"HTTP {status}" in said[1], said


def _sent_as_json(http_receiver, spans) -> tuple[dict, bytes]:
    """(headers, body) of the one request the receiver got for ``spans`` sent as OTLP/HTTP JSON."""
    sender = otlp_send.HttpSpans(json=True)
    try:
        assert sender.export(spans).ok
    finally:
        sender.shutdown()
    [(_, headers, _raw, body)] = http_receiver.got
    return headers, body


def test_http_json_carries_the_same_message_as_protobuf(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    res = Resource({"service.name": "app", "n": 3, "on": True, "tags": ("a", "b")}, "https://example.com/r")
    scope = InstrumentationScope("lib", "1.0", "https://example.com/s", {"scope.kind": "lib"})
    remote = SpanContext(0xABC, 0x99, True, TraceFlags(1), TraceState([("vendor", "v1")]))
    spans = [SpanData("plain", SpanContext(0xABC, 1, False), None, res, {"s": "ü", "i": -(1 << 63), "f": 0.5}),
             SpanData("rich", SpanContext(0xABC, 2, False, TraceFlags(1), remote.trace_state), remote, res,
                      {"b": b"\x00\xff", "fs": (1.5, float("inf")), "big": 1 << 64},
                      [SpanEvent("e", 5, {"n": 1}, 2), SpanEvent("", 0)],
                      [SpanLink(remote, {"why": "x"}, 1), SpanLink(SpanContext(0xDEF, 3, False))],
                      SpanKind.SERVER, Status(StatusCode.ERROR, "bad"), 10, 20, scope, 4, 5, 6),
             SpanData("ok", SpanContext(0xABC, 4, False), SpanContext(0xABC, 2, False), res, {},
                      status=Status(StatusCode.OK), instrumentation_scope=scope)]
    headers, body = _sent_as_json(http_receiver, spans)
    assert headers["content-type"] == "application/json"
    got = json_format.Parse(json.dumps(_ids_in_base64(json.loads(body))), ExportTraceServiceRequest())
    expected = encode_spans([readable(s) for s in spans])
    for rs in expected.resource_spans:  # an unset status is an empty message in protobuf, left out in JSON
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if sp.status == type(sp.status)():
                    sp.ClearField("status")
    assert got == expected


def test_http_json_writes_a_lone_surrogate_as_the_protobuf_encoder_writes_a_name_with_one(http_receiver, monkeypatch):
    """U+FFFD for each lone surrogate (a pair is the character it makes), the body UTF-8, the span's
    batch kept: as the protobuf encoder writes a span name, and the run folder any string."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    res = Resource({})
    spans = [SpanData("bad \udcff name", SpanContext(0xABC, 1, False), None, res, {"pair": "\ud83d\ude00"}),
             SpanData("ok", SpanContext(0xABC, 2, False), None, res, {})]
    _headers, body = _sent_as_json(http_receiver, spans)
    request = json.loads(body.decode("utf-8"))
    sent = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
    assert [s["name"] for s in sent] == ["bad \ufffd name", "ok"]
    assert sent[0]["attributes"] == [{"key": "pair", "value": {"stringValue": "\U0001f600"}}]
    assert ExportTraceServiceRequest.FromString(span_encoding.encode(spans)).resource_spans[0].scope_spans[0].spans[0] \
        .name == "bad \ufffd name"


def _ids_in_base64(request: dict) -> dict:
    """OTLP/JSON's hex ids as the protobuf JSON mapping's base64 (what json_format reads)."""
    def b64(hex_id):
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    for rs in request["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = b64(sp[key])
                for link in sp.get("links", ()):
                    link["traceId"], link["spanId"] = b64(link["traceId"]), b64(link["spanId"])
    return request


def test_http_a_redirect_is_not_followed_and_counts_as_sent_as_for_the_stock_exporter(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    http_receiver.status, http_receiver.headers = 307, {"Location": f"http://127.0.0.1:{_dead_port()}/v1/traces"}
    assert _export_http().ok and len(http_receiver.got) == 1


def test_http_partial_success_counts_the_rejected_spans(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    http_receiver.body = trace_service_pb2.ExportTraceServiceResponse(
        partial_success=trace_service_pb2.ExportTracePartialSuccess(rejected_spans=1)).SerializeToString()
    before = stats.counters.get("dropped.rejected", 0)
    assert _export_http() == otlp_send.Sent(True, 1)
    assert stats.counters.get("dropped.rejected", 0) - before == 1


def test_a_request_over_the_size_limit_is_dropped_and_counted(http_receiver, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{http_receiver.plain}/v1/traces")
    monkeypatch.setattr(otlp_send, "MAX_REQUEST", 100)
    before = stats.counters.get("dropped.too_large", 0)
    assert _export_http() == otlp_send.Sent(True, 3) and not http_receiver.got
    assert stats.counters.get("dropped.too_large", 0) - before == 3


# ---- helpers ------------------------------------------------------------------------------------------------

@pytest.fixture
def say(capfd):
    """say(fn) -> (what ``fn()`` returned, the evlog lines it wrote on stderr), each call's problems said
    afresh."""
    from evlog import notices

    def call(fn):
        notices.reset()
        capfd.readouterr()
        out = fn()
        return out, capfd.readouterr().err

    return call


def _dead_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TcpRelay:
    """A TCP relay on loopback to ``port`` that counts the bytes the client sent."""

    def __init__(self, port: int):
        self.target = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.count = 0
        self.lock = threading.Lock()

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.listener.close()

    def sent(self) -> int:
        with self.lock:
            return self.count

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src, dst, counted: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if counted:
                    with self.lock:
                        self.count += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
