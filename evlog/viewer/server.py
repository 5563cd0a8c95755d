"""The dashboard: an aiohttp app (page, JSON API, server-sent live updates, token check) over a Store.

``Dashboard(store).install(app)`` adds its routes to an aiohttp app: the one `evlog serve` shares with
the OTLP receiver, or the one `evlog view` runs alone. Every query runs in a small thread pool, so the
event loop (which also takes OTLP/HTTP exports) never waits on SQLite; answers are cached per store
version, so many open pages cost one query per change.

The API shapes data for drawing: Gantt lanes per worker and thread (or time bins per lane when too
many spans are in view, saying so), line-plot series aligned on one x array (downsampled past a
limit), the task graph (grouped by task prefix when too large), and the console-metadata graphs with
their x axis chosen by the rules of cluster-job-logging (``choose_x``).
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hmac
import heapq
import ipaddress
import json
import math
import os
import sqlite3
import threading
from typing import Any, Callable

from . import steps
from evlog.data.store import CAT_EXECUTION, CAT_OTHER, CAT_POOL_TASK, CAT_SCHED_TASK, Store, dumps

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")

MAX_BARS = 20_000          # Gantt bars sent as such; above, time bins per lane
GANTT_BINS = 800           # bins per lane in the aggregated Gantt
MAX_DAG_NODES = 1_500      # task graph drawn per task; above, per task prefix
MAX_SERIES_POINTS = 1_500  # per line-plot series; above, averaged per time bucket
MAX_METADATA = 20_000

LINE_PLOTS = (
    ("evlog.worker.saturation", "Worker saturation", "running tasks"),
    ("system.cpu.load_average.1m", "CPU load average (1 min)", "runnable threads"),
    ("evlog.memory.free_fraction", "Free memory", "% free"),
    ("evlog.bytes.allocated", "Bytes allocated", "bytes"),
    ("evlog.processor.saturation", "Processor saturation", "running tasks"),
    ("evlog.event.saturation", "Event saturation", "events in flight"),
)
_ALWAYS_PLOTTED = 4  # the first four are drawn even when empty


class QueryError(Exception):
    """A query that failed on the data (not on the request): answered 500 with the message."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and "localhost"; anything else (names included) counts as exposed."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _finite(v: Any) -> Any:
    """JSON for browsers: NaN and infinities become null."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def _num(v: Any) -> float | None:
    """A JSON number that can be plotted (bools are not numbers here)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def _secs(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


# -------------------------------------------------------------------------------------------------
# console metadata: the x axis


def choose_x(records: list[dict]) -> str | None:
    """The x key of a metadata graph, after cluster-job-logging: "progress", else "epoch", else the
    first in alphabetical order of: monotonically increasing integers, monotonically increasing
    numbers, integers monotonic either way, numbers monotonic either way, any numbers. None: by time.

    ``records`` are the metadata objects in time order. A key qualifies by the values it has where it
    is numeric; "increasing" means never decreasing and not constant. A key is only chosen if some
    other numeric key is left to plot against it.
    """
    values: dict[str, list[float]] = collections.defaultdict(list)
    for r in records:
        for k, v in r.items():
            x = _num(v)
            if x is not None:
                values[k].append(x)
    if len(values) < 2:
        return None
    for k in ("progress", "epoch"):
        if k in values:
            return k

    def integer(vs: list[float]) -> bool:
        return all(v.is_integer() for v in vs)

    def increasing(vs: list[float]) -> bool:
        return all(a <= b for a, b in zip(vs, vs[1:])) and vs[0] != vs[-1]

    def decreasing(vs: list[float]) -> bool:
        return all(a >= b for a, b in zip(vs, vs[1:])) and vs[0] != vs[-1]

    rules = (
        lambda vs: integer(vs) and increasing(vs),
        increasing,
        lambda vs: integer(vs) and (increasing(vs) or decreasing(vs)),
        lambda vs: increasing(vs) or decreasing(vs),
        lambda vs: True,
    )
    for rule in rules:
        found = sorted(k for k, vs in values.items() if rule(vs))
        if found:
            return found[0]
    return None


def metadata_graphs(events: list[dict]) -> list[dict]:
    """One graph per process that printed metadata: x key, x values, numeric series, newest rows."""
    by_proc: dict[str, list[dict]] = collections.OrderedDict()
    for e in events:
        if isinstance(e["body"], dict):
            by_proc.setdefault(e["process"], []).append(e)
    graphs = []
    for proc, evs in by_proc.items():
        records = [e["body"] for e in evs]
        xkey = choose_x(records)
        keys = sorted({k for r in records for k, v in r.items() if _num(v) is not None and k != xkey})
        rows = [e for e in evs if xkey is None or _num(e["body"].get(xkey)) is not None]
        if xkey is not None:  # a graph by x: points in x order
            rows.sort(key=lambda e: _num(e["body"][xkey]))
        xs = [_num(e["body"][xkey]) if xkey else e["time"] / 1e9 for e in rows]
        series = {k: [_num(e["body"].get(k)) for e in rows] for k in keys}
        table = [{"time": e["time"] / 1e9, "body": _finite(e["body"])} for e in reversed(evs[-200:])]
        graphs.append({"process": proc, "x": xkey, "xs": xs, "series": series, "table": table,
                       "count": len(evs)})
    return graphs


# -------------------------------------------------------------------------------------------------
# Gantt


THREAD_SLACK_NS = 25_000_000  # in one thread's lane, overlaps up to this are clocks disagreeing
EXECUTOR_THREAD = "-Dask-Default-Threads-"  # a Dask worker's executor threads: one task at a time, always


def _pack(rows: list[tuple], slack: int = 0) -> list[int]:
    """Sub-lane per bar so that bars in one sub-lane overlap by at most ``slack`` ns (rows sorted by start).

    A worker thread runs one task at a time, yet its tasks' spans can overlap by a few ms: a Dask
    execution's times are shifted by the worker's estimate of its clock offset from the scheduler,
    which a heartbeat may change while the task runs. So a thread's lane packs with THREAD_SLACK_NS:
    the next task stays on the thread's row, and only a real overlap (tasks that are coroutines on
    the event loop's thread, a span nested in another) adds a row.
    """
    free: list[tuple[int, int]] = []  # (end, sub-lane)
    used = 0
    out = []
    for r in rows:
        start, end = r[1], r[2]
        last = start
        if free and free[0][0] - slack <= start:
            last, lane = heapq.heappop(free)
        else:
            lane = used
            used += 1
        heapq.heappush(free, (max(end, start, last), lane))
        out.append(lane)
    return out


def task_category(store: Store) -> tuple[int | None, str]:
    """Which spans are the run's tasks (the Gantt's bars, the saturation plots' steps), and what they are."""
    cats = store.span_categories()
    if cats.get(CAT_EXECUTION):
        return CAT_EXECUTION, "Dask task executions, per worker and thread"
    if cats.get(CAT_POOL_TASK):
        return CAT_POOL_TASK, "pool tasks (concurrent.futures, multiprocessing), per process and thread"
    if cats.get(CAT_SCHED_TASK):
        return CAT_SCHED_TASK, "scheduler task spans, per worker"
    return (CAT_OTHER if cats else None), "spans, per process and thread"


def gantt(store: Store, worker: str | None = None, t0: float | None = None, t1: float | None = None,
          max_bars: int = MAX_BARS, bins: int = GANTT_BINS, whole: bool = False) -> dict:
    """The Gantt's lanes and bars in [t0, t1]; by default the tasks' time range (``whole``: the run's,
    from its start sample to its end sample, cluster start-up included)."""
    cat, what = task_category(store)
    labels = {p["id"]: p["label"] for p in store.processes()}
    ns0 = None if t0 is None else int(t0 * 1e9)
    ns1 = None if t1 is None else int(t1 * 1e9)
    rows = store.gantt_rows(cat, ns0, ns1)
    groups: dict[tuple[str, str], list[tuple]] = collections.defaultdict(list)
    for r in rows:
        w = r[3] or labels.get(r[5], "?")
        if worker and w != worker:
            continue
        groups[(w, r[4] or "")].append(r)
    prefixes: dict[str, int] = {}
    lanes: list[dict] = []
    placed: list[tuple[int, tuple]] = []
    for (w, thread) in sorted(groups):
        g = groups[(w, thread)]
        # a Dask executor thread runs one task at a time: any overlap of its spans is the worker's clock
        # offset moving (by 100 ms and more on a loaded host), so it stays one row whatever the overlap
        slack = (1 << 62) if cat == CAT_EXECUTION and EXECUTOR_THREAD in thread else THREAD_SLACK_NS
        sub = _pack(g, slack if thread and cat in (CAT_EXECUTION, CAT_POOL_TASK) else 0)
        base = len(lanes)
        for i in range(max(sub) + 1 if sub else 0):
            lanes.append({"worker": w, "thread": thread, "sub": i})
        placed.extend((base + s, r) for s, r in zip(sub, g))
    total = len(placed)
    run0, run1 = store.run_bounds()  # the run's start and end samples
    task0 = min((r[1] for _, r in placed), default=None)
    task1 = max((r[2] for _, r in placed), default=None)
    if task0 is not None and ns0 is None and ns1 is None:  # the tasks' range, a little room either side
        pad = max((task1 - task0) // 50, 1_000_000)
        task0, task1 = task0 - pad, task1 + pad
    run0 = min(x for x in (run0, task0) if x is not None) if run0 is not None or task0 is not None else 0
    run1 = max(x for x in (run1, task1) if x is not None) if run1 is not None or task1 is not None else 0
    lo, hi = (run0, run1) if whole or task0 is None else (task0, task1)
    if ns0 is not None:
        lo = ns0
    if ns1 is not None:
        hi = ns1
    out = {"what": what, "total": total, "lanes": lanes, "t0": lo / 1e9, "t1": hi / 1e9,
           "tasks_t0": None if task0 is None else task0 / 1e9, "tasks_t1": None if task1 is None else task1 / 1e9,
           "run_t0": run0 / 1e9, "run_t1": run1 / 1e9, "whole": bool(whole and ns0 is None and ns1 is None),
           "workers": sorted({w for w, _ in groups})}
    if total <= max_bars:
        bars = []
        for lane, r in placed:
            p = prefixes.setdefault(r[6] or r[9], len(prefixes))
            bars.append([r[1] / 1e9, r[2] / 1e9, lane, p, 1 if r[7] == "ERROR" else 0, r[0], r[8] or ""])
        out.update(mode="bars", bars=bars, prefixes=list(prefixes), shown=total, note="")
        return out
    # too many to draw one by one: per lane, the busy fraction of each time bin and its main prefix
    width = max(hi - lo, 1) / bins
    busy = [[0.0] * bins for _ in lanes]
    errs = [[0] * bins for _ in lanes]
    starts = [[0] * bins for _ in lanes]  # tasks started per bin: where short tasks were, however short
    main: list[list[dict]] = [[{} for _ in range(bins)] for _ in lanes]
    for lane, r in placed:
        s, e = max(r[1], lo), min(max(r[2], r[1]), hi)
        p = prefixes.setdefault(r[6] or r[9], len(prefixes))
        b0 = min(int((s - lo) / width), bins - 1)
        b1 = min(int((e - lo) / width), bins - 1)
        row, m = busy[lane], main[lane]
        starts[lane][b0] += 1
        for b in range(b0, b1 + 1):
            left = lo + b * width
            part = min(e, left + width) - max(s, left)
            if part > 0:
                row[b] += part / width
                m[b][p] = m[b].get(p, 0) + part
        if r[7] == "ERROR":
            errs[lane][b0] = 1
    out.update(
        mode="aggregated", prefixes=list(prefixes), shown=0, bins=bins,
        busy=[[round(min(x, 1.0), 3) for x in row] for row in busy],
        main=[[max(d, key=d.get) if d else -1 for d in row] for row in main],
        errors=errs, starts=starts,
        note=(f"{total:,} spans in view: too many to draw one by one, so each lane shows how busy it was "
              f"in {bins} time bins (colour: the main task prefix of the bin; the darker, the busier or the more "
              f"tasks started). Drag across the chart to "
              f"zoom in; below {max_bars:,} spans every task is drawn."),
    )
    return out


# -------------------------------------------------------------------------------------------------
# progress

PROGRESS_STATES = ("memory", "erred", "processing", "queued", "no-worker", "waiting", "released")


def progress(store: Store) -> dict:
    """Per task prefix its tasks by state and its total, as Dask's progress bars count them.

    While a prefix has tasks the scheduler still knows (its latest ``dask.prefix.tasks`` sample, Dask's
    own ``TaskPrefix.states``), those counts: waiting, queued, processing, in memory, erred, released.
    Once they are all forgotten (or without the gauge), the task lives recorded: per key the state of
    the life that computed it."""
    live = store.prefix_states()
    done = store.progress()
    out = []
    for prefix in sorted(set(live) | set(done)):
        states = live.get(prefix) or done.get(prefix) or {}
        states = {k: v for k, v in states.items() if v and k != "forgotten"}
        out.append({"prefix": prefix, "states": states, "total": sum(states.values()),
                    "source": "scheduler" if prefix in live else "spans"})
    return {"prefixes": out, "states": list(PROGRESS_STATES)}


# -------------------------------------------------------------------------------------------------
# line plots


def line_plot(store: Store, name: str, worker: str | None = None, limit: int = MAX_SERIES_POINTS) -> dict:
    """One metric as series per process, aligned on one x array (seconds) for uPlot."""
    labels = {p["id"]: p["label"] for p in store.processes()}
    rows, averaged = store.series(name, buckets=limit)
    per: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    for proc, t, v in rows:
        label = labels.get(proc, "?")
        if worker and label != worker:
            continue
        if v is None or not math.isfinite(v):
            continue
        per[label].append((t / 1e9, v))
    xs = sorted({t for pts in per.values() for t, _ in pts})
    index = {t: i for i, t in enumerate(xs)}
    series = []
    for label in sorted(per):
        vals: list[float | None] = [None] * len(xs)
        for t, v in per[label]:
            vals[index[t]] = v
        series.append({"label": label, "values": vals})
    return {"name": name, "x": xs, "series": series, "downsampled": averaged,
            "note": f"averaged over {limit:,} time buckets" if averaged else ""}


def worker_memory(store: Store, worker: str | None = None, limit: int = MAX_SERIES_POINTS) -> dict | None:
    """Memory per worker as Dask's dashboard shows it: managed, unmanaged and spilled bytes of each
    worker (the scheduler's samples of WorkerState.memory), one group of three series per worker on one
    x; past ``limit`` sample times, averaged per time bucket. None when the run has no such samples."""
    rows = store.worker_memory()
    if worker:
        rows = [r for r in rows if r[1] == worker]
    if not rows:
        return None
    lo, hi = rows[0][0], rows[-1][0]
    times = sorted({r[0] for r in rows})
    width = max(1, -(-(hi - lo) // limit)) if len(times) > limit else 0
    sums: dict = collections.defaultdict(lambda: [0.0, 0])
    for t, w, kind, v in rows:
        x = lo + (t - lo) // width * width if width else t
        acc = sums[(w, kind, x)]
        acc[0] += v
        acc[1] += 1
    xs = sorted({x for _w, _k, x in sums})
    index = {x: i for i, x in enumerate(xs)}
    cols: dict = {}
    for (w, kind, x), (total, n) in sums.items():
        cols.setdefault((w, kind), [None] * len(xs))[index[x]] = total / n
    series = [{"label": kind, "worker": w, "values": cols.get((w, kind)) or [None] * len(xs)}
              for w in sorted({w for w, _k in cols}) for kind in ("managed", "unmanaged", "spilled")]
    return {"name": "dask.worker.memory", "title": "Memory per worker", "unit": "bytes", "x": [x / 1e9 for x in xs],
            "series": series, "stacked": True, "per_worker": True, "downsampled": bool(width),
            "note": "Dask's own figures (WorkerState.memory), sampled on the scheduler: managed (task results "
                    "in memory), unmanaged (the rest of the worker's process memory), spilled (results on disk)"}


# -------------------------------------------------------------------------------------------------
# task graph


def task_graph(store: Store, worker: str | None = None, max_nodes: int = MAX_DAG_NODES) -> dict:
    rows = store.dependencies()
    if len(rows) > max_nodes:
        return _prefix_graph(rows, max_nodes)
    index: dict[str, int] = {}
    nodes = []
    for key, prefix, status, w, _deps in rows:
        if key in index:
            continue
        index[key] = len(nodes)
        nodes.append({"key": key, "prefix": prefix or "", "error": status == "ERROR", "worker": w or ""})
    edges = set()
    for key, _p, _s, _w, deps in rows:
        for d in _dep_list(deps):
            if d in index and key in index:
                edges.add((index[d], index[key]))
    return {"mode": "tasks", "nodes": nodes, "edges": sorted(edges), "note": "",
            "selected_worker": worker or ""}


def _dep_list(deps: Any) -> list[str]:
    if not deps:
        return []
    if isinstance(deps, str):
        try:
            deps = json.loads(deps)
        except ValueError:
            return [deps]
    if isinstance(deps, list):
        return [str(d) for d in deps]
    return [str(deps)]


def _prefix_graph(rows: list[tuple], max_nodes: int) -> dict:
    prefix_of: dict[str, str] = {}
    counts: collections.Counter = collections.Counter()
    errors: collections.Counter = collections.Counter()
    for key, prefix, status, _w, _d in rows:
        p = prefix or key
        prefix_of[key] = p
        counts[p] += 1
        if status == "ERROR":
            errors[p] += 1
    names = [p for p, _ in counts.most_common(max_nodes)]
    index = {p: i for i, p in enumerate(names)}
    edges: collections.Counter = collections.Counter()
    for key, _p, _s, _w, deps in rows:
        b = index.get(prefix_of[key])
        for d in _dep_list(deps):
            a = index.get(prefix_of.get(d, ""))
            if a is not None and b is not None and a != b:
                edges[(a, b)] += 1
    nodes = [{"key": p, "prefix": p, "count": counts[p], "error": bool(errors[p]), "worker": ""} for p in names]
    return {"mode": "prefixes", "nodes": nodes, "edges": [[a, b, n] for (a, b), n in sorted(edges.items())],
            "note": (f"{len(rows):,} tasks: too many to draw one by one, so the graph shows one node per task "
                     f"prefix (with its task count) and the dependencies between prefixes.")}


# -------------------------------------------------------------------------------------------------
# one task


def task_detail(store: Store, key: str | None = None, row_id: int | None = None) -> dict:
    span = None
    if row_id is not None:
        span = store.span_by_id(row_id)
        if span is None:
            return {"found": False, "error": f"no span {row_id}"}
        key = span["task_key"] or None
    spans = store.task_spans(key=key) if key is not None else ([span] if span else [])
    if not spans:
        return {"found": False, "error": f"no task {key!r}"}
    story = store.story(key) if key is not None else [
        {"time": e.get("time", 0), "event": e.get("name", ""), "start": None, "finish": None, "stimulus": None,
         "worker": spans[0]["worker"], "process": spans[0]["process"], "span": spans[0]["name"]}
        for e in spans[0]["events"]]
    logs = store.span_logs([s["span_id"] for s in spans], key=key)
    for s in spans:
        s["exceptions"] = span_exceptions(s)
        s.pop("events", None)
        s["start"] /= 1e9
        s["end"] /= 1e9
    for e in story:
        e["time"] /= 1e9
    for e in logs:
        e["time"] /= 1e9
    return _finite({"found": True, "key": key, "spans": spans, "story": story, "events": logs})


def span_exceptions(span: dict) -> list[dict]:
    """The span's ``exception`` events as {type, message, stacktrace} (the type from the event, else
    from the text, as `evlog report` splits it), for the task story."""
    from evlog.report.common import split_exception

    out = []
    for ev in span.get("events") or ():
        if ev.get("name") != "exception":
            continue
        a = ev.get("attributes") or {}
        etype, msg = split_exception(str(a.get("exception.message") or span.get("status_message") or ""))
        out.append({"type": str(a.get("exception.type") or etype), "message": msg,
                    "stacktrace": str(a.get("exception.stacktrace") or ""), "time": (ev.get("time") or 0) / 1e9})
    return out


# -------------------------------------------------------------------------------------------------
# the aiohttp side


class Dashboard:
    """Routes, API, live updates and token check over one Store.

    ``source``: what the page says it shows (a run folder, or "OTLP receiver on ...").
    ``extra_status``: a callable returning a dict merged into /api/overview (receiver counters).
    """

    def __init__(self, store: Store, *, token: str | None = None, source: str = "",
                 extra_status: Callable[[], dict] | None = None, workers: int = 2):
        self.store = store
        self.token = token or None
        self.source = source
        self.extra_status = extra_status
        self.version = store.version
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evlog-dash")
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._cache_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Event] = set()
        self._closing = False

    # ---- live updates

    def notify(self, version: int | None = None) -> None:
        """New data is stored (any thread): wake the live-update streams."""
        self.version = self.store.version if version is None else version
        loop = self._loop
        if loop is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(self._wake)
            except RuntimeError:
                pass

    def _wake(self) -> None:
        for ev in list(self._waiters):
            ev.set()

    # ---- installing

    def install(self, app: Any) -> None:
        from aiohttp import web

        app.middlewares.append(self._auth_middleware())
        app.router.add_get("/", self._index)
        app.router.add_static("/static/", STATIC_DIR, show_index=False)
        for path, fn in (
            ("/api/overview", self._overview), ("/api/gantt", self._gantt), ("/api/plots", self._plots),
            ("/api/dag", self._dag), ("/api/task", self._task), ("/api/events", self._events),
            ("/api/metadata", self._metadata), ("/api/stream", self._stream),
            ("/api/report", self._report), ("/api/console", self._console), ("/api/progress", self._progress),
            ("/api/profile", self._profile),  # issue 31: flame graphs (evlog/viewer/profile.py)
        ):
            app.router.add_get(path, fn)
        app.on_startup.append(self._on_startup)
        app.on_shutdown.append(self._on_shutdown)
        del web

    def make_app(self) -> Any:
        from aiohttp import web

        app = web.Application()
        self.install(app)
        return app

    async def _on_startup(self, app: Any) -> None:
        self._loop = asyncio.get_running_loop()

    async def _on_shutdown(self, app: Any) -> None:
        self._closing = True
        self._wake()

    def close(self) -> None:
        self._closing = True
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _auth_middleware(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def auth(request: Any, handler: Any) -> Any:
            if self.token and request.path.startswith("/api/"):
                given = request.query.get("token") or ""
                h = request.headers.get("Authorization", "")
                if h.lower().startswith("bearer "):
                    given = h[7:].strip()
                if not hmac.compare_digest(given.encode(), self.token.encode()):
                    return web.json_response({"error": "token required", "token_required": True}, status=401)
            try:
                return await handler(request)
            except QueryError as e:
                return web.json_response({"error": str(e)}, status=500)

        return auth

    # ---- helpers

    async def _run(self, key: tuple, fn: Callable, *args: Any) -> Any:
        """Run a query off the event loop; answers are reused until the store changes."""
        version = self.store.version
        ck = (key, version)
        with self._cache_lock:
            if ck in self._cache:
                self._cache.move_to_end(ck)
                return self._cache[ck]
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._pool, fn, *args)
        except sqlite3.DatabaseError as e:  # a damaged file: say so on the page, keep serving
            raise QueryError(f"{self.store.path or 'the store'}: damaged database ({e})") from None
        with self._cache_lock:
            self._cache[ck] = result
            while len(self._cache) > 64:
                self._cache.popitem(last=False)
        return result

    def _json(self, data: Any, status: int = 200) -> Any:
        from aiohttp import web

        return web.Response(text=dumps(data), status=status, content_type="application/json",
                            headers={"Cache-Control": "no-store"})

    @staticmethod
    def _float(request: Any, name: str) -> float | None:
        v = request.query.get(name)
        if v in (None, ""):
            return None
        try:
            x = float(v)
        except ValueError:
            return None
        return x if math.isfinite(x) else None

    def _runs(self) -> list[dict]:
        """The runs stored, newest first (in the query pool)."""
        return [{**r, "start": _secs(r["start"]), "end": _secs(r["end"])} for r in self.store.runs()]

    async def _view(self, request: Any) -> tuple[Store, str | None]:
        """The store as the request sees it: one run (``run``; by default the newest when there are
        several), or the whole store when it holds one run."""
        run = request.query.get("run")
        runs = await self._run(("runs",), self._runs)
        if run is None or all(r["run"] != run for r in runs):
            if len(runs) <= 1:
                return self.store, None
            run = runs[0]["run"]
        return self.store.scoped(run), run

    # ---- routes

    async def _index(self, request: Any) -> Any:
        from aiohttp import web

        return web.FileResponse(os.path.join(STATIC_DIR, "index.html"), headers={"Cache-Control": "no-store"})

    def _overview_now(self, s: Store, run: str | None) -> dict:
        summary = s.summary()
        for k in ("start", "end"):
            summary[k] = _secs(summary[k])
        procs = s.processes()
        names = {n for n, _u, _c in s.metric_names()}
        return {
            "source": self.source, "version": self.store.version, "summary": summary,
            "workers": s.lane_workers(task_category(s)[0]),  # each worker once, as the Gantt's lanes name it
            "processes": procs,
            "topics": [{"topic": t, "count": n} for t, n in s.topics()],
            "plots": [{"name": n, "title": t, "unit": u} for i, (n, t, u) in enumerate(LINE_PLOTS)
                      if i < _ALWAYS_PLOTTED or n in names],
            "has_metadata": bool(s.named_events("evlog.metadata", limit=1)),
            "run": run, "runs": self._runs(),  # in the query pool, as this whole function
        }

    async def _overview(self, request: Any) -> Any:
        st, run = await self._view(request)
        data = await self._run((run, "overview"), self._overview_now, st, run)
        if self.extra_status is not None:
            try:
                data = {**data, "receiver": self.extra_status()}
            except Exception:
                pass
        return self._json(data)

    async def _gantt(self, request: Any) -> Any:
        st, run = await self._view(request)
        worker = request.query.get("worker") or None
        t0, t1 = self._float(request, "t0"), self._float(request, "t1")
        whole = request.query.get("whole") in ("1", "true")
        data = await self._run((run, "gantt", worker, t0, t1, whole), gantt, st, worker, t0, t1, MAX_BARS,
                               GANTT_BINS, whole)
        return self._json(data)

    async def _plots(self, request: Any) -> Any:
        st, run = await self._view(request)
        worker = request.query.get("worker") or None

        def all_plots() -> list[dict]:
            names = {n for n, _u, _c in st.metric_names()}
            cat, _what = task_category(st)
            exact = {}
            if cat in (CAT_EXECUTION, CAT_POOL_TASK):  # tasks with their threads: saturation from the spans
                labels = {p["id"]: p["label"] for p in st.processes()}
                exact = {p["name"]: p for p in steps.saturation(st.gantt_rows(cat), labels, worker)}
            held = st.held_bytes(worker)
            if held:  # a Dask run: the bytes its workers hold, from the scheduler's transitions
                exact["evlog.bytes.allocated"] = steps.held_bytes(held)
            out = []
            for i, (name, title, unit) in enumerate(LINE_PLOTS):
                if name in exact:
                    out.append(exact[name])
                elif i < _ALWAYS_PLOTTED or name in names:
                    out.append({**line_plot(st, name, worker), "title": title, "unit": unit})
                if name == "evlog.bytes.allocated":
                    memory = worker_memory(st, worker)
                    if memory is not None:
                        out.append(memory)
            return out

        return self._json(await self._run((run, "plots", worker), all_plots))

    async def _dag(self, request: Any) -> Any:
        st, run = await self._view(request)
        worker = request.query.get("worker") or None
        return self._json(await self._run((run, "dag", worker), task_graph, st, worker))

    async def _task(self, request: Any) -> Any:
        st, run = await self._view(request)
        key = request.query.get("key")
        row_id = request.query.get("id")
        rid = None
        if row_id:
            try:
                rid = int(row_id)
            except ValueError:
                return self._json({"found": False, "error": "id must be an integer"}, 400)
        if key is None and rid is None:
            return self._json({"found": False, "error": "give key or id"}, 400)
        data = await self._run((run, "task", key, rid), task_detail, st, key, rid)
        return self._json(data, 200 if data.get("found") else 404)

    async def _events(self, request: Any) -> Any:
        st, run = await self._view(request)
        topic = request.query.get("topic") or None
        try:
            limit = max(1, min(int(request.query.get("limit", "500")), 10_000))
        except ValueError:
            limit = 500

        def events() -> dict:
            evs = st.events(topic, limit=limit, newest_first=True)
            for e in evs:
                e["time"] /= 1e9
            return _finite({"topic": topic, "events": evs,
                            "topics": [{"topic": t, "count": n} for t, n in st.topics()]})

        return self._json(await self._run((run, "events", topic, limit), events))

    async def _console(self, request: Any) -> Any:
        """The captured console: its streams per process, and the newest lines matching q/stream/process."""
        st, run = await self._view(request)
        q = (request.query.get("q") or "")[:200]
        stream = request.query.get("stream") or None
        process = request.query.get("process")
        try:
            limit = max(1, min(int(request.query.get("limit", "2000")), 20_000))
            pid = int(process) if process else None
        except ValueError:
            return self._json({"error": "limit and process must be integers"}, 400)

        def console() -> dict:
            rows, total = st.console(q, stream, pid, limit)
            return _finite({
                "streams": [{"process": label or "", "process_id": p, "stream": st, "lines": n}
                            for label, p, st, n in st.console_streams()],
                "lines": [{"time": r["time"] / 1e9, "body": r["body"], "stream": r["attributes"].get("log.iostream"),
                           "process": r["process"], "repeated": r["attributes"].get("evlog.console.repeated"),
                           "dropped": r["attributes"].get("evlog.console.dropped")} for r in rows],
                "matched": total, "shown": len(rows)})

        return self._json(await self._run((run, "console", q, stream, pid, limit), console))

    async def _progress(self, request: Any) -> Any:
        """Dask's progress bars: per task prefix its tasks by state against its total (api/progress)."""
        st, run = await self._view(request)
        return self._json(await self._run((run, "progress",), progress, st))

    async def _metadata(self, request: Any) -> Any:
        st, run = await self._view(request)
        def graphs() -> dict:
            evs = st.named_events("evlog.metadata", limit=MAX_METADATA)
            return {"graphs": metadata_graphs(evs)}

        return self._json(await self._run((run, "metadata",), graphs))

    async def _report(self, request: Any) -> Any:
        """`evlog report` of the stored data, for the report panel (evlog.viewer.report_panel)."""
        st, run = await self._view(request)
        from .report_panel import dashboard_report

        return self._json(await self._run((run, "report",), dashboard_report, st, self.source))

    async def _profile(self, request: Any) -> Any:
        """A flame graph of the task profile: per prefix (``label``), one worker's, or one task span's."""
        st, run = await self._view(request)
        from .profile import flame

        q = request.query
        worker, label, span = q.get("worker") or None, q.get("label") or None, q.get("span") or None
        return self._json(await self._run((run, "profile", worker, label, span), flame, st, worker, label, span))

    async def _stream(self, request: Any) -> Any:
        """Server-sent events: one ``update`` per store change (at most two a second), a comment
        every 15 s to keep proxies from closing the stream; ``retry: 5000`` tells the browser to
        reconnect after 5 s if the server goes away."""
        from aiohttp import web

        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        ev = asyncio.Event()
        self._waiters.add(ev)
        sent = None
        try:
            await resp.write(b"retry: 5000\n\n")
            while not self._closing:
                ev.clear()  # before reading the version: a change after this line sets it again
                v = self.store.version
                if v != sent:
                    await resp.write(f"event: update\ndata: {json.dumps({'version': v})}\n\n".encode())
                    sent = v
                    await asyncio.sleep(0.5)  # pacing: at most two updates a second per page
                    continue
                try:
                    await asyncio.wait_for(ev.wait(), 15)
                except asyncio.TimeoutError:
                    await resp.write(b": ping\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._waiters.discard(ev)
        return resp
