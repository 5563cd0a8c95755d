"""Spans -> an OTLP collector: evlog's own sending of the bytes span_encoding writes.

The stock span exporters encode the spans themselves (OTLPSpanExporter.export takes ReadableSpans), so
the exporter process sends the request it encoded by itself: over OTLP/gRPC with grpcio's public channel
API (a unary call of ``TraceService/Export`` whose request is the bytes as they are), and over OTLP/HTTP
with requests (POST to ``/v1/traces``, as the stock HTTP exporter does): protobuf, or with ``http/json``
OTLP/JSON (otlp_json, the run folder's lines), which Python's own exporters lack. Log records and metrics
keep the stock exporters (and http/protobuf for http/json).

Every variable the stock span exporters (opentelemetry-exporter-otlp-proto-grpc and -http 1.45) read is
read here with the same meaning (``grpc_settings``, ``http_settings``):
- OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT; HTTP appends ``/v1/traces`` to the
  general one only; gRPC uses the host and port of a URL (a value that is not a URL as it is);
- OTEL_EXPORTER_OTLP(_TRACES)_HEADERS: ``key=value,...``, percent-decoded, keys lower-cased;
- OTEL_EXPORTER_OTLP(_TRACES)_COMPRESSION: gzip (gRPC, HTTP), deflate (HTTP); another value stops gRPC
  traces (as the stock gRPC exporter fails to start) and is ignored by HTTP, said once;
- OTEL_EXPORTER_OTLP(_TRACES)_TIMEOUT: seconds (10 by default), per request;
- OTEL_EXPORTER_OTLP(_TRACES)_CERTIFICATE, _CLIENT_KEY, _CLIENT_CERTIFICATE: the CA to trust (else the
  system's) and the client's key and certificate for mutual TLS; for gRPC the traces variables are taken
  together when _TRACES_CERTIFICATE is set, else the general ones; for HTTP each falls back on its own;
- OTEL_EXPORTER_OTLP(_TRACES)_INSECURE (gRPC): plain text; an ``https`` endpoint is always TLS, and without
  the variable an ``http`` endpoint is plain text and any other TLS;
- OTEL_PYTHON_EXPORTER_OTLP_GRPC(_TRACES)_CREDENTIAL_PROVIDER, OTEL_PYTHON_EXPORTER_OTLP_HTTP(_TRACES)_
  CREDENTIAL_PROVIDER: an ``opentelemetry_otlp_credential_provider`` entry point giving the gRPC channel
  credentials or the requests Session; OTEL_PYTHON_EXPORTER_OTLP_GRPC_RETRYABLE_ERROR_CODES: status names.
HTTP's own environment (proxies, REQUESTS_CA_BUNDLE with no certificate variable) works as with requests.

What an export answers (``Sent``): sent; or not, to be tried again (the exporter process's _Sink retries a
failed batch after a pause, as long as the run lasts: a collector that is down, refusing, or slow loses
nothing until the end of the run); spans the collector says it rejected (a partial success) are not sent
again but counted as dropped (``dropped.rejected``) and said once. A retryable answer (gRPC: UNAVAILABLE,
RESOURCE_EXHAUSTED, ... as the stock exporter; HTTP: 429, 502, 503, 504, a connection error) carries the
delay the collector asked for (gRPC RetryInfo, HTTP Retry-After), which the pause honours. UNAVAILABLE
opens a new channel, so a collector that comes back is seen at the next try. A request over 64 MiB (the
stock HTTP exporter's limit, before compression) is dropped and counted (``dropped.too_large``).
Each failure is said through export_failures.export_failed (once per run, with a hint where the cause is known).
"""
from __future__ import annotations

import gzip
import os
import time
import zlib
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import NamedTuple
from urllib.parse import urlparse

from evlog import notices, stats
from evlog.exporter import otlp_json, span_encoding
from evlog.exporter.export_failures import export_failed
from evlog.text import utf8
from evlog.version import __version__

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_REQUEST = 64 << 20  # bytes, before compression
DEFAULT_TIMEOUT = 10.0
GRPC_RETRYABLE = ("CANCELLED", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED", "ABORTED", "OUT_OF_RANGE", "UNAVAILABLE",
                  "DATA_LOSS")
HTTP_RETRYABLE = frozenset({429, 502, 503, 504})
PROVIDERS = "opentelemetry_otlp_credential_provider"


def user_agent() -> str:
    from opentelemetry.sdk.version import __version__ as sdk

    return f"evlog/{__version__} OTel-OTLP-Exporter-Python/{sdk}"


class Sent(NamedTuple):
    """What one export did."""

    #: The request went through (the spans are the collector's, but for ``rejected``).
    ok: bool
    #: Spans the collector refused in a partial success: not to be sent again.
    rejected: int = 0
    #: Seconds the collector asked to wait before the next try (a retryable failure), or None.
    retry_after: float | None = None


def _env(name: str) -> str | None:
    return os.environ.get(name)


def _first(*names: str) -> str | None:
    """The first of ``names`` that is set and not empty."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _headers(signal_var: str, general_var: str) -> dict:
    from opentelemetry.util.re import parse_env_headers

    return dict(parse_env_headers(_first(signal_var, general_var) or "", liberal=True))


def _read(path: str, var: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        notices.warn_once(f"otlp-file-{var}", f"{var}={path!r} cannot be read ({exc.strerror or exc}); "
                          "going on without it")
        return None


def _provider(var: str):
    """The object the credential provider entry point named by ``var`` makes (None if ``var`` is unset)."""
    name = _env(var)
    if not name:
        return None
    from importlib.metadata import entry_points

    found = list(entry_points(group=PROVIDERS, name=name))
    if not found:
        raise RuntimeError(f"Requested component '{name}' not found in entry point '{PROVIDERS}'")
    return found[0].load()()


def _partial_success(response: bytes) -> tuple[int, str]:
    """ExportTraceServiceResponse.partial_success: (rejected_spans, error_message); (0, "") when absent or
    not a response (an empty or foreign body)."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    try:
        partial = ExportTraceServiceResponse.FromString(response).partial_success
    except DecodeError:
        return 0, ""
    return partial.rejected_spans, partial.error_message


def _accepted(n: int, partial: tuple[int, str]) -> Sent:
    """A collector's answer: ``partial`` is its partial success, (rejected spans, message)."""
    rejected, message = partial
    if rejected > 0 or message:
        rejected = max(0, min(rejected, n))
        if rejected:
            stats.incr("dropped.rejected", rejected)
        notices.warn_once("export-partial", f"the collector rejected {rejected:,} of {n:,} spans"
                          f"{': ' + message if message else ''}; they are dropped and counted (further rejections "
                          "are counted, not shown)")
    return Sent(True, rejected)


def _too_large(n: int, size: int) -> Sent:
    stats.incr("dropped.too_large", n)
    notices.warn_once("export-too-large", f"a request of {n:,} spans is {size / 2**20:.0f} MiB, over the {MAX_REQUEST >> 20} "
                      "MiB a request may have; those spans are dropped and counted (lower OTEL_BSP_MAX_EXPORT_BATCH_SIZE)")
    return Sent(True, n)


# ---- OTLP/gRPC -------------------------------------------------------------------------------------------

class GrpcSettings(NamedTuple):
    target: str  # host:port (or the endpoint as given)
    insecure: bool
    credentials: object  # grpc.ChannelCredentials when not insecure
    headers: tuple  # (key, value) metadata
    timeout: float  # seconds
    compression: object  # grpc.Compression
    retryable: frozenset  # grpc.StatusCode


def grpc_settings() -> GrpcSettings:
    """The stock gRPC span exporter's reading of the environment (OTLPSpanExporter() and its mixin)."""
    import grpc

    insecure = None
    raw = _env("OTEL_EXPORTER_OTLP_TRACES_INSECURE")
    if raw is not None:
        insecure = raw.lower() == "true"
    credentials = None
    if not insecure and _env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE") is not None:
        credentials = _grpc_credentials("OTEL_PYTHON_EXPORTER_OTLP_GRPC_TRACES_CREDENTIAL_PROVIDER",
                                        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY",
                                        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE")
    raw = _env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
    timeout = float(raw) if raw is not None else None
    compression = _grpc_compression("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION")
    endpoint = _first("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _env("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4317"
    url = urlparse(endpoint)
    if url.scheme == "https":
        insecure = False
    if insecure is None:
        raw = _env("OTEL_EXPORTER_OTLP_INSECURE")
        insecure = raw.lower() == "true" if raw is not None else url.scheme == "http"
    target = url.netloc or endpoint
    headers = tuple(_headers("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS").items())
    timeout = timeout or float(os.environ.get("OTEL_EXPORTER_OTLP_TIMEOUT", DEFAULT_TIMEOUT))
    compression = compression or _grpc_compression("OTEL_EXPORTER_OTLP_COMPRESSION") or grpc.Compression.NoCompression
    raw = _env("OTEL_PYTHON_EXPORTER_OTLP_GRPC_RETRYABLE_ERROR_CODES")
    names = [c.strip().upper() for c in raw.split(",") if c.strip()] if raw else GRPC_RETRYABLE
    retryable = frozenset(grpc.StatusCode[name] for name in names)
    if not insecure and credentials is None:
        credentials = _grpc_credentials("OTEL_PYTHON_EXPORTER_OTLP_GRPC_CREDENTIAL_PROVIDER",
                                        "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY",
                                        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
    return GrpcSettings(target, insecure, credentials, headers, timeout, compression, retryable)


def _grpc_compression(var: str):
    import grpc

    raw = _env(var)
    if raw is None:
        return None
    value = raw.lower().strip()
    if value != "gzip":
        raise ValueError(f'Invalid value "{value}" for compression envvar {var}')
    return grpc.Compression.Gzip


def _grpc_credentials(provider_var: str, cert_var: str, key_var: str, chain_var: str):
    import grpc

    made = _provider(provider_var)
    if made is not None:
        if not isinstance(made, grpc.ChannelCredentials):
            raise RuntimeError(f"{provider_var}: the credential provider gave {type(made).__name__}, not "
                               "grpc.ChannelCredentials")
        return made
    cert = _env(cert_var)
    if cert:
        key, chain = _env(key_var), _env(chain_var)
        key, chain = _read(key, key_var) if key else None, _read(chain, chain_var) if chain else None
        if (key is None) != (chain is None):  # gRPC aborts the process on a certificate without its key
            notices.warn_once(f"otlp-client-pair-{key_var}", f"{key_var} and {chain_var} go together (mutual "
                              "TLS); only one of them is usable: going on without a client certificate")
            key = chain = None
        return grpc.ssl_channel_credentials(root_certificates=_read(cert, cert_var), private_key=key,
                                            certificate_chain=chain)
    return grpc.ssl_channel_credentials()


class GrpcSpans:
    """Spans -> OTLP/gRPC (the exporter process's exporter for ``otlp`` traces over grpc)."""

    def __init__(self):
        import grpc

        self.grpc = grpc
        self.settings = grpc_settings()
        self.channel = self._call = None
        self._open()

    def _open(self) -> None:
        grpc = self.grpc
        s = self.settings
        options = [("grpc.primary_user_agent", user_agent())]
        if s.insecure:
            self.channel = grpc.insecure_channel(s.target, options=options, compression=s.compression)
        else:
            self.channel = grpc.secure_channel(s.target, s.credentials, options=options, compression=s.compression)
        # the request is the encoded bytes as they are (no serializer); the answer is read by _partial_success
        self._call = self.channel.unary_unary(EXPORT, request_serializer=None, response_deserializer=None)

    def export(self, spans) -> Sent:
        request = span_encoding.encode(spans)
        if len(request) > MAX_REQUEST:
            return _too_large(len(spans), len(request))
        return self.send(request, len(spans))

    def send(self, request: bytes, n: int) -> Sent:
        grpc = self.grpc
        s = self.settings
        try:
            response = self._call(request, metadata=s.headers, timeout=s.timeout)
        except grpc.RpcError as error:
            code = error.code()
            export_failed(f"{code.name if code is not None else 'error'} from {s.target}: {error.details()}")
            if code is grpc.StatusCode.UNAVAILABLE:  # a new channel: the collector is tried afresh next time
                self._reopen()
            return Sent(False, retry_after=_retry_info(error) if code in s.retryable else None)
        return _accepted(n, _partial_success(response or b""))

    def _reopen(self) -> None:
        try:
            self.channel.close()
        except Exception:
            pass
        self._open()

    def shutdown(self) -> None:
        try:
            self.channel.close()
        except Exception:
            pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _retry_info(error) -> float | None:
    """The delay of a ``google.rpc.RetryInfo`` in the answer's trailing metadata (seconds), if any."""
    try:
        raw = dict(error.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
        if not raw:
            return None
        from google.rpc.error_details_pb2 import RetryInfo  # googleapis-common-protos, as the stock exporter

        delay = RetryInfo.FromString(raw).retry_delay
        return delay.seconds + delay.nanos / 1e9
    except Exception:  # no metadata, or not a RetryInfo: no delay asked
        return None


# ---- OTLP/HTTP -------------------------------------------------------------------------------------------

class HttpSettings(NamedTuple):
    url: str
    headers: dict
    timeout: float
    compression: str  # none, gzip, deflate
    verify: object  # True or a CA file
    cert: object  # None, a file, or (certificate file, key file)
    session: object  # a requests.Session from a credential provider, or None


def http_settings(json: bool = False) -> HttpSettings:
    """The stock HTTP span exporter's reading of the environment (OTLPSpanExporter() of -proto-http)."""
    url = _first("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not url:
        base = _first("OTEL_EXPORTER_OTLP_ENDPOINT") or "http://localhost:4318"
        url = f"{base.removesuffix('/')}/v1/traces"
    raw = (_first("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION") or "none").lower().strip()
    if raw not in ("none", "gzip", "deflate"):
        notices.warn_once("otlp-compression", f"OTLP compression {raw!r} is not one of none, gzip, deflate; "
                          "spans are sent uncompressed")
        raw = "none"
    headers = {"content-type": "application/json" if json else "application/x-protobuf", "user-agent": user_agent()}
    headers.update(_headers("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"))
    if raw != "none" and "content-encoding" not in headers:
        headers["content-encoding"] = raw
    timeout_raw = _first("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT") or DEFAULT_TIMEOUT
    try:
        timeout = float(timeout_raw)
    except ValueError:
        notices.warn_once("otlp-timeout", f"OTLP timeout {timeout_raw!r} is not a number of seconds; using "
                          f"{DEFAULT_TIMEOUT:g}")
        timeout = DEFAULT_TIMEOUT
    verify = _first("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE") or True
    key = _first("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY")
    chain = _first("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE")
    cert = (chain, key) if chain and key else chain
    session = _http_session()
    return HttpSettings(url, headers, timeout, raw, verify, cert, session)


def _http_session():
    var = ("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER"
           if _env("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER")
           else "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER")
    made = _provider(var)
    if made is None:
        return None
    import requests

    if not isinstance(made, requests.Session):
        raise RuntimeError(f"{var}: the credential provider gave {type(made).__name__}, not requests.Session")
    return made


class HttpSpans:
    """Spans -> OTLP/HTTP, protobuf or (``json``) OTLP/JSON."""

    def __init__(self, json: bool = False):
        import requests

        self.json = json
        self.settings = s = http_settings(json)
        self.session = s.session if s.session is not None else requests.Session()
        self.session.verify = s.verify
        if s.cert is not None:
            self.session.cert = s.cert
        self._connection_errors = (requests.exceptions.ConnectionError, requests.exceptions.Timeout)

    def export(self, spans) -> Sent:
        if self.json:
            request = utf8(otlp_json.encode_spans_text(spans))
        else:
            request = span_encoding.encode(spans)
        if len(request) > MAX_REQUEST:
            return _too_large(len(spans), len(request))
        return self.send(request, len(spans))

    def send(self, request: bytes, n: int) -> Sent:
        s = self.settings
        try:
            answer = self._post(_compress(request, s.compression))
        except Exception as exc:
            export_failed(f"{type(exc).__name__} from {s.url}: {exc}")
            return Sent(False)
        code = answer.status_code
        if 200 <= code < 400:
            return _accepted(n, _json_partial_success(answer) if self.json else _partial_success(answer.content))
        export_failed(f"HTTP {code} {answer.reason or ''} from {s.url}".rstrip())
        return Sent(False, retry_after=_retry_after(answer.headers.get("retry-after")) if code in HTTP_RETRYABLE else None)

    def _post(self, body: bytes):
        """The answer to one POST; after a connection error, once more at once (a pooled connection the
        collector closed meanwhile), within the same timeout."""
        s = self.settings
        deadline = time.monotonic() + s.timeout
        try:
            return self.session.post(s.url, data=body, headers=s.headers, timeout=s.timeout, allow_redirects=False)
        except self._connection_errors:
            left = deadline - time.monotonic()
            if left <= 0:
                raise
            return self.session.post(s.url, data=body, headers=s.headers, timeout=left, allow_redirects=False)

    def shutdown(self) -> None:
        self.session.close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _compress(data: bytes, how: str) -> bytes:
    if how == "gzip":
        return gzip.compress(data, compresslevel=1)  # the cheapest level: most of the gain, little CPU
    if how == "deflate":
        return zlib.compress(data, 1)
    return data


def _json_partial_success(answer) -> tuple[int, str]:
    """An OTLP/JSON answer's partialSuccess: (rejected spans, message)."""
    try:
        partial = (answer.json() or {}).get("partialSuccess") or {}
        return int(partial.get("rejectedSpans") or 0), str(partial.get("errorMessage") or "")
    except Exception:  # an empty or foreign body: nothing rejected
        return 0, ""


def _retry_after(value: str | None) -> float | None:
    """An HTTP Retry-After (seconds, or a date) as seconds from now."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - time.time()
    return max(0.0, seconds) if seconds == seconds and seconds != float("inf") else None
