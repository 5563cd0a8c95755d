"""Replace secrets in console text by ``[REDACTED]`` before anything leaves the process.

Console output may hold passwords and tokens (cluster-job-logging.txt warns about exactly that), so
every captured line and every string in a metadata object goes through a Redactor first. Built-in
patterns cover ``key=value`` secrets (the key is kept, the value replaced), bearer/basic credentials,
URL passwords, private key blocks and the token formats of the major providers; EVLOG_REDACT adds
the user's own patterns, whose whole match is replaced.

The built-ins are one alternation behind a substring prefilter, so a line without secrets costs
about a microsecond. A private key
block spans lines; the line parser uses ``KEY_BEGIN`` / ``KEY_END`` to drop the lines between.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

MASK = "[REDACTED]"

# Names whose value is a secret: "db_password=...", "GITHUB_TOKEN: ...", '"api_key": "..."'.
# The name must end there ("tokens=5" and "token_count=5" are not secrets).
_SECRET_NAME = (
    r"(?:password|passwd|pwd|passphrase|secret|token|api[_-]?key|apikey|access[_-]?key(?:[_-]?id)?"
    r"|secret[_-]?key|private[_-]?key|client[_-]?secret|auth|authorization|credentials?|session[_-]?id|cookie)"
)
_KEY_VALUE = (
    r"(?P<kv_key>(?<![\w-])(?:[\w.-]*[_.-])?" + _SECRET_NAME + r"[\"']?\s*(?:=|:)\s*)"
    r"(?P<kv_val>\"[^\"]*\"|'[^']*'|(?:basic|bearer|token|digest)\s+[^\s\"',;&]+|[^\s\"',;&]+)"
)
_PROVIDER_TOKENS = (
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|$)",
    r"\b(?i:bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*",  # kept as "Bearer [REDACTED]" below
    r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)",  # user:password@ in URLs
    r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b",  # AWS access key ids
    r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",  # GitHub
    r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
    r"\bglpat-[A-Za-z0-9\-_]{20,}\b",  # GitLab
    r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b",  # Slack
    r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}\b",  # Stripe
    r"\bAIza[0-9A-Za-z\-_]{35}\b",  # Google API keys
    r"\bya29\.[0-9A-Za-z\-_]{20,}",  # Google OAuth access tokens
    r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}",  # OpenAI, Anthropic
    r"\bhf_[A-Za-z0-9]{30,}\b",  # Hugging Face
    r"\bnpm_[A-Za-z0-9]{36}\b",  # npm
    r"\bpypi-[A-Za-z0-9_\-]{50,}",  # PyPI
    r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWTs
)
BUILTIN = re.compile(
    "(?i:" + _KEY_VALUE + ")|(?P<other>" + "|".join(f"(?:{p})" for p in _PROVIDER_TOKENS) + ")",
)
# A line can only match if it holds one of these (lower-cased): checking them costs about a
# microsecond, the full expression a hundred times more, and almost no line holds a secret.
_TRIGGERS = (
    "bearer", "://", "akia", "asia", "agpa", "aida", "aroa", "ghp_", "gho_", "ghu_", "ghs_", "ghr_",
    "github_pat_", "glpat-", "xox", "k_live_", "k_test_", "aiza", "ya29.", "sk-", "hf_", "npm_", "pypi-",
    "eyj", "private key",
)
_NAME_TRIGGERS = ("pass", "pwd", "secret", "token", "key", "auth", "cred", "session", "cookie")
KEY_BEGIN = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")
KEY_END = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY-----")
_SECRET_KEY_NAME = re.compile(r"(?i)^(?:.*[_.-])?" + _SECRET_NAME + "$")
_MAX_DEPTH = 32


def _replace(m: re.Match) -> str:
    key = m.group("kv_key")
    if key is not None:
        val = m.group("kv_val")
        if val[:1] in "\"'":
            return f"{key}{val[0]}{MASK}{val[0]}"
        word = val.split(None, 1)
        if len(word) == 2:  # "Authorization: Bearer abc" -> keep the scheme
            return f"{key}{word[0]} {MASK}"
        return key + MASK
    text = m.group("other")
    if text[:6].lower() == "bearer":
        return text[:6] + " " + MASK
    return MASK


class Redactor:
    """Built-in patterns plus extra ones (already validated regular expressions)."""

    def __init__(self, extra: Iterable[str] = ()):
        self.extra = tuple(re.compile(p) for p in extra)

    def __call__(self, text: str) -> str:
        low = text.lower()
        for t in _TRIGGERS:
            if t in low:
                text = BUILTIN.sub(_replace, text)
                break
        else:
            if ("=" in low or ":" in low) and any(t in low for t in _NAME_TRIGGERS):
                text = BUILTIN.sub(_replace, text)
        for pattern in self.extra:
            text = pattern.sub(MASK, text)
        return text

    def value(self, obj: Any, _depth: int = 0) -> Any:
        """A JSON value with every string redacted, and the whole value of secret-named keys."""
        if isinstance(obj, str):
            return self(obj)
        if _depth > _MAX_DEPTH:
            return MASK if isinstance(obj, (dict, list)) else obj
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                k2 = self(k)
                out[k2] = MASK if (v is not None and _SECRET_KEY_NAME.match(k)) else self.value(v, _depth + 1)
            return out
        if isinstance(obj, list):
            return [self.value(v, _depth + 1) for v in obj]
        return obj
