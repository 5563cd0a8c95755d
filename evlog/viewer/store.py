"""The SQLite store behind `evlog serve`, `evlog view` and the CLI: schema, batched ingestion, queries.

One file holds spans, log records (events) and metric points from any number of processes and
hosts, each row tied to its process (one row per OTLP resource). WAL mode, so the dashboard and the
CLI read while the writer writes, and the data survives a restart of the server. Rows arrive as the
flat dicts of ``otlp_decode``; ``Ingestor`` queues them and one writer thread stores them in large
transactions, so an exporter never waits on a query or on a per-row commit.

Spans arrive two ways. From a run folder or OTLP/JSON they are row dicts, stored with attributes,
events and links as JSON. From OTLP protobuf (`evlog serve`), ``decode_for_store`` keeps the parsed
request: the writer takes the few columns the queries need straight from the message, keeps the
request's protobuf bytes once (table ``requests``) and each span's place in it (``req``, ``idx``);
otlp_decode turns a span into a row dict only when its task is looked at. Building a row dict per
span and event costs about five times more than that, and would cap the server below the 20,000
spans/s it must store.

Indexed by trace, task key, time and process: what the story, events, Gantt and summary ask for.
A file that is not SQLite, or SQLite that is not evlog's, raises ``StoreError`` naming the file.
"""
from __future__ import annotations

import collections
import json
import os
import sqlite3
import threading
import time
from typing import Any, Callable, Iterable

from evlog.data import otlp_decode
from evlog.data.receiver import Backpressure

FORMAT = "evlog-store"
SCHEMA_VERSION = "4"  # 4: spans.state (a task life's dask.task.state); a version-3 file gets the column

# span categories: what the Gantt draws
CAT_OTHER, CAT_SCHED_TASK, CAT_EXECUTION, CAT_POOL_TASK = 0, 1, 2, 3
_POOL_PREFIXES = ("futures.task", "multiprocessing.task", "futures.chunk", "multiprocessing.chunk")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evlog_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS processes (
    id INTEGER PRIMARY KEY, rkey TEXT UNIQUE NOT NULL, label TEXT, service TEXT, role TEXT,
    pid INTEGER, host TEXT, worker TEXT, resource TEXT);
CREATE TABLE IF NOT EXISTS spans (
    id INTEGER PRIMARY KEY, trace_id TEXT, span_id TEXT, parent_span_id TEXT, name TEXT, kind TEXT,
    start INTEGER, end INTEGER, status_code TEXT, status_message TEXT, task_key TEXT, prefix TEXT,
    cat INTEGER, worker TEXT, thread TEXT, process INTEGER, n_events INTEGER, deps TEXT,
    attributes TEXT, events TEXT, links TEXT, req INTEGER, idx INTEGER, scope TEXT, state TEXT);
CREATE TABLE IF NOT EXISTS requests (id INTEGER PRIMARY KEY, body BLOB);
CREATE INDEX IF NOT EXISTS spans_trace ON spans(trace_id);
CREATE INDEX IF NOT EXISTS spans_key ON spans(task_key);
CREATE INDEX IF NOT EXISTS spans_start ON spans(cat, start);
CREATE INDEX IF NOT EXISTS spans_process ON spans(process);
CREATE TABLE IF NOT EXISTS logs (
    id INTEGER PRIMARY KEY, time INTEGER, observed_time INTEGER, severity_number INTEGER,
    severity_text TEXT, event_name TEXT, topic TEXT, task_key TEXT, body TEXT, attributes TEXT,
    trace_id TEXT, span_id TEXT, process INTEGER, scope TEXT);
CREATE INDEX IF NOT EXISTS logs_time ON logs(time);
CREATE INDEX IF NOT EXISTS logs_topic ON logs(topic, time);
CREATE INDEX IF NOT EXISTS logs_event ON logs(event_name, time);
CREATE INDEX IF NOT EXISTS logs_trace ON logs(trace_id);
CREATE INDEX IF NOT EXISTS logs_process ON logs(process);
CREATE TABLE IF NOT EXISTS points (
    id INTEGER PRIMARY KEY, name TEXT, unit TEXT, kind TEXT, time INTEGER, start INTEGER, value REAL,
    count INTEGER, sum REAL, min REAL, max REAL, attributes TEXT, extra TEXT, process INTEGER,
    scope TEXT);
CREATE INDEX IF NOT EXISTS points_name ON points(name, time);
CREATE INDEX IF NOT EXISTS points_process ON points(process);
"""

_TABLES = {"evlog_meta", "processes", "spans", "logs", "points", "requests"}


_SPAN_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUS_CODES = ("UNSET", "OK", "ERROR")
_WANTED = frozenset(("dask.task.key", "dask.task.prefix", "dask.worker.address", "thread.id", "thread.name",
                     "dask.task.dependencies", "dask.task.state"))


def _columns(name: str, a: dict, res_worker: str) -> tuple:
    """(task_key, prefix, cat, worker, thread, deps JSON, state) of a span, from its name and attributes."""
    key = a.get("dask.task.key")
    prefix = a.get("dask.task.prefix")
    if prefix is None:
        sp = name.find(" ")
        prefix = name[sp + 1:] if sp >= 0 else None
    if name.startswith("dask.task"):
        cat, worker = CAT_SCHED_TASK, a.get("dask.worker.address") or ""
    elif name.startswith("dask.execute"):
        cat, worker = CAT_EXECUTION, a.get("dask.worker.address") or res_worker
    elif name.startswith(_POOL_PREFIXES):
        cat, worker = CAT_POOL_TASK, res_worker
    else:
        cat, worker = CAT_OTHER, res_worker
    thread = a.get("thread.name") or a.get("thread.id")
    deps = a.get("dask.task.dependencies")
    state = a.get("dask.task.state")
    return (None if key is None else str(key), None if prefix is None else str(prefix), cat, str(worker),
            None if thread is None else str(thread), None if deps is None else _dumps(deps),
            None if state is None else str(state))


class RawTraces:
    """A parsed ExportTraceServiceRequest and its bytes, handed to the store as is (see decode_for_store)."""

    __slots__ = ("message", "body", "n")

    def __init__(self, message: Any, body: bytes, n: int):
        self.message = message
        self.body = body
        self.n = n

    def __len__(self) -> int:
        return self.n


def decode_for_store(signal: str, body: Any) -> Any:
    """The receiver's protobuf decoder for `evlog serve`: traces are parsed and checked here (so a
    malformed request still gets INVALID_ARGUMENT / 400 with decode_proto's message) and handed on
    as RawTraces; logs and metrics become rows as usual."""
    if signal != "traces":
        return otlp_decode.decode_proto(signal, body)
    cls = otlp_decode.request_class(signal)
    if isinstance(body, cls):
        message, body = body, body.SerializeToString()
    else:
        body = bytes(body)
        try:
            message = cls.FromString(body)
        except Exception:
            return otlp_decode.decode_proto(signal, body)  # raises DecodeError saying why
    n = 0
    for rs in message.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                if (len(sp.trace_id) != 16 or len(sp.span_id) != 8 or len(sp.parent_span_id) not in (0, 8)
                        or not 0 <= sp.kind <= 5 or not 0 <= sp.status.code <= 2):
                    otlp_decode.decode_proto(signal, message)  # raises DecodeError naming the span
                    raise otlp_decode.DecodeError(f"resourceSpans: malformed span {sp.name[:60]!r}")
                n += 1
    return RawTraces(message, body, n)


class _Requests:
    """Stored protobuf requests, parsed on demand (a few kept: clicks tend to stay in one batch)."""

    def __init__(self, size: int = 8):
        self.size = size
        self._cache: dict[int, list] = {}
        self._lock = threading.Lock()

    def spans(self, conn: sqlite3.Connection, req: int) -> list:
        with self._lock:
            got = self._cache.get(req)
        if got is not None:
            return got
        row = conn.execute("SELECT body FROM requests WHERE id = ?", (req,)).fetchone()
        msg = otlp_decode.request_class("traces").FromString(row[0] if row else b"")
        got = [sp for rs in msg.resource_spans for ss in rs.scope_spans for sp in ss.spans]
        with self._lock:
            if len(self._cache) >= self.size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[req] = got
        return got

    def rows(self, conn: sqlite3.Connection, places: list[tuple[int, int]]) -> list[dict]:
        """Row dicts (otlp_decode's) of the spans at these (request, index) places, in order."""
        if not places:
            return []
        req = otlp_decode.request_class("traces")()
        out = req.resource_spans.add().scope_spans.add().spans
        for r, i in places:
            out.append(self.spans(conn, r)[i])
        return otlp_decode.decode_proto("traces", req)


class StoreError(Exception):
    """The database cannot be used; the message names the file and says why."""


_I64_MAX = (1 << 63) - 1


def _u64(v: Any) -> Any:
    """A uint64 (a time, a count) as SQLite's signed 64-bit INTEGER can hold it: values past 2**63 - 1,
    which no clock or counter reaches but a request may carry, are stored as 2**63 - 1."""
    return _I64_MAX if v is not None and v > _I64_MAX else v


def _default(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    return str(v)


_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, default=_default,
                          check_circular=False).encode


def dumps(v: Any) -> str:
    return _dumps(v)


def _loads(s: str | None) -> Any:
    if not s:
        return {} if s is None else s
    return json.loads(s)


def process_name(service: str, role: str, pid, host: str) -> str:
    """A process as evlog names it where not by its Dask worker address: ``app worker 4242@host``."""
    return " ".join(x for x in (service, role if role and role not in service else "",
                                f"{pid}@{host}" if pid else host) if x) or "unknown"


class Store:
    """One evlog SQLite database. ``path=None`` keeps it in memory (one connection, one thread)."""

    def __init__(self, path: str | None, *, create: bool = True):
        self.path = os.path.abspath(path) if path else None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._views: dict = {}  # run -> this store scoped to it (scoped())
        self._proc_ids: dict[str, int] = {}
        self._proc_worker: dict[int, str] = {}
        self._proc_by_bytes: dict[bytes, int] = {}
        self.version = 0  # bumped after every committed batch
        self._requests = _Requests()
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
            self._check_and_create(create)
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

    def _load_processes(self) -> None:
        self._proc_ids = {}
        self._proc_by_bytes = {}
        for pid, rkey, worker in self.conn.execute("SELECT id, rkey, worker FROM processes"):
            self._proc_ids[rkey] = pid
            self._proc_worker[pid] = worker or ""

    def _check_and_create(self, create: bool) -> None:
        c = self.conn
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables:
            if "evlog_meta" not in tables:
                raise StoreError(f"{self.path}: an SQLite database, but not evlog's "
                                 f"(tables: {', '.join(sorted(tables)[:5])})")
            meta = dict(c.execute("SELECT key, value FROM evlog_meta"))
            if meta.get("format") != FORMAT:
                raise StoreError(f"{self.path}: an SQLite database, but not evlog's (no evlog format mark)")
            if meta.get("version") == "3" and "spans" in tables:  # the one column version 4 added
                try:
                    c.execute("ALTER TABLE spans ADD COLUMN state TEXT")
                    c.execute("UPDATE evlog_meta SET value = ? WHERE key = 'version'", (SCHEMA_VERSION,))
                except sqlite3.OperationalError as e:
                    raise StoreError(f"{self.path}: evlog database of schema version '3' that cannot be brought "
                                     f"to version {SCHEMA_VERSION} ({e})") from None
                meta["version"] = SCHEMA_VERSION
            if meta.get("version") != SCHEMA_VERSION:
                raise StoreError(f"{self.path}: evlog database of schema version {meta.get('version')!r}; "
                                 f"this evlog reads version {SCHEMA_VERSION}")
            missing = _TABLES - tables
            if missing:
                raise StoreError(f"{self.path}: damaged evlog database (missing tables: {', '.join(sorted(missing))})")
        elif not create:
            raise StoreError(f"{self.path}: an empty database, not evlog's")
        if self.path:
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
        if not tables:
            c.executescript(_SCHEMA)
            c.executemany("INSERT OR REPLACE INTO evlog_meta VALUES (?, ?)",
                          [("format", FORMAT), ("version", SCHEMA_VERSION), ("created", str(time.time()))])
        else:
            c.execute("SELECT count(*) FROM spans WHERE id < 0").fetchone()  # reads a page: damaged files fail here

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

    def runs(self) -> list[dict]:
        """The runs stored (by resource attribute evlog.run.id; '' for processes without one), newest
        first: their services, processes and time range."""
        procs: dict = {}
        for pid, run, service in self._q(f"SELECT id, {_RUN_OF}, service FROM processes"):
            procs[pid] = (run, service)
        times: dict = {}
        for sql in ("SELECT process, min(start), max(end) FROM spans GROUP BY process",
                    "SELECT process, min(time), max(time) FROM logs GROUP BY process"):
            for p, t0, t1 in self._q(sql):
                a, b = times.get(p, (None, None))
                times[p] = (t0 if a is None or (t0 is not None and t0 < a) else a,
                            t1 if b is None or (t1 is not None and t1 > b) else b)
        runs: dict = {}
        for pid, (run, service) in procs.items():
            r = runs.setdefault(run, {"run": run, "services": set(), "processes": 0, "start": None, "end": None})
            r["processes"] += 1
            if service:
                r["services"].add(service)
            t0, t1 = times.get(pid, (None, None))
            if t0 is not None and (r["start"] is None or t0 < r["start"]):
                r["start"] = t0
            if t1 is not None and (r["end"] is None or t1 > r["end"]):
                r["end"] = t1
        out = [{**r, "services": sorted(r["services"])} for r in runs.values()]
        out.sort(key=lambda r: r["start"] or 0, reverse=True)
        return out

    def scoped(self, run: str | None) -> "Store":
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
            f"CREATE TEMP VIEW processes AS SELECT * FROM main.processes WHERE {_RUN_OF} = {lit};"
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

    # ---------------------------------------------------------------------------------------------
    # ingestion

    def ingest(self, batch: Iterable[tuple[str, list[dict]]]) -> int:
        """Store ``[(signal, rows), ...]`` in one transaction; returns the number of rows stored."""
        spans: list[tuple] = []
        logs: list[tuple] = []
        points: list[tuple] = []
        procs: dict[int, int] = {}  # id(resource dict) -> process id, valid while the rows live
        c = self.conn
        c.execute("BEGIN IMMEDIATE")
        try:
            for signal, rows in batch:
                if signal == "traces":
                    if isinstance(rows, RawTraces):
                        req = c.execute("INSERT INTO requests (body) VALUES (?)", (rows.body,)).lastrowid
                        self._raw_span_tuples(rows.message, req, spans)
                    else:
                        self._span_tuples(rows, procs, spans)
                elif signal == "logs":
                    self._log_tuples(rows, procs, logs)
                elif signal == "metrics":
                    self._point_tuples(rows, procs, points)
            if spans:
                c.executemany("INSERT INTO spans VALUES (NULL,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", spans)
            if logs:
                c.executemany("INSERT INTO logs VALUES (NULL,?,?,?,?,?,?,?,?,?,?,?,?,?)", logs)
            if points:
                c.executemany("INSERT INTO points VALUES (NULL,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", points)
            c.execute("COMMIT")
        except BaseException:
            try:
                c.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            self._load_processes()
            raise
        self.version += 1
        return len(spans) + len(logs) + len(points)

    def _process(self, resource: dict, memo: dict) -> int:
        pid = memo.get(id(resource))
        if pid is not None:
            return pid
        rkey = _dumps(dict(sorted(resource.items())))
        pid = self._proc_ids.get(rkey)
        if pid is None:
            r = resource
            worker = r.get("dask.worker.address") or ""
            service = str(r.get("service.name") or "")
            role = str(r.get("dask.role") or r.get("evlog.process.role") or "")
            host = str(r.get("host.name") or "")
            ppid = r.get("process.pid")
            label = str(worker) or process_name(service, role, ppid, host)
            cur = self.conn.execute(
                "INSERT INTO processes (rkey, label, service, role, pid, host, worker, resource) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (rkey, label, service, role, ppid if type(ppid) is int and abs(ppid) <= _I64_MAX else None,
                 host, str(worker), rkey))
            pid = cur.lastrowid
            self._proc_ids[rkey] = pid
            self._proc_worker[pid] = str(worker)
        memo[id(resource)] = pid
        return pid

    def _span_tuples(self, rows: list[dict], memo: dict, out: list) -> None:
        append = out.append
        for r in rows:
            a = r["attributes"]
            res = r["resource"]
            name = r["name"]
            pid = self._process(res, memo)
            key, prefix, cat, worker, thread, deps, state = _columns(name, a, self._proc_worker.get(pid, ""))
            events = r["events"]
            links = r["links"]
            append((
                r["trace_id"], r["span_id"], r["parent_span_id"], name, r["kind"], _u64(r["start"]), _u64(r["end"]),
                r["status_code"], r["status_message"], key, prefix, cat, worker, thread, pid, len(events), deps,
                _dumps(a) if a else "{}", _dumps(events) if events else "[]",
                _dumps(links) if links else "[]", None, None, r["scope"], state,
            ))

    def _raw_span_tuples(self, message: Any, req: int, out: list) -> None:
        """Columns straight from an ExportTraceServiceRequest (validated by decode_for_store).

        The hot loop of `evlog serve`: string attributes are read directly, only the few keys the
        queries use are looked at, and the span itself is kept as its protobuf bytes."""
        append = out.append
        kinds = _SPAN_KINDS
        codes = _STATUS_CODES
        wanted = _WANTED
        pb_any = otlp_decode._pb_any
        sched, execution, pool, other = CAT_SCHED_TASK, CAT_EXECUTION, CAT_POOL_TASK, CAT_OTHER
        pool_prefixes = _POOL_PREFIXES
        u64 = _u64
        idx = -1
        for rs in message.resource_spans:
            pid = self._process_pb(rs.resource)
            res_worker = self._proc_worker.get(pid, "")
            for ss in rs.scope_spans:
                scope = ss.scope.name
                for sp in ss.spans:
                    idx += 1
                    key = prefix = worker = thread = deps = state = None
                    for kv in sp.attributes:
                        k = kv.key
                        if k in wanted:
                            v = kv.value
                            if k == "dask.task.key":
                                key = v.string_value if v.HasField("string_value") else str(pb_any(v))
                            elif k == "dask.task.prefix":
                                prefix = v.string_value if v.HasField("string_value") else str(pb_any(v))
                            elif k == "dask.worker.address":
                                worker = v.string_value if v.HasField("string_value") else str(pb_any(v))
                            elif k == "dask.task.dependencies":
                                deps = _dumps(pb_any(v))
                            elif k == "dask.task.state":
                                state = v.string_value if v.HasField("string_value") else str(pb_any(v))
                            elif thread is None or k == "thread.name":
                                thread = str(pb_any(v))
                    name = sp.name
                    if prefix is None:
                        i = name.find(" ")
                        if i >= 0:
                            prefix = name[i + 1:]
                    if name.startswith("dask.task"):
                        cat, worker = sched, worker or ""
                    elif name.startswith("dask.execute"):
                        cat, worker = execution, worker or res_worker
                    elif name.startswith(pool_prefixes):
                        cat, worker = pool, res_worker
                    else:
                        cat, worker = other, res_worker
                    st = sp.status
                    append((
                        sp.trace_id.hex(), sp.span_id.hex(), sp.parent_span_id.hex(), name, kinds[sp.kind],
                        u64(sp.start_time_unix_nano), u64(sp.end_time_unix_nano), codes[st.code], st.message, key, prefix,
                        cat, worker, thread, pid, len(sp.events), deps, None, None, None, req, idx, scope, state,
                    ))

    def _process_pb(self, resource: Any) -> int:
        b = resource.SerializeToString(deterministic=True)
        pid = self._proc_by_bytes.get(b)
        if pid is None:
            req = otlp_decode.request_class("traces")()
            rs = req.resource_spans.add()
            rs.resource.CopyFrom(resource)
            rs.scope_spans.add().spans.add(trace_id=b"\1" * 16, span_id=b"\1" * 8)
            pid = self._process(otlp_decode.decode_proto("traces", req)[0]["resource"], {})
            self._proc_by_bytes[b] = pid
        return pid

    def _log_tuples(self, rows: list[dict], memo: dict, out: list) -> None:
        append = out.append
        for r in rows:
            a = r["attributes"]
            topic = a.get("dask.topic")
            if topic is None:
                topic = a.get("evlog.topic")
            key = a.get("dask.task.key")
            t = r["time"] or r["observed_time"]
            body = r["body"]
            append((
                _u64(t), _u64(r["observed_time"]), r["severity_number"], r["severity_text"], r["event_name"] or "",
                None if topic is None else str(topic), None if key is None else str(key),
                None if body is None else _dumps(body), _dumps(a) if a else "{}", r["trace_id"],
                r["span_id"], self._process(r["resource"], memo), r["scope"],
            ))

    def _point_tuples(self, rows: list[dict], memo: dict, out: list) -> None:
        append = out.append
        for r in rows:
            a = r["attributes"]
            extra = None
            if r["bucket_counts"] is not None or r["monotonic"] is not None or r["temporality"]:
                extra = _dumps({"bucket_counts": r["bucket_counts"], "explicit_bounds": r["explicit_bounds"],
                                "monotonic": r["monotonic"], "temporality": r["temporality"]})
            value = r["value"]
            append((
                r["name"], r["unit"], r["kind"], _u64(r["time"]), _u64(r["start"]),
                None if value is None else float(value), _u64(r["count"]), r["sum"], r["min"], r["max"],
                _dumps(a) if a else "{}", extra, self._process(r["resource"], memo), r["scope"],
            ))

    # ---------------------------------------------------------------------------------------------
    # queries (each on this thread's read connection)

    def _q(self, sql: str, args: tuple = ()) -> list:
        return self.reader().execute(sql, args).fetchall()

    def summary(self) -> dict:
        """Counts and time range, as `evlog summary` prints them."""
        q = self._q
        spans, span_events, traces, s0, s1 = q(
            "SELECT count(*), coalesce(sum(n_events), 0), count(DISTINCT trace_id), min(start), max(end) FROM spans")[0]
        events = q("SELECT count(*) FROM logs WHERE event_name != '' AND event_name != 'evlog.profile'")[0][0]
        logs = q("SELECT count(*) FROM logs WHERE event_name = ''")[0][0]
        m0 = q("SELECT min(time) FROM logs")[0][0]
        m1 = q("SELECT max(time) FROM logs")[0][0]
        points, p0, p1 = q("SELECT count(*), min(time), max(time) FROM points")[0]
        processes = q("SELECT count(*) FROM processes")[0][0]
        hosts = q("SELECT count(DISTINCT host) FROM processes")[0][0]
        tasks = q("SELECT count(DISTINCT task_key) FROM spans WHERE task_key IS NOT NULL")[0][0]
        # one per client call, however many traces a big one was split into (dask_shape)
        computations = q("SELECT count(*) FROM spans WHERE name = 'dask.compute'")[0][0]
        starts = [x for x in (s0, m0, p0) if x]
        ends = [x for x in (s1, m1, p1) if x]
        return {
            "spans": spans, "span_events": span_events, "events": events, "logs": logs,
            "metric_points": points, "processes": processes, "hosts": hosts, "traces": traces,
            "tasks": tasks, "computations": computations, "start": min(starts) if starts else None, "end": max(ends) if ends else None,
        }

    def processes(self) -> list[dict]:
        """The processes (one row per resource), each labelled once: a Dask worker whose resource gained
        its address after it first exported (two rows, one process) is labelled by its address in both."""
        cols = ("id", "label", "service", "role", "pid", "host", "worker")
        rows = [dict(zip(cols, r)) for r in self._q(
            "SELECT id, label, service, role, pid, host, worker FROM processes ORDER BY id")]
        address = {(r["host"], r["pid"], r["service"]): r["worker"] for r in rows if r["worker"] and r["pid"]}
        for r in rows:
            w = address.get((r["host"], r["pid"], r["service"]))
            if w and not r["worker"]:
                r["label"] = r["worker"] = w
        return rows

    def lane_workers(self, cat: int | None) -> list[str]:
        """The workers the Gantt's lanes name for spans of ``cat``: a Dask worker's address, else the
        label of the process that ran the span (pool workers); each once."""
        labels = {p["id"]: p["label"] for p in self.processes()}
        rows = self._q("SELECT DISTINCT worker, process FROM spans" + (" WHERE cat = ?" if cat is not None else ""),
                       () if cat is None else (cat,))
        return sorted({w or labels.get(p, "?") for w, p in rows})

    def story(self, key: str) -> list[dict]:
        """A task's transitions in time order across processes (like Scheduler.story, but kept).

        Each entry: time (ns), start, finish, stimulus, worker, process (service, role and pid@host, as
        the report names processes; a Dask worker's too, not its address alone), span (name). Span
        events that are not transitions (e.g. compute start/stop) come with start=None and their
        name in ``event``; an exception's has its text in ``message``, as the report shows it.
        """
        out = []
        rows = self._q("SELECT s.name, s.events, s.req, s.idx, s.worker, p.label, p.service, p.role, p.pid, p.host, "
                       "p.worker FROM spans s LEFT JOIN processes p ON p.id = s.process WHERE s.task_key = ? "
                       "ORDER BY s.start", (key,))
        raws = iter(self._requests.rows(self.reader(), [(r[2], r[3]) for r in rows if r[2] is not None]))
        for name, events, req, _idx, worker, label, service, role, pid, host, own in rows:
            evs = next(raws)["events"] if req is not None else (_loads(events) or ())
            process = process_name(service or "", role or "", pid, host or "") if label is not None else ""
            worker = worker or own  # the span's worker, else the worker the process is
            for ev in evs:
                a = ev.get("attributes") or {}
                entry = {
                    "time": ev.get("time", 0), "event": ev.get("name", ""),
                    "start": a.get("dask.transition.start"), "finish": a.get("dask.transition.finish"),
                    "stimulus": a.get("dask.stimulus_id"),
                    "worker": a.get("dask.worker.address") or worker or "", "process": process,
                    "span": name,
                }
                if "exception.message" in a:
                    entry["message"] = str(a["exception.message"])
                out.append(entry)
        out.sort(key=lambda e: e["time"])
        return out

    def task_spans(self, key: str | None = None, span_id: str | None = None) -> list[dict]:
        """The spans of one task (by key), or one span (by id) when it has no key."""
        if key is not None:
            rows = self._q(_SPAN_SELECT + " WHERE s.task_key = ? ORDER BY s.start", (key,))
        else:
            rows = self._q(_SPAN_SELECT + " WHERE s.span_id = ? ORDER BY s.start", (span_id or "",))
        return self._span_dicts(rows)

    def _span_dicts(self, rows: list[tuple]) -> list[dict]:
        raws = iter(self._requests.rows(self.reader(), [(r[17], r[18]) for r in rows if r[17] is not None]))
        out = []
        for r in rows:
            d = dict(zip(_SPAN_COLS, r))
            if r[17] is not None:
                full = next(raws)
                d["attributes"], d["events"] = full["attributes"], full["events"]
            else:
                d["attributes"] = _loads(r[15])
                d["events"] = _loads(r[16]) or []
            out.append(d)
        return out

    def span_logs(self, span_ids: list[str], key: str | None = None, limit: int = 500) -> list[dict]:
        """Events emitted inside these spans, or naming the task key."""
        if not span_ids and key is None:
            return []
        marks = ",".join("?" * len(span_ids))
        where = f"span_id IN ({marks})" if span_ids else "0"
        args: tuple = tuple(span_ids)
        if key is not None:
            where += " OR task_key = ?"
            args += (key,)
        return [_log_dict(r) for r in self._q(
            _LOG_SELECT + f" WHERE {where} ORDER BY l.time LIMIT ?", args + (limit,))]

    def topics(self, every: bool = False) -> list[tuple[str, int]]:
        """(topic, count) of the events with a topic; with ``every``, of every event, by its group
        (its topic, else its event name)."""
        group, where = (_GROUP, _EVERY) if every else ("topic", "topic IS NOT NULL")
        return [(t, n) for t, n in self._q(
            f"SELECT {group} AS g, count(*) FROM logs l WHERE {where} GROUP BY g ORDER BY g")]

    def events(self, topic: str | None = None, limit: int | None = None, since: int | None = None,
               newest_first: bool = False, every: bool = False) -> list[dict]:
        """Events with a topic (dask.log_event / evlog.log_event), oldest first, like get_events. With
        ``every``: every event (a log record with an event name, e.g. evlog.metadata, torch's and the
        bridge's, or with a topic), ``topic`` then naming a group (a topic, else an event name)."""
        where, args = [_EVERY if every else "l.topic IS NOT NULL"], []
        if topic is not None:
            where.append(f"{_GROUP if every else 'l.topic'} = ?")
            args.append(topic)
        if since is not None:
            where.append("l.time >= ?")
            args.append(since)
        sql = _LOG_SELECT + " WHERE " + " AND ".join(where) + \
            f" ORDER BY l.time {'DESC' if newest_first else ''}, l.id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return [_log_dict(r) for r in self._q(sql, tuple(args))]

    def named_events(self, event_name: str, limit: int = 20000) -> list[dict]:
        """Log records with this event name, oldest first (e.g. evlog.metadata)."""
        return [_log_dict(r) for r in self._q(
            _LOG_SELECT + " WHERE l.event_name = ? ORDER BY l.time, l.id LIMIT ?", (event_name, limit))]

    def console_streams(self) -> list[tuple[str, int, str, int]]:
        """(process label, process id, stream, lines) of the captured console (log.iostream records)."""
        return self._q(
            f"SELECT p.label, l.process, {_IOSTREAM} AS stream, count(*) "
            "FROM logs l LEFT JOIN processes p ON p.id = l.process WHERE l.event_name = '' AND stream IS NOT NULL "
            "GROUP BY l.process, stream ORDER BY p.label, stream")

    def console(self, text: str | None = None, stream: str | None = None, process: int | None = None,
                limit: int = 2000) -> tuple[list[dict], int]:
        """The newest ``limit`` console lines (oldest first) containing ``text`` (case-insensitive), of
        one stream and process if given; and how many matched in all."""
        where = ["l.event_name = ''", f"{_IOSTREAM} IS NOT NULL"]
        args: list = []
        if stream:
            where.append(f"{_IOSTREAM} = ?")
            args.append(stream)
        if process is not None:
            where.append("l.process = ?")
            args.append(process)
        if text:
            where.append("l.body LIKE ? ESCAPE '\\'")
            args.append("%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        cond = " WHERE " + " AND ".join(where)
        total = self._q("SELECT count(*) FROM logs l" + cond, tuple(args))[0][0]
        rows = self._q(_LOG_SELECT + cond + " ORDER BY l.time DESC, l.id DESC LIMIT ?", tuple(args) + (int(limit),))
        return [_log_dict(r) for r in reversed(rows)], total

    def progress(self) -> dict[str, dict[str, int]]:
        """{prefix: {state: tasks}} of the Dask task keys whose lives are recorded so far (their dask.task
        spans): per key the state of its last life that computed (a second life, which only let the
        result go, never stands in for it); forgotten and released count as "released"."""
        per: dict[str, tuple[str, str]] = {}
        for key, prefix, state in self._q(
                f"SELECT task_key, prefix, {_STATE} FROM spans WHERE cat = ? AND prefix IS NOT NULL "
                "AND task_key IS NOT NULL ORDER BY start, id", (CAT_SCHED_TASK,)):
            if key not in per or state not in _LET_GO or per[key][1] in _LET_GO:
                per[key] = (prefix, state)
        out: dict[str, dict[str, int]] = {}
        for prefix, state in per.values():
            st = out.setdefault(prefix, {})
            state = "released" if state in _LET_GO else state or "released"
            st[state] = st.get(state, 0) + 1
        return out

    def prefix_states(self, name: str = "dask.prefix.tasks") -> dict[str, dict[str, int]]:
        """{prefix: {state: tasks}} of the scheduler's latest sample of ``name`` (Dask's own counts per
        task prefix, evlog/instrumentation/dask_gauges.py), summed over schedulers; prefixes with
        nothing active (all zero: forgotten) are left out."""
        out: dict[str, dict[str, int]] = {}
        for prefix, state, value in self._q(
                f"SELECT {_PREFIX}, {_attr('p.attributes', 'dask.task.state')}, p.value FROM points p "
                f"JOIN (SELECT process, {_PREFIX} AS prefix, max(time) AS t FROM points p WHERE name = ? "
                "GROUP BY process, prefix) last "
                f"ON p.process = last.process AND p.time = last.t AND {_PREFIX} = last.prefix WHERE p.name = ?",
                (name, name)):
            if prefix is None or state is None or not isinstance(value, (int, float)) or value != value:
                continue
            st = out.setdefault(str(prefix), {})
            st[str(state)] = st.get(str(state), 0) + int(value)
        return {p: st for p, st in out.items() if any(st.values())}

    def span_categories(self) -> dict[int, int]:
        return {c: n for c, n in self._q("SELECT cat, count(*) FROM spans GROUP BY cat")}

    def gantt_rows(self, cat: int | None, t0: int | None = None, t1: int | None = None,
                   process: int | None = None, worker: str | None = None) -> list[tuple]:
        """(id, start, end, worker, thread, process, prefix, status_code, task_key, name) of spans
        overlapping [t0, t1]; cat None means every span."""
        where, args = [], []
        if cat is not None:
            where.append("cat = ?")
            args.append(cat)
        if t1 is not None:
            where.append("start <= ?")
            args.append(t1)
        if t0 is not None:
            where.append("end >= ?")
            args.append(t0)
        if process is not None:
            where.append("process = ?")
            args.append(process)
        if worker is not None:
            where.append("worker = ?")
            args.append(worker)
        if cat == CAT_SCHED_TASK:  # a second life (it only let the result go) is no bar of its own
            where.append(f"NOT ({_STATE} IN {_LET_GO} AND task_key IN "
                         f"(SELECT task_key FROM spans WHERE cat = {CAT_SCHED_TASK} AND {_STATE} IN ('memory', 'erred')))")
        sql = "SELECT id, start, end, worker, thread, process, prefix, status_code, task_key, name FROM spans"
        if where:
            sql += " WHERE " + " AND ".join(where)
        return self._q(sql + " ORDER BY start", tuple(args))

    def span_by_id(self, row_id: int) -> dict | None:
        rows = self._q(_SPAN_SELECT + " WHERE s.id = ?", (row_id,))
        return self._span_dicts(rows)[0] if rows else None

    def dependencies(self, limit: int | None = None) -> list[tuple]:
        """(task_key, prefix, status_code, worker, dependencies JSON or None) per scheduler task span."""
        sql = ("SELECT task_key, prefix, status_code, worker, deps "
               "FROM spans WHERE cat = 1 AND task_key IS NOT NULL ORDER BY start")
        if limit is not None:
            return self._q(sql + " LIMIT ?", (limit,))
        return self._q(sql)

    def metric_names(self) -> list[tuple[str, str, int]]:
        return self._q("SELECT name, unit, count(*) FROM points GROUP BY name ORDER BY name")

    def run_bounds(self) -> tuple[int | None, int | None]:
        """The times of the run's start and end samples (points of the exporter process,
        ``evlog.process.role=exporter``; evlog/exporters/host_samples.py), or (None, None)."""
        return tuple(self._q("SELECT min(time), max(time) FROM points WHERE process IN "
                             "(SELECT id FROM processes WHERE role = 'exporter')")[0])

    def held_bytes(self, worker: str | None = None) -> dict[str, list[tuple[int, int]]]:
        """worker -> (time ns, bytes held) at each change: the events of the ``dask.worker.memory`` spans
        (docs/conventions.md); an event without a whole, non-negative ``dask.worker.nbytes`` is skipped."""
        out: dict[str, list[tuple[int, int]]] = {}
        for d in self._span_dicts(self._q(_SPAN_SELECT + " WHERE s.name = 'dask.worker.memory'")):
            w = d["attributes"].get("dask.worker.address")
            w = w if isinstance(w, str) and w else (d["worker"] or "?")
            if worker and w != worker:
                continue
            pts = out.setdefault(w, [])
            for ev in d["events"]:
                n = (ev.get("attributes") or {}).get("dask.worker.nbytes")
                if type(n) is int and n >= 0 and type(ev.get("time")) is int:
                    pts.append((ev["time"], n))
        return {w: pts for w, pts in out.items() if pts}

    def worker_memory(self) -> list[tuple[int, str, str, float]]:
        """(time ns, worker address, managed | unmanaged | spilled, bytes) of the scheduler's samples of
        each worker's memory (``dask.worker.memory.*``, evlog/instrumentation/dask_gauges.py), in time order."""
        return [(t, str(w), name.rpartition(".")[2], v) for t, w, name, v in self._q(
            f"SELECT time, {_attr('attributes', 'dask.worker.address')} AS w, name, value FROM points "
            "WHERE name IN ('dask.worker.memory.managed', 'dask.worker.memory.unmanaged', "
            "'dask.worker.memory.spilled') AND w IS NOT NULL AND value IS NOT NULL ORDER BY time, id")]

    def series(self, name: str, buckets: int | None = None) -> tuple[list[tuple], bool]:
        """(process, time, value) of a gauge or sum (a histogram's mean), in time order, and whether
        it was averaged: past ``buckets`` points, SQLite averages per process and time bucket (so a
        long run's 100,000s of points cost one grouped scan, not a Python loop)."""
        value = "coalesce(value, sum / nullif(count, 0))"
        n, lo, hi = self._q("SELECT count(*), min(time), max(time) FROM points WHERE name = ?", (name,))[0]
        if not buckets or n <= buckets or lo is None or hi <= lo:
            return self._q(f"SELECT process, time, {value} FROM points WHERE name = ? ORDER BY time", (name,)), False
        width = (hi - lo) // buckets + 1
        return self._q(
            f"SELECT process, ? + ((time - ?) / ?) * ? AS t, avg({value}) FROM points WHERE name = ? "
            "GROUP BY process, t ORDER BY t", (lo, lo, width, width, name)), True


_LET_GO = ("released", "forgotten")  # the states of a life that only let its result go (a second life)
# a span's dask.task.state: its column, or its JSON attributes for rows of a version-3 file
def _attr(column: str, key: str) -> str:
    """SQL for one attribute of a JSON column; NULL where the column is text SQLite's JSON refuses (a hostile
    exporter's NaN is stored so): one such row must not make a whole query fail ('malformed JSON')."""
    return f"CASE WHEN json_valid({column}) THEN json_extract({column}, '$.\"{key}\"') END"


_PREFIX = _attr("p.attributes", "dask.task.prefix")
_STATE = f"coalesce(state, {_attr('attributes', 'dask.task.state')}, '')"
_IOSTREAM = _attr("l.attributes", "log.iostream")

_SPAN_SELECT = ("SELECT s.id, s.trace_id, s.span_id, s.parent_span_id, s.name, s.kind, s.start, s.end, "
                "s.status_code, s.status_message, s.task_key, s.prefix, s.worker, s.thread, p.label, "
                "s.attributes, s.events, s.req, s.idx FROM spans s LEFT JOIN processes p ON p.id = s.process")
_SPAN_COLS = ("id", "trace_id", "span_id", "parent_span_id", "name", "kind", "start", "end", "status_code",
              "status_message", "task_key", "prefix", "worker", "thread", "process")


# an event: a log record with an event name or a topic; task profiles (evlog.profile: pprof bodies) are data, not events
_EVERY = "((l.event_name != '' OR l.topic IS NOT NULL) AND l.event_name != 'evlog.profile')"
_GROUP = "coalesce(l.topic, l.event_name)"  # an event's group: its topic, else its event name
# a process's run (processes table), as text whatever a resource carried (an exporter may send any value)
# (a resource with values JSON cannot carry, NaN say, is stored as text json_extract refuses: no run id)
_RUN_OF = ("coalesce(CASE WHEN json_valid(resource) THEN CAST(json_extract(resource, '$.\"evlog.run.id\"') AS TEXT) "
           "END, '')")

_LOG_SELECT = ("SELECT l.id, l.time, l.severity_text, l.event_name, l.topic, l.task_key, l.body, "
               "l.attributes, l.trace_id, l.span_id, p.label, l.process FROM logs l "
               "LEFT JOIN processes p ON p.id = l.process")


def _log_dict(r: tuple) -> dict:
    return {
        "id": r[0], "time": r[1], "severity": r[2], "event_name": r[3], "topic": r[4], "task_key": r[5],
        "body": None if r[6] is None else json.loads(r[6]), "attributes": _loads(r[7]),
        "trace_id": r[8], "span_id": r[9], "process": r[10] or "", "process_id": r[11],
    }


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
        from evlog import _report

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
                _report.warn_once(f"store-write-{type(e).__name__}",
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
