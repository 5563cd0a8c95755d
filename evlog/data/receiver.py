"""A real OTLP receiver: gRPC and HTTP (protobuf and JSON) in background threads.

``OTLPReceiver(sink)`` listens for the three OTLP export services and calls ``sink(signal, rows)``
with the decoded rows (see evlog.data.otlp_decode) for every accepted request; ``signal`` is
"traces", "logs" or "metrics". The sink is called from several threads at once (gRPC workers, the
HTTP decode pool): it must be thread-safe. A sink that raises does not hurt the server: the error
is counted (``sink_errors``) and the client gets a partial-success response rejecting the rows.

- gRPC (grpcio): the TraceService, LogsService and MetricsService ``Export`` methods of
  opentelemetry-proto. Requests arrive as raw bytes and are parsed here, so a malformed body gets
  INVALID_ARGUMENT (grpcio's own deserializer would answer INTERNAL).
- HTTP (aiohttp): POST /v1/traces, /v1/logs, /v1/metrics with Content-Type application/x-protobuf
  or application/json, Content-Encoding gzip, deflate or identity. As the OTLP/HTTP spec says: 200
  with an Export*ServiceResponse in the request's encoding; 400 with a google.rpc.Status for a
  malformed body; 413 over ``max_body`` (compressed or decompressed); 415 for another content type
  or encoding. ``build_app(extra_routes)`` makes the aiohttp app, so ``evlog serve`` can put its
  dashboard on the same port.

Port 0 picks a free port; ``start()`` returns once both servers listen; ``stop()`` is bounded. A port
that is taken is a ``ListenError`` naming the transport and the address (``check_ports()`` finds it
before anything starts), never gRPC C-core's own lines. A client speaking gRPC (HTTP/2) to the HTTP port
(an exporter given the HTTP port but no protocol) gets no aiohttp traceback per attempt: ``notice`` is
told once what to set.
With ``token``, every export must carry ``authorization: Bearer TOKEN`` (HTTP header or gRPC metadata),
as the OpenTelemetry Collector's ``bearertokenauth`` asks: without it, or with another token, HTTP
answers 401 and gRPC UNAUTHENTICATED before the body is decoded, so nothing reaches the sink. Each
refusal is counted (``refused``); ``notice`` is told once per client address, never per request.
``_refusal()`` is asked before each export is decoded: a subclass answers (HTTP status, gRPC code
name, message) to fail it on purpose (the tests' fault injection, tests/receiver.py), None to take it.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import logging
import os
import re
import socket
import sys
import threading
import urllib.parse
import zlib
from collections.abc import Callable
from typing import Any

from evlog.data import bearer
from evlog.data.otlp_decode import SIGNALS, DecodeError, decode, decode_proto

__all__ = ["OTLPReceiver", "DEFAULT_MAX_BODY", "ListenError"]

DEFAULT_MAX_BODY = 32 * 1024 * 1024

_PROTOBUF = "application/x-protobuf"
# a surrogate spelled as a JSON escape, or encoded in the bytes (json.loads lets both through)
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]").search  # high (D8-DB) and low (DC-DF) alike
_JSON = "application/json"
_MAX_PEERS_TOLD = 1024  # client addresses told about a refusal; past them, refusals are only counted

_SERVICES = {
    "traces": ("opentelemetry.proto.collector.trace.v1.TraceService", "rejected_spans"),
    "logs": ("opentelemetry.proto.collector.logs.v1.LogsService", "rejected_log_records"),
    "metrics": ("opentelemetry.proto.collector.metrics.v1.MetricsService", "rejected_data_points"),
}

class Backpressure(Exception):
    """Raised by a sink that cannot take rows now: the exporter is told to retry later
    (gRPC UNAVAILABLE / HTTP 503, both retryable by OTLP's rules), so nothing is dropped on the way."""


class _Reject(Exception):
    """An HTTP request turned away: status, gRPC code name, message."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def _response_classes() -> dict:
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

    return {
        "traces": trace_service_pb2.ExportTraceServiceResponse,
        "logs": logs_service_pb2.ExportLogsServiceResponse,
        "metrics": metrics_service_pb2.ExportMetricsServiceResponse,
    }


class ListenError(OSError):
    """A port the receiver cannot listen on; ``transport``: "grpc" or "http"."""

    def __init__(self, transport: str, host: str, port: int, reason: str):
        super().__init__(f"cannot listen for OTLP/{'gRPC' if transport == 'grpc' else 'HTTP'} on "
                         f"{_url_host(host) if host in ('', '0.0.0.0', '::') else host}:{port}: {reason}")
        self.transport = transport


def _probe(transport: str, host: str, port: int | None) -> None:
    """Bind ``host:port`` and let it go: a taken port is a ListenError here, before the server binds it."""
    if not port:
        return
    try:
        socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET).close()
    except OSError as e:
        raise ListenError(transport, host, port, _reason(e)) from None


def _reason(e: OSError) -> str:
    """The system's words for ``e`` ("Address already in use"), without create_server's additions."""
    return os.strerror(e.errno) if e.errno else str(e)


class _ServerLog(logging.LoggerAdapter):
    """aiohttp's server log (the ``aiohttp.server`` logger) for this receiver's HTTP port, except that an
    HTTP/2 connection preface ("PRI * HTTP/2.0", what a gRPC exporter sends first) is told to ``notice``
    once, with what to set, and not logged (aiohttp logs a traceback per attempt)."""

    def __init__(self, receiver: OTLPReceiver):
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.receiver = receiver
        self.told = False

    def log(self, level, msg, *args, exc_info=None, **kwargs):
        exc = sys.exc_info()[1] if exc_info is True else exc_info
        if isinstance(exc, tuple):
            exc = exc[1]
        text = str(exc) if isinstance(exc, BaseException) else ""
        if not ("PRI" in text or "HTTP/2" in text):
            return super().log(level, msg, *args, exc_info=exc_info, **kwargs)
        if not self.told:
            self.told = True
            r = self.receiver
            fix = (f"send gRPC to OTEL_EXPORTER_OTLP_ENDPOINT={r.grpc_endpoint}, or set " if r.grpc_port else "set ")
            # (aiohttp 3.9 does not name the client in this log call, newer ones do: the line leaves it out)
            r._notice(f"OTLP/gRPC came to the OTLP/HTTP port {_url_host(r.host)}:{r.http_port}; "
                      f"{fix}OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf to use this port")


_UNAUTHENTICATED = "this receiver takes exports with 'authorization: Bearer <token>' only"


def _grpc_peer(peer: str) -> str:
    """The client's address of a gRPC peer string ("ipv4:10.0.0.5:51234" -> "10.0.0.5"), without its port:
    a client opens a new port per connection, and is told about once."""
    kind, _, rest = peer.partition(":")
    if kind in ("ipv4", "ipv6"):
        return urllib.parse.unquote(rest.rpartition(":")[0]).strip("[]") or peer
    return peer


def _stderr(text: str) -> None:
    sys.stderr.write(f"evlog: {text}\n")
    sys.stderr.flush()


def _url_host(host: str) -> str:
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


class OTLPReceiver:
    """OTLP over gRPC and HTTP on loopback (by default), feeding decoded rows to ``sink``.

    ``grpc_port`` / ``http_port``: 0 picks a free port, None leaves that transport off.
    ``extra_routes``: aiohttp route definitions, or a callable ``(app) -> None``, added to the HTTP app.
    ``decode_proto``: ``(signal, body) -> rows`` for protobuf bodies (default otlp_decode's); it raises
    DecodeError for a malformed body, and what it returns (anything with a length) goes to the sink.
    ``notice``: called with one line for the user about a client's mistake (default: stderr).
    ``token``: the bearer token every export must carry; None takes exports from anyone who reaches the ports.
    """

    def __init__(
        self,
        sink: Callable[[str, list], Any],
        host: str = "127.0.0.1",
        grpc_port: int | None = 0,
        http_port: int | None = 0,
        max_body: int = DEFAULT_MAX_BODY,
        extra_routes: Any = None,
        grpc_workers: int = 4,
        decode_proto: Callable[[str, bytes], Any] = decode_proto,
        notice: Callable[[str], Any] = _stderr,
        token: str | None = None,
    ):
        self._sink = sink
        self._notice = notice
        self._decode_proto = decode_proto  # evlog serve passes one that keeps spans as protobuf
        self.host = host
        self._want_grpc = grpc_port
        self._want_http = http_port
        self.max_body = int(max_body)
        self._extra_routes = extra_routes
        self._grpc_workers = grpc_workers
        self._lock = threading.Lock()
        self._requests: collections.Counter = collections.Counter()
        self._rejected = 0
        self._sink_errors = 0
        self._last_error = ""
        self._token = token.encode() if token else None
        self._refused = 0
        self._refused_peers: set[str] = set()
        self._responses = _response_classes()
        self._grpc_server: Any = None
        self._grpc_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._grpc_port: int | None = None
        self._http_port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: Any = None
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._started = False

    # ------------------------------------------------------------------ public state

    @property
    def grpc_port(self) -> int | None:
        return self._grpc_port

    @property
    def http_port(self) -> int | None:
        return self._http_port

    @property
    def grpc_endpoint(self) -> str:
        return f"http://{_url_host(self.host)}:{self._grpc_port}"

    @property
    def http_endpoint(self) -> str:
        return f"http://{_url_host(self.host)}:{self._http_port}"

    @property
    def requests(self) -> dict[tuple[str, str], int]:
        """Export requests received, by (transport, signal); transport is "grpc" or "http"."""
        with self._lock:
            return dict(self._requests)

    @property
    def rejected(self) -> int:
        """Requests answered with an error (malformed, too large, wrong type, failing on purpose)."""
        with self._lock:
            return self._rejected

    @property
    def refused(self) -> int:
        """Exports turned away for want of the token (not counted in ``requests`` or ``rejected``)."""
        with self._lock:
            return self._refused

    @property
    def sink_errors(self) -> int:
        """Requests whose rows the sink raised on."""
        with self._lock:
            return self._sink_errors

    @property
    def last_error(self) -> str:
        """The message of the last rejection or sink error ("" if none)."""
        with self._lock:
            return self._last_error

    def stats(self) -> dict:
        with self._lock:
            return {
                "requests": dict(self._requests),
                "rejected": self._rejected,
                "refused": self._refused,
                "sink_errors": self._sink_errors,
                "last_error": self._last_error,
            }

    def _refusal(self) -> tuple[int, str, str] | None:
        """(HTTP status, gRPC code name, message) to answer the export about to be decoded with, or None
        to take it. This receiver takes every export; the tests' subclass fails some on purpose."""
        return None

    # ------------------------------------------------------------------ lifecycle

    def check_ports(self) -> None:
        """Raise ListenError if a port asked for (not 0) is taken now."""
        if self._want_grpc is not None:
            _probe("grpc", self.host, self._want_grpc)
        if self._want_http is not None:
            _probe("http", self.host, self._want_http)

    def start(self, timeout: float = 10.0) -> OTLPReceiver:
        """Bind and listen (gRPC and HTTP); returns once both accept connections."""
        if self._started:
            return self
        try:
            self.check_ports()  # a taken gRPC port would otherwise print gRPC C-core's own error first
            if self._want_grpc is not None:
                self._start_grpc()
            if self._want_http is not None:
                self._start_http(timeout)
        except BaseException:
            self.stop()
            raise
        self._started = True
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop both servers; waits at most about ``timeout`` seconds."""
        self._started = False
        server, self._grpc_server = self._grpc_server, None
        if server is not None:
            server.stop(grace=min(1.0, timeout)).wait(timeout)
        loop, runner, thread = self._loop, self._runner, self._thread
        self._loop = self._runner = self._thread = None
        if loop is not None and thread is not None and thread.is_alive():
            if runner is not None:
                try:
                    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout)
                except Exception:
                    pass
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        for pool in (self._pool, self._grpc_pool):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        self._pool = self._grpc_pool = None

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ the shared core

    def _count(self, transport: str, signal: str) -> None:
        with self._lock:
            self._requests[(transport, signal)] += 1

    def _count_rejected(self, message: str) -> None:
        with self._lock:
            self._rejected += 1
            self._last_error = message

    def _authorized(self, transport: str, signal: str, authorization: str | None, peer: str) -> bool:
        """Whether an export may come in; a refusal is counted, and said once per client address."""
        if self._token is None:
            return True
        given = bearer.from_authorization(authorization)
        if bearer.matches(given, self._token):
            return True
        with self._lock:
            self._refused += 1
            tell = peer not in self._refused_peers and len(self._refused_peers) < _MAX_PEERS_TOLD
            if tell:
                self._refused_peers.add(peer)
        if tell:
            why = ("without an authorization header" if not authorization else
                   "with a wrong token" if given is not None else "with an authorization that is not 'Bearer <token>'")
            self._notice(f"refused OTLP/{'gRPC' if transport == 'grpc' else 'HTTP'} {signal} from {peer} {why}; "
                         f"a sender needs OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token> "
                         f"(further refusals from {peer} are counted, not shown)")
        return False

    def _deliver(self, signal: str, rows: list) -> tuple[int, str]:
        """Hand rows to the sink; returns (rows rejected, error message) for a partial success."""
        if not rows:
            return 0, ""
        try:
            self._sink(signal, rows)
        except Backpressure as e:
            raise _Reject(503, "UNAVAILABLE", f"busy, retry later: {e}") from None
        except Exception as e:
            msg = f"sink failed on {len(rows)} {signal} rows: {type(e).__name__}: {e}"
            with self._lock:
                self._sink_errors += 1
                self._last_error = msg
            return len(rows), msg
        return 0, ""

    def _response(self, signal: str, rejected: int, message: str) -> Any:
        resp = self._responses[signal]()
        if rejected:
            ps = resp.partial_success
            setattr(ps, _SERVICES[signal][1], rejected)
            ps.error_message = message
        return resp

    # ------------------------------------------------------------------ gRPC

    def _start_grpc(self) -> None:
        import grpc

        self._grpc_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=self._grpc_workers, thread_name_prefix="evlog-otlp-grpc"
        )
        self._grpc_server = grpc.server(
            self._grpc_pool,
            handlers=[self._grpc_handler(signal) for signal in SIGNALS],
            options=[
                ("grpc.max_receive_message_length", self.max_body),
                ("grpc.so_reuseport", 0),  # a taken port must fail, not be silently shared
            ],
        )
        host = self.host if ":" not in self.host else f"[{self.host}]"
        try:
            port = self._grpc_server.add_insecure_port(f"{host}:{self._want_grpc}")
        except RuntimeError as e:
            raise ListenError("grpc", self.host, self._want_grpc, str(e)) from None
        if not port:
            raise ListenError("grpc", self.host, self._want_grpc, "the port could not be bound")
        self._grpc_port = port
        self._grpc_server.start()

    def _grpc_handler(self, signal: str) -> Any:
        import grpc

        def export(body: bytes, context: Any) -> bytes:
            if self._token is not None:
                metadata = dict(context.invocation_metadata())
                if not self._authorized("grpc", signal, metadata.get("authorization"), _grpc_peer(context.peer())):
                    context.abort(grpc.StatusCode.UNAUTHENTICATED, _UNAUTHENTICATED)
            self._count("grpc", signal)
            failure = self._refusal()
            if failure is not None:
                self._count_rejected(failure[2])
                context.abort(getattr(grpc.StatusCode, failure[1]), failure[2])
            try:
                rows = self._decode_proto(signal, body)
            except DecodeError as e:
                self._count_rejected(str(e))
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
            try:
                rejected, message = self._deliver(signal, rows)
            except _Reject as r:
                self._count_rejected(r.message)
                context.abort(getattr(grpc.StatusCode, r.code), r.message)
            return self._response(signal, rejected, message).SerializeToString()

        # no request_deserializer: the method gets the raw bytes and parses them itself
        method = grpc.unary_unary_rpc_method_handler(export)
        return grpc.method_handlers_generic_handler(_SERVICES[signal][0], {"Export": method})

    # ------------------------------------------------------------------ HTTP

    def build_app(self, extra_routes: Any = None) -> Any:
        """The aiohttp application: the three OTLP/HTTP export routes, plus ``extra_routes``
        (an iterable of aiohttp route definitions, or a callable that gets the app)."""
        from aiohttp import web

        # the size limit is enforced by the export handler itself (raw and decompressed)
        app = web.Application(client_max_size=self.max_body)
        for signal in SIGNALS:
            app.router.add_post(f"/v1/{signal}", self._http_handler(signal))
        if extra_routes is not None:
            if callable(extra_routes):
                extra_routes(app)
            else:
                app.router.add_routes(list(extra_routes))
        return app

    def _http_handler(self, signal: str) -> Callable:
        async def handler(request: Any) -> Any:
            return await self._http_export(signal, request)

        handler.__name__ = f"otlp_http_{signal}"
        return handler

    async def _http_export(self, signal: str, request: Any) -> Any:
        from aiohttp import web

        ctype = request.content_type
        fmt = "json" if ctype == _JSON else "proto"
        if not self._authorized("http", signal, request.headers.get("Authorization"), request.remote or "unknown"):
            resp = self._http_status(_Reject(401, "UNAUTHENTICATED", _UNAUTHENTICATED), fmt)
            resp.headers["WWW-Authenticate"] = 'Bearer realm="evlog"'
            return resp
        self._count("http", signal)
        try:
            if ctype not in (_PROTOBUF, _JSON):
                raise _Reject(415, "INVALID_ARGUMENT",
                              f"unsupported Content-Type {ctype!r} (use {_PROTOBUF} or {_JSON})")
            encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("identity", "", "gzip", "deflate"):
                raise _Reject(415, "INVALID_ARGUMENT", f"unsupported Content-Encoding {encoding!r}")
            if request.content_length is not None and request.content_length > self.max_body:
                raise _Reject(413, "RESOURCE_EXHAUSTED",
                              f"body of {request.content_length} bytes is over the {self.max_body} limit")
            try:
                body = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise _Reject(413, "RESOURCE_EXHAUSTED", f"body is over the {self.max_body} bytes limit") from None
            failure = self._refusal()
            if failure is not None:
                raise _Reject(failure[0], failure[1], failure[2])
            loop = asyncio.get_running_loop()
            payload = await loop.run_in_executor(self._pool, self._http_process, signal, fmt, encoding, body)
        except _Reject as r:
            self._count_rejected(r.message)
            return self._http_status(r, fmt)
        return web.Response(body=payload, status=200, content_type=_JSON if fmt == "json" else _PROTOBUF)

    def _http_process(self, signal: str, fmt: str, encoding: str, body: bytes) -> bytes:
        """Off the event loop: decompress, decode, deliver; returns the response body."""
        if encoding in ("gzip", "deflate"):
            body = self._decompress(body, encoding)
        if fmt == "json":
            try:
                request = json.loads(body)
            except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: nested too deep
                raise _Reject(400, "INVALID_ARGUMENT", f"malformed JSON body: {e}") from None
            if _SURROGATE(body):  # JSON can spell what Unicode cannot: a lone surrogate is not text
                try:
                    json.dumps(request, ensure_ascii=False).encode("utf-8")
                except UnicodeEncodeError:
                    raise _Reject(400, "INVALID_ARGUMENT",
                                  "malformed JSON body: a string holds a lone surrogate (U+D800..U+DFFF)") from None
            try:
                rows = decode(signal, request)
            except DecodeError as e:
                raise _Reject(400, "INVALID_ARGUMENT", str(e)) from None
        else:
            try:
                rows = self._decode_proto(signal, body)
            except DecodeError as e:
                raise _Reject(400, "INVALID_ARGUMENT", str(e)) from None
        rejected, message = self._deliver(signal, rows)
        resp = self._response(signal, rejected, message)
        if fmt == "json":
            if not rejected:
                return b"{}"
            key = {"traces": "rejectedSpans", "logs": "rejectedLogRecords", "metrics": "rejectedDataPoints"}[signal]
            return json.dumps({"partialSuccess": {key: str(rejected), "errorMessage": message}}).encode()
        return resp.SerializeToString()

    def _decompress(self, body: bytes, encoding: str) -> bytes:
        # gzip header for gzip; zlib or raw deflate for "deflate", as clients disagree on it
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else (
            zlib.MAX_WBITS if body[:1] == b"\x78" else -zlib.MAX_WBITS)
        d = zlib.decompressobj(wbits)
        try:
            out = d.decompress(body, self.max_body + 1)
            if len(out) > self.max_body:
                raise _Reject(413, "RESOURCE_EXHAUSTED",
                              f"decompressed body is over the {self.max_body} bytes limit")
            if not d.eof:
                raise _Reject(400, "INVALID_ARGUMENT", f"truncated {encoding} body")
        except zlib.error as e:
            raise _Reject(400, "INVALID_ARGUMENT", f"malformed {encoding} body: {e}") from None
        return out

    def _http_status(self, r: _Reject, fmt: str) -> Any:
        import grpc
        from aiohttp import web
        from google.rpc import status_pb2

        code = getattr(grpc.StatusCode, r.code, grpc.StatusCode.UNKNOWN).value[0]
        if fmt == "json":
            body = json.dumps({"code": code, "message": r.message}).encode()
            return web.Response(body=body, status=r.status, content_type=_JSON)
        body = status_pb2.Status(code=code, message=r.message).SerializeToString()
        return web.Response(body=body, status=r.status, content_type=_PROTOBUF)

    def _start_http(self, timeout: float) -> None:
        from aiohttp import web

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        try:
            sock = socket.create_server((self.host, self._want_http), family=family, backlog=128)
        except OSError as e:
            raise ListenError("http", self.host, self._want_http, _reason(e)) from None
        self._http_port = sock.getsockname()[1]
        log = _ServerLog(self)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="evlog-otlp-http")
        app = self.build_app(self._extra_routes)
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        error: list[BaseException] = []

        async def serve() -> None:
            runner = web.AppRunner(app, access_log=None, auto_decompress=False, shutdown_timeout=1.0, logger=log)
            await runner.setup()
            await web.SockSite(runner, sock).start()
            self._runner = runner

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
            except BaseException as e:  # reported to start()
                error.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="evlog-otlp-http", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            sock.close()
            raise OSError(f"OTLP/HTTP server did not start within {timeout} s")
        if error:
            sock.close()
            raise error[0]
