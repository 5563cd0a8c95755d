"""Per-process counters for the exit summary (spans, events, drops, ...).

Counters are plain ints bumped without a lock: a lost increment under a race only blurs a summary
figure, and the hot paths stay a single dict update. At exit each process appends one JSON line to
the run's stats file (EVLOG_STATS_FILE, set by the launcher), which the launcher sums.
"""
from __future__ import annotations

import os
import time

counters: dict[str, int] = {}
_written: dict[str, int] = {}  # what this process's lines so far have added up to
_last_progress = [0.0]
PROGRESS_S = 1.0  # at most one progress line per process and second


def incr(name: str, n: int = 1) -> None:
    counters[name] = counters.get(name, 0) + n


def reset() -> None:
    counters.clear()
    _written.clear()


def write_process_line(path: str | None = None) -> None:
    """Append what this process's counters gained since its last line to the stats file (the launcher
    sums the lines): at exit, and as progress (``progress``), so a process killed with SIGKILL or leaving
    by os._exit still counts what it exported until then."""
    path = path or os.environ.get("EVLOG_STATS_FILE")
    if path:
        now = dict(counters)
        delta = {k: v - _written.get(k, 0) for k, v in now.items() if v != _written.get(k, 0)}
        _written.update(now)
        append_line(path, {"pid": os.getpid(), "time": time.time(), **delta})


def no_progress() -> None:
    """This process reports its counters through another (the console relay through the program it
    serves): no progress lines of its own."""
    global PROGRESS_S
    PROGRESS_S = float("inf")


def progress() -> None:
    """A progress line, at most every PROGRESS_S seconds (called after each export)."""
    t = time.monotonic()
    if t - _last_progress[0] >= PROGRESS_S:
        _last_progress[0] = t
        write_process_line()


def append_line(path: str, row: dict) -> None:
    """One JSON line in one write (O_APPEND: never torn, whatever other processes do)."""
    line = _dumps(row) + "\n"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


def _dumps(row: dict) -> str:
    """JSON of a flat row of names and numbers (every process writes one at exit) without importing
    json; anything else goes through json."""
    parts = []
    for k, v in row.items():
        t = type(v)
        if type(k) is not str or not k.isprintable() or '"' in k or "\\" in k:
            break
        if t is int or (t is float and v == v and abs(v) != float("inf")):
            parts.append(f'"{k}": {v!r}')
        elif t is str and v.isprintable() and '"' not in v and "\\" not in v:
            parts.append(f'"{k}": "{v}"')
        elif v is None or t is bool:
            parts.append(f'"{k}": {"null" if v is None else "true" if v else "false"}')
        else:
            break
    else:
        return "{" + ", ".join(parts) + "}"
    import json

    return json.dumps(row)


def read_all(path: str) -> list[dict]:
    import json

    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    continue
    except OSError:
        pass
    return rows
