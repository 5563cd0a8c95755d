"""Per-process counters for the exit summary (spans, events, drops, ...).

Counters are plain ints bumped without a lock: a lost increment under a race only blurs a summary
figure, and the hot paths stay a single dict update. Each process appends JSON lines to the run's
stats file (EVLOG_STATS_FILE, set by the launcher), which the launcher sums: what changed since its
last line, after each export (so a process killed by SIGKILL has its exports counted) and at exit.

The stats file is the launcher's memfd, which every process of the run opens as
/proc/<launcher pid>/fd/<n>: it is gone with the launcher however the launcher ends (SIGKILL too), and a
process that writes after the summary (a forkserver ending last) finds nothing to recreate. Without
memfd or /proc it is a file in the temp dir, removed by the launcher after the summary.
"""
from __future__ import annotations

import os
import threading
import time

counters: dict[str, int] = {}


def incr(name: str, n: int = 1) -> None:
    counters[name] = counters.get(name, 0) + n


_written: dict[str, int] = {}  # the counters as of this process's last line
_writing = threading.Lock()  # one line at a time: a delta is marked written only once it is in the file


def _new_lock() -> None:  # a fork while another thread wrote a line: the child's lock is free
    global _writing
    _writing = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock)


def reset() -> None:
    counters.clear()
    _written.clear()


def write_process_line(path: str | None = None, final: bool = True) -> None:
    """Append what this process's counters gained since its last line to the stats file; ``final``
    (at exit) writes a line even with nothing new, so the process is counted."""
    path = path or os.environ.get("EVLOG_STATS_FILE")
    if not path:
        return
    # One line at a time, and a delta marked written only once it is in the file: a progress line cut
    # short by the process's os._exit must leave its delta to the final line. The lock's wait is
    # bounded: a line is never worth a hang.
    locked = _writing.acquire(timeout=2.0)
    try:
        now = dict(counters)
        delta = {k: v - _written.get(k, 0) for k, v in now.items() if v != _written.get(k, 0)}
        if delta or final:
            append_line(path, {"pid": os.getpid(), "time": time.time(), **delta})
            _written.update(now)
    finally:
        if locked:
            _writing.release()


def progress() -> None:
    """A progress line (after each export: one append beside a whole export)."""
    write_process_line(final=False)


MEMFD_NAME = "evlog-stats-"


def new_file(run_id: str, tmpdir: str) -> tuple[str, int | None]:
    """A new stats file for a run: its path for EVLOG_STATS_FILE and the memfd to keep open (None for a
    file in ``tmpdir``, which the caller removes)."""
    try:
        fd = os.memfd_create(MEMFD_NAME + run_id)
    except (AttributeError, OSError):
        return os.path.join(tmpdir, f"{MEMFD_NAME}{run_id}.jsonl"), None
    path = f"/proc/{os.getpid()}/fd/{fd}"
    if not _ours(path):  # no /proc here
        os.close(fd)
        return os.path.join(tmpdir, f"{MEMFD_NAME}{run_id}.jsonl"), None
    return path, fd


def _ours(path: str) -> bool:
    """Is ``path`` (/proc/PID/fd/N) still a run's stats memfd, not a file of a process that got the pid?"""
    try:
        return os.readlink(path).startswith("/memfd:" + MEMFD_NAME)
    except OSError:
        return False


def append_line(path: str, row: dict) -> None:
    """One JSON line in one write (O_APPEND: never torn, whatever other processes do)."""
    line = _dumps(row) + "\n"
    proc = path.startswith("/proc/")
    if proc and not _ours(path):
        return  # the launcher is gone: nobody will read it
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | (0 if proc else os.O_CREAT), 0o600)
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
