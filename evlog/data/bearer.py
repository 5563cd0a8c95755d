"""The bearer token of `evlog serve --token` / `evlog view --token`: checking what a request carries,
and the variable that makes an OTLP exporter send it.

Every comparison is ``hmac.compare_digest`` (its time does not depend on where a guess goes wrong).
The dashboard's cookie holds a value derived from the token, never the token itself: a cookie that
leaks opens the dashboard of that server but cannot export into it.
"""
from __future__ import annotations

import hashlib
import hmac
import urllib.parse

__all__ = ["valid", "from_authorization", "matches", "cookie_value", "encoded", "otlp_headers"]

# OTEL_EXPORTER_OTLP_HEADERS is W3C-baggage shaped: a value may hold any visible ASCII but these, and
# the SDKs percent-decode it, so "%" is escaped too
_UNSAFE_IN_HEADERS_VARIABLE = set('",;\\%')
_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if not chr(c).isalnum() and chr(c) not in _UNSAFE_IN_HEADERS_VARIABLE)


def valid(token: str) -> str:
    """What keeps ``token`` out of an HTTP header or gRPC metadata ("" if nothing does)."""
    if not token:
        return "is empty"
    bad = sorted({c for c in token if not 0x21 <= ord(c) <= 0x7E})
    if bad:
        return ("holds " + ", ".join(repr(c) for c in bad[:5]) + ", which an authorization header cannot carry: "
                "a token is visible ASCII (letters, digits, punctuation), one word")
    return ""


def from_authorization(value: str | None) -> str | None:
    """The token of an ``authorization: Bearer TOKEN`` header (the scheme in any case), else None."""
    if not value:
        return None
    scheme, _, credentials = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None
    return credentials.strip()


def matches(given: str | None, token: bytes) -> bool:
    """``given`` is ``token``, compared in constant time."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), token)


def cookie_value(token: bytes) -> str:
    """What the dashboard's cookie holds for ``token``: derived from it, and useless for exporting."""
    return hmac.new(token, b"evlog dashboard cookie", hashlib.sha256).hexdigest()


def encoded(token: str) -> str:
    """``token`` percent-encoded for OTEL_EXPORTER_OTLP_HEADERS, as the spec asks (most tokens need nothing)."""
    return urllib.parse.quote(token, safe=_SAFE)


def otlp_headers(token: str) -> str:
    """The OTEL_EXPORTER_OTLP_HEADERS value that sends ``token``."""
    return "authorization=Bearer%20" + encoded(token)
