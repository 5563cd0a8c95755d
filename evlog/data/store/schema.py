"""The store's schema: its tables and indexes, its format mark and version, the span categories, and the
check that a file is an evlog store this evlog reads (StoreError naming the file otherwise)."""
from __future__ import annotations

import sqlite3
import time

FORMAT = "evlog-store"
SCHEMA_VERSION = "4"  # 4: spans.state (a task life's dask.task.state); a version-3 file gets the column

# span categories: what the Gantt draws
CAT_OTHER, CAT_SCHED_TASK, CAT_EXECUTION, CAT_POOL_TASK = 0, 1, 2, 3
# spans whose attributes and events the dashboard reads for every one of them (transfers for the Gantt,
# the bytes a worker holds for the plots, Dask's named spans for the fine metrics): stored as JSON columns
# at ingest even when the span is kept as its request, so drawing a panel never decodes the run again
WHOLE_SPANS = ("dask.transfer", "dask.worker.memory", "dask.span ")
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

# the spans' indexes: made with the tables, or, for a store filled in bulk first (Store(indexes=False)), once
# it is filled (Store.make_indexes): an index made from a full table costs a third of keeping it row by row
SPAN_INDEXES = """
CREATE INDEX IF NOT EXISTS spans_trace ON spans(trace_id);
CREATE INDEX IF NOT EXISTS spans_key ON spans(task_key);
CREATE INDEX IF NOT EXISTS spans_start ON spans(cat, start);
CREATE INDEX IF NOT EXISTS spans_process ON spans(process);
"""

_TABLES = {"evlog_meta", "processes", "spans", "logs", "points", "requests"}

# a process's run (processes table), as text whatever a resource carried (an exporter may send any value)
# (a resource with values JSON cannot carry, NaN say, is stored as text json_extract refuses: no run id)
RUN_OF = ("coalesce(CASE WHEN json_valid(resource) THEN CAST(json_extract(resource, '$.\"evlog.run.id\"') AS TEXT) "
          "END, '')")


class StoreError(Exception):
    """The database cannot be used; the message names the file and says why."""


def check_and_create(c: sqlite3.Connection, path: str | None, create: bool, indexes: bool = True) -> None:
    """Check that an existing file is an evlog store of this schema (bringing a version-3 file to 4), or
    create the tables in an empty one; StoreError naming ``path`` otherwise."""
    tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if tables:
        if "evlog_meta" not in tables:
            raise StoreError(f"{path}: an SQLite database, but not evlog's "
                             f"(tables: {', '.join(sorted(tables)[:5])})")
        meta = dict(c.execute("SELECT key, value FROM evlog_meta"))
        if meta.get("format") != FORMAT:
            raise StoreError(f"{path}: an SQLite database, but not evlog's (no evlog format mark)")
        if meta.get("version") == "3" and "spans" in tables:  # the one column version 4 added
            try:
                c.execute("ALTER TABLE spans ADD COLUMN state TEXT")
                c.execute("UPDATE evlog_meta SET value = ? WHERE key = 'version'", (SCHEMA_VERSION,))
            except sqlite3.OperationalError as e:
                raise StoreError(f"{path}: evlog database of schema version '3' that cannot be brought "
                                 f"to version {SCHEMA_VERSION} ({e})") from None
            meta["version"] = SCHEMA_VERSION
        if meta.get("version") != SCHEMA_VERSION:
            raise StoreError(f"{path}: evlog database of schema version {meta.get('version')!r}; "
                             f"this evlog reads version {SCHEMA_VERSION}")
        missing = _TABLES - tables
        if missing:
            raise StoreError(f"{path}: damaged evlog database (missing tables: {', '.join(sorted(missing))})")
    elif not create:
        raise StoreError(f"{path}: an empty database, not evlog's")
    if path:
        c.execute("PRAGMA journal_mode=WAL")
        c.execute("PRAGMA synchronous=NORMAL")
    if not tables:
        c.executescript(_SCHEMA + (SPAN_INDEXES if indexes else ""))
        c.executemany("INSERT OR REPLACE INTO evlog_meta VALUES (?, ?)",
                      [("format", FORMAT), ("version", SCHEMA_VERSION), ("created", str(time.time()))])
    else:
        c.execute("SELECT count(*) FROM spans WHERE id < 0").fetchone()  # reads a page: damaged files fail here
