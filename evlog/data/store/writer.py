"""``Ingestor``: the store's one writer thread, behind a bounded queue of decoded rows, committing large
transactions and checkpointing the WAL beside it; ``Overloaded`` when the queue stays full."""
from __future__ import annotations

import collections
import sqlite3
import threading
import time
from collections.abc import Callable

from evlog.data.receiver import Backpressure

from .store import Store


class Overloaded(Backpressure):
    """The ingestion queue is full: the receiver answers 503 / UNAVAILABLE and the exporter retries."""


class Ingestor:
    """Queues decoded rows and stores them from one writer thread, in large transactions.

    ``submit`` never touches the database: it appends to a bounded queue and returns, so an exporter
    waits neither on a query nor on a commit. Listeners (e.g. the dashboard's live updates) are
    called with the store's new version after each commit.
    """

    def __init__(self, store: Store, max_pending_rows: int = 500_000, max_batch_rows: int = 50_000):
        self.store = store
        self.max_pending_rows = max_pending_rows
        self.max_batch_rows = max_batch_rows
        self.listeners: list[Callable[[int], None]] = []
        self.stored = {"traces": 0, "logs": 0, "metrics": 0}
        self.refused_rows = 0
        self.write_errors = 0
        self._queue: collections.deque = collections.deque()
        self._pending = 0
        self._submitted = 0
        self._done = 0
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="evlog-store-writer", daemon=True)
        self._thread.start()
        self._checkpointer = None
        if store.path is not None:  # WAL checkpoints off the writer's path (see _checkpoint)
            store.conn.execute("PRAGMA wal_autocheckpoint=0")
            self._wal_dirty = threading.Event()
            self._checkpointer = threading.Thread(target=self._checkpoint, name="evlog-store-checkpoint",
                                                  daemon=True)
            self._checkpointer.start()

    def submit(self, signal: str, rows: list[dict], timeout: float | None = 10.0) -> None:
        """Queue rows for the writer. When the queue is full, wait up to ``timeout`` seconds for room
        (None: as long as it takes), then raise Overloaded (the rows are refused and counted)."""
        n = len(rows)
        if not n:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._pending and self._pending + n > self.max_pending_rows and not self._stop:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self.refused_rows += n
                    raise Overloaded(f"{self._pending:,} rows waiting to be stored")
                self._cond.wait(left)
            if self._stop:
                raise Overloaded("the store is closing")
            self._queue.append((signal, rows))
            self._pending += n
            self._submitted += 1
            self._cond.notify()

    def pending(self) -> int:
        return self._pending

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is stored (or could not be)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            target = self._submitted
            while self._done < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        self.flush(timeout)
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._checkpointer is not None:
            self._wal_dirty.set()
            self._checkpointer.join(timeout)
            try:  # leave a tidy file: everything in the database, an empty WAL
                self.store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.Error:
                pass

    def _checkpoint(self) -> None:
        """Copy the WAL into the database from a connection of its own, about once a second while
        data comes in. SQLite's automatic checkpoint would do it inside the writer's COMMIT, where it
        holds up the next batch; here its I/O runs beside the writer (PASSIVE never blocks it)."""
        conn = sqlite3.connect(self.store.path, check_same_thread=False, isolation_level=None, timeout=30)
        try:
            while True:
                self._wal_dirty.wait()
                if self._stop:
                    return
                self._wal_dirty.clear()
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                except sqlite3.Error:
                    pass
                time.sleep(1.0)  # pacing: at most one checkpoint a second
        finally:
            conn.close()

    def _run(self) -> None:
        from evlog import notices

        while True:
            with self._cond:
                while not self._queue and not self._stop:
                    self._cond.wait()
                if not self._queue and self._stop:
                    return
                batch, n = [], 0
                while self._queue and n < self.max_batch_rows:
                    item = self._queue.popleft()
                    batch.append(item)
                    n += len(item[1])
            try:
                self.store.ingest(batch)
                for signal, rows in batch:
                    self.stored[signal] = self.stored.get(signal, 0) + len(rows)
            except Exception as e:  # a full disk, a locked file: counted and reported, the server goes on
                self.write_errors += n
                notices.warn_once(f"store-write-{type(e).__name__}",
                                  f"cannot store telemetry in {self.store.path}: {e}; rows are dropped and counted")
            with self._cond:
                self._pending -= n
                self._done += len(batch)
                self._cond.notify_all()
            if self._checkpointer is not None:
                self._wal_dirty.set()
            version = self.store.version
            for fn in list(self.listeners):
                try:
                    fn(version)
                except Exception:
                    pass
