"""What a console shows for a line: the one rendering the program (a logged record's marker, its first
line's CRC-32: evlog/observed/console.py) and the console's builder (evlog/builders/console_parse.py)
must agree on. Standard library only.
"""
from __future__ import annotations

import re

# CSI / OSC / DCS-PM-APC strings / two-byte escapes; "erase in line" is kept for the renderer.
_ANSI = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[PX^_][^\x1b]*(?:\x1b\\)?|[@-Z\\-_])?"
)
_ERASE_TO_END, _ERASE_LINE = "\ue000", "\ue001"


def _erase(m: re.Match) -> str:
    s = m.group(0)
    if s[-1:] == "K" and s[:2] == "\x1b[":
        return _ERASE_LINE if s[2:-1] == "2" else _ERASE_TO_END if s[2:-1] in ("", "0") else ""
    return ""


def render(line: str) -> str:
    """What a console shows for ``line``: escapes removed, ``\\r``/backspace/erase applied."""
    if "\x1b" in line:
        line = _ANSI.sub(_erase, line)
    if "\r" not in line and "\b" not in line and "\ue000" not in line and "\ue001" not in line:
        return line
    if "\b" not in line and "\ue000" not in line and "\ue001" not in line:
        shown = ""
        for seg in line.split("\r"):  # each carriage return overwrites from column 0
            shown = seg if len(seg) >= len(shown) else seg + shown[len(seg):]
        return shown
    cells: list[str] = []
    col = 0
    for ch in line:
        if ch == "\r":
            col = 0
        elif ch == "\b":
            col = max(0, col - 1)
        elif ch == _ERASE_TO_END:
            del cells[col:]
        elif ch == _ERASE_LINE:
            cells = [" "] * min(col, len(cells))
        else:
            if col < len(cells):
                cells[col] = ch
            else:
                cells.extend(" " * (col - len(cells)))
                cells.append(ch)
            col += 1
    return "".join(cells).rstrip(" ") if _ERASE_LINE in line else "".join(cells)
