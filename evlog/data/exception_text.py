"""An exception's type and message from the text a span or event carries (Dask's repr of the exception,
or "Type: message"): the report's failures and the dashboard's task story split it alike."""
from __future__ import annotations

import ast
import re

_REPR = re.compile(r"^([A-Za-z_][\w.]*)\((.*)\)$", re.S)


def split_exception(text: str) -> tuple[str, str]:
    """("ValueError", "bad input") from "ValueError('bad input')" (Dask's repr of the exception),
    or from "ValueError: bad input"; else ("", text)."""
    text = (text or "").strip()
    m = _REPR.match(text)
    if m:
        inner = m.group(2)
        try:
            v = ast.literal_eval(inner)
            if isinstance(v, str):
                inner = v
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
        return m.group(1), inner
    m = re.match(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt|Worker)): (.*)$", text, re.S)
    if m:
        return m.group(1), m.group(2)
    return "", text
