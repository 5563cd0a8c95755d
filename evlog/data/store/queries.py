"""The store's queries, each on the calling thread's read connection: counts, processes, runs, a task's
spans and story, events, console lines, progress, Gantt rows, dependencies and metric series. A mixin
of Store (it needs ``reader()`` and ``_requests``); the SQL fragments they share are below."""
from __future__ import annotations

import json

from evlog import process_count

from .codec import loads, process_name
from .schema import CAT_EXECUTION, CAT_OTHER, CAT_SCHED_TASK, RUN_OF


class Queries:
    """Store's reading half (store.Store)."""

    def _q(self, sql: str, args: tuple = ()) -> list:
        return self.reader().execute(sql, args).fetchall()

    def runs(self) -> list[dict]:
        """The runs stored (by resource attribute evlog.run.id; '' for processes without one), newest
        first: their services, processes and time range."""
        procs: dict = {}
        for pid, run, service, resource in self._q(f"SELECT id, {RUN_OF}, service, resource FROM processes"):
            procs[pid] = (run, service, resource)
        times: dict = {}
        for sql in ("SELECT process, min(start), max(end) FROM spans GROUP BY process",
                    "SELECT process, min(time), max(time) FROM logs GROUP BY process"):
            for p, t0, t1 in self._q(sql):
                a, b = times.get(p, (None, None))
                times[p] = (t0 if a is None or (t0 is not None and t0 < a) else a,
                            t1 if b is None or (t1 is not None and t1 > b) else b)
        runs: dict = {}
        for pid, (run, service, resource) in procs.items():
            r = runs.setdefault(run, {"run": run, "services": set(), "processes": 0, "start": None, "end": None,
                                      "resources": []})
            r["resources"].append(loads(resource))
            if service:
                r["services"].add(service)
            t0, t1 = times.get(pid, (None, None))
            if t0 is not None and (r["start"] is None or t0 < r["start"]):
                r["start"] = t0
            if t1 is not None and (r["end"] is None or t1 > r["end"]):
                r["end"] = t1
        for r in runs.values():
            r["processes"] = process_count.count(r.pop("resources"))[0]
        out = [{**r, "services": sorted(r["services"])} for r in runs.values()]
        out.sort(key=lambda r: r["start"] or 0, reverse=True)
        return out

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
        processes, exporters = self.process_count()
        hosts = q("SELECT count(DISTINCT host) FROM processes")[0][0]
        tasks = q("SELECT count(DISTINCT task_key) FROM spans WHERE task_key IS NOT NULL")[0][0]
        # one per client call, however many traces a big one was split into (dask_shape)
        computations = q("SELECT count(*) FROM spans WHERE name = 'dask.compute'")[0][0]
        starts = [x for x in (s0, m0, p0) if x]
        ends = [x for x in (s1, m1, p1) if x]
        return {
            "spans": spans, "span_events": span_events, "events": events, "logs": logs,
            "metric_points": points, "processes": processes, "exporters": exporters, "hosts": hosts, "traces": traces,
            "tasks": tasks, "computations": computations,
            "start": min(starts) if starts else None, "end": max(ends) if ends else None,
        }

    def process_count(self) -> tuple[int, int]:
        """(the program's processes, evlog's exporter processes), each process once (evlog.process_count)."""
        return process_count.count(loads(r) for (r,) in self._q("SELECT resource FROM processes"))

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
            evs = next(raws)["events"] if req is not None else (loads(events) or ())
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
        # a span kept as its request is decoded from it, unless ingest stored its columns (schema.WHOLE_SPANS)
        raws = iter(self._requests.rows(self.reader(), [(r[17], r[18]) for r in rows
                                                         if r[17] is not None and r[15] is None]))
        out = []
        for r in rows:
            d = dict(zip(_SPAN_COLS, r))
            if r[17] is not None and r[15] is None:
                full = next(raws)
                d["attributes"], d["events"] = full["attributes"], full["events"]
            else:
                d["attributes"] = loads(r[15])
                d["events"] = loads(r[16]) or []
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
        task prefix, evlog/observed/dask/gauges.py), summed over schedulers; prefixes with
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
        where, args = _overlapping(t0, t1)
        if cat is not None:
            where.append("cat = ?")
            args.append(cat)
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

    def transfer_rows(self, t0: int | None = None, t1: int | None = None) -> list[tuple]:
        """(id, start, end, destination worker, source worker, bytes, status_code, task_key) of the
        ``dask.transfer`` spans overlapping [t0, t1], by start: a worker fetching data from another
        (its span is the fetching worker's; the source is an attribute)."""
        where, args = _overlapping(t0, t1)
        where += ["cat = ?", "name = 'dask.transfer'"]
        args.append(CAT_OTHER)
        rows = self._q(
            f"SELECT id, start, end, worker, {_attr('attributes', 'dask.transfer.source')}, "
            f"{_attr('attributes', 'dask.transfer.bytes')}, status_code, task_key, "
            f"CASE WHEN attributes IS NULL THEN req END, idx FROM spans "
            f"WHERE {' AND '.join(where)} ORDER BY start", tuple(args))
        # read from its request only where ingest did not store its attributes (a store of an older evlog)
        raw = iter(self._requests.rows(self.reader(), [(r[8], r[9]) for r in rows if r[8] is not None]))
        out = []
        for rid, start, end, worker, source, nbytes, code, key, req, _idx in rows:
            if req is not None:
                a = next(raw)["attributes"]
                source, nbytes = a.get("dask.transfer.source"), a.get("dask.transfer.bytes")
            out.append((rid, start, end, worker or "", "" if source is None else str(source),
                        nbytes if type(nbytes) is int else 0, code, key))
        return out

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

    def executions_per_prefix(self) -> dict[str, int]:
        """{prefix: executions} of the Dask task executions (``dask.execute`` spans): the tasks run."""
        return {p or "": n for p, n in self._q("SELECT prefix, count(*) FROM spans WHERE cat = ? GROUP BY prefix",
                                               (CAT_EXECUTION,))}

    def spans_named(self, prefix: str, cat: int, limit: int) -> list[dict]:
        """The first ``limit`` spans of category ``cat`` whose name starts with ``prefix``, in start order,
        with their attributes (e.g. the Dask spans a program named: evlog/data/panels/fine_metrics.py)."""
        like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        return self._span_dicts(self._q(_SPAN_SELECT + " WHERE s.cat = ? AND s.name LIKE ? ESCAPE '\\' "
                                        "ORDER BY s.start LIMIT ?", (cat, like, limit)))

    def metric_names(self) -> list[tuple[str, str, int]]:
        return self._q("SELECT name, unit, count(*) FROM points GROUP BY name ORDER BY name")

    def run_bounds(self) -> tuple[int | None, int | None]:
        """The times of the run's start and end samples (points of the exporter process,
        ``evlog.process.role=exporter``; evlog/exporter/host_samples.py), or (None, None)."""
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
        each worker's memory (``dask.worker.memory.*``, evlog/observed/dask/gauges.py), in time order."""
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


def _overlapping(t0: int | None, t1: int | None) -> tuple[list[str], list]:
    """The WHERE terms and arguments of spans overlapping [t0, t1] (either end None: open)."""
    where, args = [], []
    if t1 is not None:
        where.append("start <= ?")
        args.append(t1)
    if t0 is not None:
        where.append("end >= ?")
        args.append(t0)
    return where, args


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

_LOG_SELECT = ("SELECT l.id, l.time, l.severity_text, l.event_name, l.topic, l.task_key, l.body, "
               "l.attributes, l.trace_id, l.span_id, p.label, l.process FROM logs l "
               "LEFT JOIN processes p ON p.id = l.process")


def _log_dict(r: tuple) -> dict:
    return {
        "id": r[0], "time": r[1], "severity": r[2], "event_name": r[3], "topic": r[4], "task_key": r[5],
        "body": None if r[6] is None else json.loads(r[6]), "attributes": loads(r[7]),
        "trace_id": r[8], "span_id": r[9], "process": r[10] or "", "process_id": r[11],
    }

