"""Readings for the sampled consumers: host load average, free memory, this process's bytes.

On Linux they come from /proc; elsewhere psutil is imported on the first reading that needs it, never at
start-up. Dask workers living in this process are found through ``distributed.worker.Worker._instances``
only if distributed is already imported, so a process without Dask pays nothing for it.
"""
from __future__ import annotations

import os
import sys

from evlog import notices


class Readings:
    """Host and process readings, each read again at most every ``max_age_s``.

    On Linux they are read from /proc through a descriptor kept open (a few microseconds; psutil
    takes 40-60 µs, and up to 250 µs of CPU on a busy host); elsewhere, or if /proc cannot be read,
    from psutil, imported on the first reading that needs it."""

    __slots__ = ("max_age_ns", "_mem", "_mem_t", "_rss", "_rss_t", "_proc", "_fds")

    def __init__(self, max_age_s: float = 0.2):
        self.max_age_ns = int(max_age_s * 1e9)
        self._mem = float("nan")
        self._mem_t = -(1 << 62)
        self._rss = 0
        self._rss_t = -(1 << 62)
        self._proc = None
        self._fds = {}  # /proc path -> (pid that opened it, fd); False once /proc failed

    @staticmethod
    def loadavg() -> float:
        """1-minute load average of the host (Sys.loadavg()[1])."""
        try:
            return os.getloadavg()[0]
        except (OSError, AttributeError):
            return float("nan")

    def mem_free(self, now_ns: int) -> float:
        """Fraction of the host's memory available, 0..1 (Sys.free_memory() / Sys.total_memory())."""
        if now_ns - self._mem_t >= self.max_age_ns:
            self._mem_t = now_ns
            try:
                text = self._read_proc("/proc/meminfo")
                if text is not None:
                    self._mem = _kib(text, b"MemAvailable:") / _kib(text, b"MemTotal:")
                else:
                    import psutil

                    vm = psutil.virtual_memory()
                    self._mem = vm.available / vm.total if vm.total else float("nan")
            except Exception as exc:
                self._forget_fds()
                notices.warn_once("readings-mem", f"cannot read free memory: {exc!r}")
        return self._mem

    def rss(self, now_ns: int) -> int:
        """This process's resident bytes."""
        if now_ns - self._rss_t >= self.max_age_ns:
            self._rss_t = now_ns
            try:
                text = self._read_proc("/proc/self/statm")
                if text is not None:
                    self._rss = int(text.split(None, 2)[1]) * _PAGE
                else:
                    if self._proc is None or self._proc.pid != os.getpid():
                        import psutil

                        self._proc = psutil.Process()
                    self._rss = self._proc.memory_info().rss
            except Exception as exc:
                self._forget_fds()
                notices.warn_once("readings-rss", f"cannot read the process's memory: {exc!r}")
        return self._rss

    def _read_proc(self, path: str):
        """The bytes of a /proc file, through a descriptor kept open (opened again in a forked child:
        /proc/self is resolved when opened); None where /proc cannot be read."""
        fds = self._fds
        if fds is False or _PAGE <= 0:
            return None
        pid = os.getpid()
        held = fds.get(path)
        for _attempt in (0, 1):
            try:
                if held is None or held[0] != pid:
                    held = fds[path] = (pid, os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
                text = os.pread(held[1], 8192, 0)
                if text:
                    return text
            except (OSError, AttributeError):
                pass
            fds.pop(path, None)
            held = None  # closed under us (a daemon closing every descriptor): open it once more
        self._fds = False
        return None

    def _forget_fds(self) -> None:
        """Unreadable text: the descriptor may be another file's now; open the paths again next time."""
        if self._fds:
            self._fds = {}


def _kib(text: bytes, field: bytes) -> int:
    """A ``Field:   123 kB`` line of /proc/meminfo, in KiB."""
    i = text.index(field) + len(field)
    return int(text[i:text.index(b"\n", i)].split()[0])


try:
    _PAGE = os.sysconf("SC_PAGE_SIZE") if sys.platform.startswith("linux") else 0
except (OSError, ValueError, AttributeError):
    _PAGE = 0


class _WorkersBytes:
    """Several Dask workers in one process (LocalCluster(processes=False)): their nbytes summed."""

    __slots__ = ("states",)

    def __init__(self, states):
        self.states = states

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.states)


def dask_state():
    """An object whose ``.nbytes`` is the bytes of task results held by this process's running Dask
    workers (``WorkerState.nbytes``, Dask's managed memory: results computed here and data fetched from
    other workers), or None where no worker is running here: a worker not started yet, or closing or
    closed (its data released while the process, e.g. an in-process cluster's program, still holds
    live bytes), stands for nothing, and the caller reads the process's resident bytes instead."""
    mod = sys.modules.get("distributed.worker")
    if mod is None:
        return None
    try:
        workers = [w for w in list(mod.Worker._instances)
                   if getattr(w, "state", None) is not None and _running(w)]
    except Exception:
        return None
    if not workers:
        return None
    if len(workers) == 1:
        return workers[0].state
    return _WorkersBytes(tuple(w.state for w in workers))


def _running(worker) -> bool:
    """Whether a Dask worker is running (``Worker.status``, a ``distributed.core.Status``)."""
    status = getattr(worker, "status", None)
    return getattr(status, "name", None) in _RUNNING


_RUNNING = frozenset({"running", "paused"})
