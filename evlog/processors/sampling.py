"""Readings for the sampled consumers: host load average, free memory, this process's bytes.

psutil is imported on the first reading that needs it, never at start-up. Dask workers living in this
process are found through ``distributed.worker.Worker._instances`` only if distributed is already
imported, so a process without Dask pays nothing for it.
"""
from __future__ import annotations

import os
import sys

from evlog import _report


class Readings:
    """Host and process readings, each read again at most every ``max_age_s`` (psutil costs ~40 µs)."""

    __slots__ = ("max_age_ns", "_mem", "_mem_t", "_rss", "_rss_t", "_proc")

    def __init__(self, max_age_s: float = 0.2):
        self.max_age_ns = int(max_age_s * 1e9)
        self._mem = float("nan")
        self._mem_t = -(1 << 62)
        self._rss = 0
        self._rss_t = -(1 << 62)
        self._proc = None

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
                import psutil

                vm = psutil.virtual_memory()
                self._mem = vm.available / vm.total if vm.total else float("nan")
            except Exception as exc:
                _report.warn_once("readings-mem", f"cannot read free memory: {exc!r}")
        return self._mem

    def rss(self, now_ns: int) -> int:
        """This process's resident bytes."""
        if now_ns - self._rss_t >= self.max_age_ns:
            self._rss_t = now_ns
            try:
                if self._proc is None or self._proc.pid != os.getpid():
                    import psutil

                    self._proc = psutil.Process()
                self._rss = self._proc.memory_info().rss
            except Exception as exc:
                _report.warn_once("readings-rss", f"cannot read the process's memory: {exc!r}")
        return self._rss


class _WorkersBytes:
    """Several Dask workers in one process (LocalCluster(processes=False)): their nbytes summed."""

    __slots__ = ("states",)

    def __init__(self, states):
        self.states = states

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.states)


def dask_state():
    """An object whose ``.nbytes`` is the bytes of task results held by this process's Dask workers
    (``WorkerState.nbytes``: results computed here and data fetched from other workers), or None."""
    mod = sys.modules.get("distributed.worker")
    if mod is None:
        return None
    try:
        workers = [w for w in list(mod.Worker._instances) if getattr(w, "state", None) is not None]
    except Exception:
        return None
    if not workers:
        return None
    if len(workers) == 1:
        return workers[0].state
    return _WorkersBytes(tuple(w.state for w in workers))


def dask_running() -> dict:
    """{thread ident: tasks} executing now on this process's Dask workers ({} without Dask)."""
    mod = sys.modules.get("distributed.worker")
    if mod is None:
        return {}
    out: dict = {}
    try:
        for w in list(mod.Worker._instances):
            for tid in list(getattr(w, "active_threads", {}) or {}):
                out[tid] = out.get(tid, 0) + 1
    except Exception:
        return out
    return out
