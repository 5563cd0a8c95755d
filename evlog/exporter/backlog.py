"""The exporter process's backlog: frames read from observed processes, waiting to be built and exported.

The exporter process reads every connection as fast as the bytes come (a read and a split, nothing
more), so an observed process never holds its records because spans are slow to build or a collector is
slow or down. What cannot be handled yet waits here in arrival order: in memory up to MEMORY bytes, then
in a spool file (an unlinked temporary file in the run folder or the temp dir: nothing is left behind,
even after a SIGKILL) up to SPOOL bytes (EVLOG_SPOOL_LIMIT, default 1 GiB). Past that, frames are
dropped and their records counted (``dropped.spool_full``).
"""
from __future__ import annotations

import os
import struct
import threading
from collections import deque

MEMORY = 8 << 20  # about 80,000 Dask transitions: a burst waits here, a lasting lag in the spool file
SPOOL = 1 << 30
_ENTRY = struct.Struct("<iII")  # client id (-1 - id: the client's end), records, bytes


class Backlog:
    def __init__(self, spool_dir: str | None = None, memory: int = MEMORY, spool: int = SPOOL):
        self.memory_limit = memory
        self.spool_limit = spool
        self.spool_dir = spool_dir
        self._mem: deque = deque()  # (client id, records, bytes or None)
        self._mem_bytes = 0
        self._file = None
        self._read = self._write = 0  # offsets in the spool file
        self._spooled = 0  # entries in the spool file
        self._records = 0  # records held (memory and spool)
        self._cond = threading.Condition()
        self.dropped = 0  # records dropped past the spool limit

    def put(self, client: int, records: int, data: bytes) -> None:
        """A frame of ``records`` records from ``client`` (never blocks)."""
        with self._cond:
            if self._spooled or self._mem_bytes + len(data) > self.memory_limit:
                if self._write - self._read + len(data) > self.spool_limit or not self._spill(client, records, data):
                    self.dropped += records
                    return
            else:
                self._mem.append((client, records, data))
                self._mem_bytes += len(data)
            self._records += records
            self._cond.notify()

    def end(self, client: int) -> None:
        """``client`` has disconnected: after its frames, its builders finish."""
        with self._cond:
            if self._spooled:
                self._spill(-1 - client, 0, b"")
            else:
                self._mem.append((client, 0, None))
            self._cond.notify()

    def get(self, timeout: float):
        """The oldest entry ``(client, records, bytes or None at a client's end)``, or None after ``timeout``."""
        with self._cond:
            if not self._mem and not self._spooled:
                self._cond.wait(timeout)
            if self._mem:
                client, records, data = self._mem.popleft()
                if data is not None:
                    self._mem_bytes -= len(data)
            elif self._spooled:
                client, records, data = self._unspill()
            else:
                return None
            self._records -= records
            return client, records, data

    def wake(self) -> None:
        """A ``get`` waiting returns now (None when nothing came): its caller has something to check."""
        with self._cond:
            self._cond.notify_all()

    def held(self) -> int:
        """Records waiting (in memory and in the spool file)."""
        return self._records

    def spooled_bytes(self) -> int:
        return self._write - self._read

    def _spill(self, client: int, records: int, data: bytes) -> bool:
        try:
            if self._file is None:
                import tempfile

                # the run folder once it exists (the exporter process may start before the program makes it)
                folder = self.spool_dir if self.spool_dir and os.path.isdir(self.spool_dir) else None
                self._file = tempfile.TemporaryFile(prefix="evlog-spool-", dir=folder)
            fd = self._file.fileno()
            os.pwrite(fd, _ENTRY.pack(client, records, len(data)) + data, self._write)
        except OSError as exc:
            from evlog import notices

            notices.warn_once("exporter-spool", f"the exporter process cannot spool records to disk ({exc}); "
                              "what does not fit in memory is dropped and counted")
            return False
        self._write += _ENTRY.size + len(data)
        self._spooled += 1
        return True

    def _unspill(self):
        fd = self._file.fileno()
        client, records, n = _ENTRY.unpack(os.pread(fd, _ENTRY.size, self._read))
        data = os.pread(fd, n, self._read + _ENTRY.size) if n else b""
        self._read += _ENTRY.size + n
        self._spooled -= 1
        if not self._spooled:  # all read: start the file afresh
            self._read = self._write = 0
            try:
                os.ftruncate(fd, 0)
            except OSError:
                pass
        if client < 0:
            return -1 - client, 0, None
        return client, records, data

    def close(self) -> None:
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                pass
