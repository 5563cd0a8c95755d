"""Rows -> the store's tables: ``Ingest.ingest`` stores a batch of otlp_decode rows (or RawTraces) in one
transaction, a process row per new resource, and the few span columns the queries need (task key,
prefix, category, worker, thread, dependencies, state) taken from each span's name and attributes.
Called from the one writer thread (writer.Ingestor); a mixin of Store, whose connection it writes on."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from evlog.data import otlp_decode

from . import codec, json_spans, protobuf
from .codec import I64_MAX, dumps, process_name, u64
from .json_spans import RawJsonTraces
from .schema import CAT_EXECUTION, CAT_OTHER, CAT_POOL_TASK, CAT_SCHED_TASK, WHOLE_SPANS

_POOL_PREFIXES = ("futures.task", "multiprocessing.task", "futures.chunk", "multiprocessing.chunk")

_SPAN_KINDS = ("INTERNAL", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
_STATUS_CODES = ("UNSET", "OK", "ERROR")
_WANTED = frozenset(("dask.task.key", "dask.task.prefix", "dask.worker.address", "thread.id", "thread.name",
                     "dask.task.dependencies", "dask.task.state"))


def span_columns(name: str, a: dict, res_worker: str) -> tuple:
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
            None if thread is None else str(thread), None if deps is None else dumps(deps),
            None if state is None else str(state))


class Ingest:
    """Store's writing half: needs ``conn``, ``version``, ``_proc_ids``, ``_proc_worker``, ``_proc_by_bytes``
    and ``_load_processes`` (store.Store)."""

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
                    if isinstance(rows, protobuf.RawTraces):
                        req = c.execute("INSERT INTO requests (body) VALUES (?)", (rows.body,)).lastrowid
                        self._raw_span_tuples(rows.message, req, spans)
                    elif isinstance(rows, RawJsonTraces):
                        req = c.execute("INSERT INTO requests (body) VALUES (?)", (json_spans.pack(rows.body),)).lastrowid
                        self._json_span_tuples(rows, req, procs, spans)
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
        rkey = dumps(dict(sorted(resource.items())))
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
                (rkey, label, service, role, ppid if type(ppid) is int and abs(ppid) <= I64_MAX else None,
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
            key, prefix, cat, worker, thread, deps, state = span_columns(name, a, self._proc_worker.get(pid, ""))
            events = r["events"]
            links = r["links"]
            append((
                r["trace_id"], r["span_id"], r["parent_span_id"], name, r["kind"], u64(r["start"]), u64(r["end"]),
                r["status_code"], r["status_message"], key, prefix, cat, worker, thread, pid, len(events), deps,
                dumps(a) if a else "{}", dumps(events) if events else "[]",
                dumps(links) if links else "[]", None, None, r["scope"], state,
            ))

    def _json_span_tuples(self, raw: RawJsonTraces, req: int, memo: dict, out: list) -> None:
        """Columns of a run folder's line (json_spans.columns), the line itself stored once (``req``)."""
        append = out.append
        for resource, spans in raw.groups:
            pid = self._process(resource, memo)
            res_worker = self._proc_worker.get(pid, "")
            for tid, sid, psid, name, kind, start, end, code, msg, found, n_events, scope, idx, whole in spans:
                key, prefix, cat, worker, thread, deps, state = span_columns(name, found, res_worker)
                attrs, events = whole or (None, None)
                append((tid, sid, psid, name, kind, u64(start), u64(end), code, msg, key, prefix, cat, worker, thread,
                        pid, n_events, deps, attrs, events, None, req, idx, scope, state))

    def _raw_span_tuples(self, message: Any, req: int, out: list) -> None:
        """Columns straight from an ExportTraceServiceRequest (validated by decode_for_store).

        The hot loop of `evlog serve`: string attributes are read directly, only the few keys the
        queries use are looked at, and the span itself is kept as its protobuf bytes."""
        append = out.append
        kinds = _SPAN_KINDS
        codes = _STATUS_CODES
        wanted = _WANTED
        pb_any = otlp_decode.pb_any_value
        sched, execution, pool, other = CAT_SCHED_TASK, CAT_EXECUTION, CAT_POOL_TASK, CAT_OTHER
        pool_prefixes = _POOL_PREFIXES
        whole = WHOLE_SPANS
        u64 = codec.u64
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
                                deps = dumps(pb_any(v))
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
                    attrs, events = protobuf.whole(sp) if name.startswith(whole) else (None, None)
                    append((
                        sp.trace_id.hex(), sp.span_id.hex(), sp.parent_span_id.hex(), name, kinds[sp.kind],
                        u64(sp.start_time_unix_nano), u64(sp.end_time_unix_nano), codes[st.code], st.message, key, prefix,
                        cat, worker, thread, pid, len(sp.events), deps, attrs, events, None, req, idx, scope, state,
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
                u64(t), u64(r["observed_time"]), r["severity_number"], r["severity_text"], r["event_name"] or "",
                None if topic is None else str(topic), None if key is None else str(key),
                None if body is None else dumps(body), dumps(a) if a else "{}", r["trace_id"],
                r["span_id"], self._process(r["resource"], memo), r["scope"],
            ))

    def _point_tuples(self, rows: list[dict], memo: dict, out: list) -> None:
        append = out.append
        for r in rows:
            a = r["attributes"]
            extra = None
            if r["bucket_counts"] is not None or r["monotonic"] is not None or r["temporality"]:
                extra = dumps({"bucket_counts": r["bucket_counts"], "explicit_bounds": r["explicit_bounds"],
                                "monotonic": r["monotonic"], "temporality": r["temporality"]})
            value = r["value"]
            append((
                r["name"], r["unit"], r["kind"], u64(r["time"]), u64(r["start"]),
                None if value is None else float(value), u64(r["count"]), r["sum"], r["min"], r["max"],
                dumps(a) if a else "{}", extra, self._process(r["resource"], memo), r["scope"],
            ))

