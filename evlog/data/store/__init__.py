"""The SQLite store behind `evlog serve`, `evlog view` and the CLI: schema, batched ingestion, queries.

One file holds spans, log records (events) and metric points from any number of processes and
hosts, each row tied to its process (one row per OTLP resource). WAL mode, so the dashboard and the
CLI read while the writer writes, and the data survives a restart of the server. Rows arrive as the
flat dicts of ``otlp_decode``; ``Ingestor`` queues them and one writer thread stores them in large
transactions, so an exporter never waits on a query or on a per-row commit.

Spans arrive three ways. From OTLP/JSON over HTTP they are row dicts, stored with attributes, events
and links as JSON. From OTLP protobuf (`evlog serve`), ``decode_for_store`` keeps the parsed
request: the writer takes the few columns the queries need straight from the message, keeps the
request's protobuf bytes once (table ``requests``) and each span's place in it (``req``, ``idx``);
otlp_decode turns a span into a row dict only when its task is looked at. Building a row dict per
span and event costs about five times more than that, and would cap the server below the 20,000
spans/s it must store. From a run folder (`evlog view`, the CLI), a traces line is kept the same way
(json_spans: its columns read from the decoded line, the line stored compressed), and decoded into
rows only where it is not plain (a line that is not well formed is then reported). The few spans the
dashboard reads with their attributes for every one of them (transfers, the bytes a worker holds, Dask's
named spans: schema.WHOLE_SPANS) also get their attributes and events as JSON columns, so no panel
decodes the stored requests again to draw them.

Indexed by trace, task key, time and process: what the story, events, Gantt and summary ask for.
A file that is not SQLite, or SQLite that is not evlog's, raises ``StoreError`` naming the file.

One job per module: schema (tables, format mark, span categories, the file check), codec (how values sit
in columns), protobuf (spans kept as their request), ingest (rows -> tables), queries (tables -> answers),
store (``Store``: connections and per-run views), writer (``Ingestor``: the writer thread), rows (a
store back as otlp_decode rows, for the report), json_spans (a run folder's traces lines kept whole). Import from
here: evlog.data.store.
"""
from .codec import dumps, process_name
from .protobuf import RawTraces, decode_for_store
from .rows import store_points, store_rows
from .schema import CAT_EXECUTION, CAT_OTHER, CAT_POOL_TASK, CAT_SCHED_TASK, FORMAT, SCHEMA_VERSION, StoreError
from .store import Store
from .writer import Ingestor, Overloaded

__all__ = ["CAT_EXECUTION", "CAT_OTHER", "CAT_POOL_TASK", "CAT_SCHED_TASK", "FORMAT", "SCHEMA_VERSION", "Ingestor",
           "Overloaded", "RawTraces", "Store", "StoreError", "decode_for_store", "dumps", "process_name",
           "store_points", "store_rows"]
