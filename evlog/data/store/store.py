"""``Store``: one evlog SQLite database, opened (or created, the user's alone) and checked, with a read
connection per thread and views narrowed to one run (``scoped``). Writing is ingest.Ingest's, reading
queries.Queries'."""
from __future__ import annotations

import os
import sqlite3
import threading

from .ingest import Ingest
from .protobuf import Requests
from .queries import Queries
from .schema import RUN_OF, SPAN_INDEXES, StoreError, check_and_create


class Store(Ingest, Queries):
    """One evlog SQLite database. ``path=None`` keeps it in memory (one connection, one thread)."""

    def __init__(self, path: str | None, *, create: bool = True, indexes: bool = True):
        """``indexes=False``: a new store gets no span indexes until ``make_indexes`` (a run folder read in bulk)."""
        self.path = os.path.abspath(path) if path else None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._views: dict = {}  # run -> this store scoped to it (scoped())
        self._proc_ids: dict[str, int] = {}
        self._proc_worker: dict[int, str] = {}
        self._proc_by_bytes: dict[bytes, int] = {}
        self.version = 0  # bumped after every committed batch
        self._requests = Requests()
        self.closed = False
        if self.path and not create and not os.path.exists(self.path):
            raise StoreError(f"{self.path}: no such database")
        if self.path and os.path.isdir(self.path):
            raise StoreError(f"{self.path}: is a folder, not an evlog database")
        if self.path and not os.path.isdir(os.path.dirname(self.path)):
            raise StoreError(f"{self.path}: cannot create the database: the folder {os.path.dirname(self.path)} "
                             "does not exist")
        try:
            if self.path and create:  # telemetry can hold secrets: a new database is the user's alone
                try:
                    os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                except FileExistsError:
                    pass
                except OSError as e:
                    raise StoreError(f"{self.path}: cannot create the database ({e.strerror})") from None
            self.conn = sqlite3.connect(self.path or ":memory:", check_same_thread=False,
                                        isolation_level=None, timeout=30)
            check_and_create(self.conn, self.path, create, indexes)
        except sqlite3.OperationalError as e:  # e.g. unable to open database file: a folder we may not write
            if "unable to open" not in str(e):
                raise StoreError(f"{self.path}: damaged database ({e})") from None
            raise StoreError(f"{self.path or ':memory:'}: cannot open ({e})") from None
        except sqlite3.DatabaseError as e:
            if "not a database" in str(e):
                raise StoreError(f"{self.path}: not an evlog database ({e})") from None
            raise StoreError(f"{self.path}: damaged database ({e})") from None
        except sqlite3.Error as e:  # e.g. OperationalError: unable to open database file
            raise StoreError(f"{self.path or ':memory:'}: cannot open ({e})") from None
        self._load_processes()

    def make_indexes(self) -> None:
        """The span indexes of a store made with ``indexes=False``, from the rows it holds (nothing if it has them)."""
        self.conn.executescript(SPAN_INDEXES)

    def _load_processes(self) -> None:
        self._proc_ids = {}
        self._proc_by_bytes = {}
        for pid, rkey, worker in self.conn.execute("SELECT id, rkey, worker FROM processes"):
            self._proc_ids[rkey] = pid
            self._proc_worker[pid] = worker or ""

    # ---------------------------------------------------------------------------------------------
    # connections

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection (the main one for an in-memory store)."""
        if self.path is None:
            return self.conn
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.run is not None:
                conn = self._scoped_reader()
            else:
                conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
                conn.execute("PRAGMA query_only=1")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def scoped(self, run: str | None) -> Store:
        """This store's read side narrowed to one run: every query of the returned store sees only the
        rows of that run's processes (temp views named like the tables shadow them on connections of its
        own, so no query needs to know). ``None``: this store, whole."""
        if run is None or self.path is None:
            return self
        run = str(run)
        with self._readers_lock:
            view = self._views.get(run)
            if view is None:  # one per run, kept: its connections (one per query thread) are reused
                import copy

                view = copy.copy(self)
                view.run = run
                view._local = threading.local()
                if len(self._views) >= 64:
                    self._views.clear()
                self._views[run] = view
        return view

    run: str | None = None  # the run a scoped() store shows

    def _scoped_reader(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        lit = "'" + self.run.replace("'", "''") + "'"
        conn.executescript(
            f"CREATE TEMP VIEW processes AS SELECT * FROM main.processes WHERE {RUN_OF} = {lit};"
            "CREATE TEMP VIEW spans AS SELECT * FROM main.spans WHERE process IN (SELECT id FROM temp.processes);"
            "CREATE TEMP VIEW logs AS SELECT * FROM main.logs WHERE process IN (SELECT id FROM temp.processes);"
            "CREATE TEMP VIEW points AS SELECT * FROM main.points WHERE process IN (SELECT id FROM temp.processes);")
        conn.execute("PRAGMA query_only=1")
        return conn

    def close(self) -> None:
        self.closed = True
        with self._readers_lock:
            for c in self._readers:
                try:
                    c.close()
                except sqlite3.Error:
                    pass
            self._readers.clear()
        try:
            self.conn.close()
        except sqlite3.Error:
            pass
