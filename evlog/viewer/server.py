"""The dashboard: an aiohttp app (page, JSON API, server-sent live updates, token check) over a Store.

With a token, the API answers a request that carries it: an ``Authorization: Bearer`` header (the page
sends one once it has asked for the token), ``?token=``, or the session cookie. The page itself
opened as ``/?token=TOKEN`` sets that cookie (HttpOnly, SameSite=Strict) and redirects to the URL
without the token, so the secret stays out of the browser's history and any proxy's log; an API
answer to a request with the header or ``?token=`` sets the cookie too, so live updates (EventSource,
which sends no headers) need no token in their URL. The cookie holds a value derived from the token
(evlog.data.bearer), named for the server's port, as cookies are shared by every port of a host.

``Dashboard(store).install(app)`` adds its routes to an aiohttp app: the one `evlog serve` shares with
the OTLP receiver, or the one `evlog view` runs alone. Every query runs in a small thread pool, so the
event loop (which also takes OTLP/HTTP exports) never waits on SQLite; answers are cached per store
version, so many open pages cost one query per change.

What each route answers is shaped in evlog.data.panels (Gantt lanes and time bins, line plots, the task
graph, a task's story, events, console, progress, metadata graphs, flame graphs); this module only
serves it.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import gc
import ipaddress
import json
import math
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

from evlog.data import bearer
from evlog.data.panels.console import console
from evlog.data.panels.dag import task_graph
from evlog.data.panels.events import events
from evlog.data.panels.fine_metrics import fine_metrics
from evlog.data.panels.gantt import GANTT_BINS, MAX_BARS, MAX_BINS, MIN_BINS, gantt
from evlog.data.panels.metadata import graphs
from evlog.data.panels.overview import overview, runs
from evlog.data.panels.plots import plots
from evlog.data.panels.progress import progress
from evlog.data.panels.task import task_detail
from evlog.data.store import Store, dumps

STATIC_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
LOADING_REFRESH = 2.0  # seconds an answer is reused while `evlog view` is still reading its run folder


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


class Dashboard:
    """Routes, API, live updates and token check over one Store.

    ``source``: what the page says it shows (a run folder, or "OTLP receiver on ...").
    ``extra_status``: a callable returning a dict merged into /api/overview (receiver counters; while
    `evlog view` reads a folder, ``loading``: how far it has come); call ``status_changed()`` when what it
    says changes without the store changing (the folder is read), so open pages ask again.
    """

    def __init__(self, store: Store, *, token: str | None = None, source: str = "",
                 extra_status: Callable[[], dict] | None = None, workers: int = 2):
        self.store = store
        self.token = token or None
        self._token = self.token.encode() if self.token else None
        self._cookie = bearer.cookie_value(self._token) if self._token else ""
        self.source = source
        self.extra_status = extra_status
        self.version = store.version
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="evlog-dash")
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._latest: collections.OrderedDict = collections.OrderedDict()  # key -> (when, its newest answer)
        self._cache_lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: set[asyncio.Event] = set()
        self._closing = False
        self.status_version = 0  # bumped by status_changed()

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

    def status_changed(self) -> None:
        """What ``extra_status`` says changed (any thread): wake the live-update streams."""
        self.status_version += 1
        self.notify()

    def loading(self) -> dict | None:
        """``extra_status``'s ``loading`` (None when there is none, or it failed)."""
        if self.extra_status is None:
            return None
        try:
            return self.extra_status().get("loading")
        except Exception:
            return None

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
            ("/api/what-if", self._what_if),  # the report panel's curve (viewer/report_panel.py)
            ("/api/profile", self._profile),  # flame graphs (evlog/data/panels/flame.py)
            ("/api/fine", self._fine),  # Dask's fine performance metrics and spans (panels/fine_metrics.py)
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
        # the server's own objects (its modules, aiohttp's, SQLite's) are kept to the end: out of the garbage
        # collector's full passes, which reading a big run folder's lines sets off every few thousand
        # spans and which went over them every time (a third of the CPU `evlog view` spent loading)
        gc.freeze()

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
            how = None
            if self._token is not None:
                if request.path == "/" and "token" in request.query:
                    return self._sign_in(request)
                if request.path.startswith("/api/"):
                    how = self._credential(request)
                    if how is None:
                        return web.json_response({"error": "token required", "token_required": True}, status=401)
            try:
                resp = await handler(request)
            except QueryError as e:
                return web.json_response({"error": str(e)}, status=500)
            if how in ("header", "query") and not resp.prepared:  # a stream's headers are gone already
                self._set_cookie(request, resp)
            return resp

        return auth

    def _cookie_name(self, request: Any) -> str:
        sock = request.transport.get_extra_info("sockname") if request.transport is not None else None
        port = sock[1] if isinstance(sock, tuple) and len(sock) > 1 else (request.url.port or 0)
        return f"evlog-{port}"

    def _credential(self, request: Any) -> str | None:
        """How the request proves it knows the token ("cookie", "header", "query"), or None."""
        assert self._token is not None
        if bearer.matches(request.cookies.get(self._cookie_name(request)), self._cookie.encode()):
            return "cookie"
        if bearer.matches(bearer.from_authorization(request.headers.get("Authorization")), self._token):
            return "header"
        if bearer.matches(request.query.get("token"), self._token):
            return "query"
        return None

    def _set_cookie(self, request: Any, resp: Any) -> None:
        resp.set_cookie(self._cookie_name(request), self._cookie, path="/", httponly=True, samesite="Strict")

    def _sign_in(self, request: Any) -> Any:
        """``/?token=...``: the cookie if the token is right, and in any case the same page without the
        token in its URL (a wrong one gets the page, which asks for it)."""
        from aiohttp import web

        query = request.query.copy()
        given = query.popall("token", [None])[0]
        resp = web.Response(status=303, headers={"Location": str(request.rel_url.with_query(query)),
                                                 "Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})
        if bearer.matches(given, self._token):
            self._set_cookie(request, resp)
        return resp

    # ---- helpers

    async def _run(self, key: tuple, fn: Callable, *args: Any) -> Any:
        """Run a query off the event loop; answers are reused until the store changes, and while a run
        folder is being read, for LOADING_REFRESH seconds whatever it stores meanwhile: the page follows
        the load every few seconds, and the reading does not wait on queries asked again at each batch."""
        version = self.store.version
        ck = (key, version)
        with self._cache_lock:
            if ck in self._cache:
                self._cache.move_to_end(ck)
                return self._cache[ck]
            last = self._latest.get(key)
        if last is not None and time.monotonic() - last[0] < LOADING_REFRESH and self._loading_now():
            return last[1]
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(self._pool, fn, *args)
        except sqlite3.DatabaseError as e:  # a damaged file: say so on the page, keep serving
            raise QueryError(f"{self.store.path or 'the store'}: damaged database ({e})") from None
        with self._cache_lock:
            self._cache[ck] = result
            while len(self._cache) > 64:
                self._cache.popitem(last=False)
            self._latest[key] = (time.monotonic(), result)
            self._latest.move_to_end(key)
            while len(self._latest) > 64:
                self._latest.popitem(last=False)
        return result

    def _loading_now(self) -> bool:
        loading = self.loading()
        return bool(loading) and loading.get("state") == "loading"

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

    async def _view(self, request: Any) -> tuple[Store, str | None]:
        """The store as the request sees it: one run (``run``; by default the newest when there are
        several), or the whole store when it holds one run."""
        run = request.query.get("run")
        stored = await self._run(("runs",), runs, self.store)
        if run is None or all(r["run"] != run for r in stored):
            if len(stored) <= 1:
                return self.store, None
            run = stored[0]["run"]
        return self.store.scoped(run), run

    # ---- routes

    async def _index(self, request: Any) -> Any:
        from aiohttp import web

        return web.FileResponse(os.path.join(STATIC_DIR, "index.html"), headers={"Cache-Control": "no-store"})

    async def _overview(self, request: Any) -> Any:
        st, run = await self._view(request)
        data = await self._run((run, "overview"), overview, st, run, self.store, self.source)
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
        # bins: the page's width in pixels (a bin per pixel column); max_bars: fewer bars than the default
        b, m = self._float(request, "bins"), self._float(request, "max_bars")
        bins = GANTT_BINS if b is None else int(min(max(b, MIN_BINS), MAX_BINS))
        bars = MAX_BARS if m is None else int(min(max(m, 0), MAX_BARS))
        data = await self._run((run, "gantt", worker, t0, t1, whole, bins, bars), gantt, st, worker, t0, t1, bars,
                               bins, whole)
        return self._json(data)

    async def _plots(self, request: Any) -> Any:
        st, run = await self._view(request)
        worker = request.query.get("worker") or None
        return self._json(await self._run((run, "plots", worker), plots, st, worker))

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
        return self._json(await self._run((run, "events", topic, limit), events, st, topic, limit))

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
        data = await self._run((run, "console", q, stream, pid, limit), console, st, q, stream, pid, limit)
        return self._json(data)

    async def _progress(self, request: Any) -> Any:
        """Dask's progress bars: per task prefix its tasks by state against its total (api/progress)."""
        st, run = await self._view(request)
        return self._json(await self._run((run, "progress",), progress, st))

    async def _metadata(self, request: Any) -> Any:
        st, run = await self._view(request)
        return self._json(await self._run((run, "metadata",), graphs, st))

    async def _report(self, request: Any) -> Any:
        """`evlog report` of the stored data, for the report panel (evlog.viewer.report_panel)."""
        st, run = await self._view(request)
        from .report_panel import dashboard_report

        loading = self.loading()
        state = loading.get("state") if loading else None
        return self._json(await self._run((run, "report", state), dashboard_report, st, self.source, loading))

    async def _what_if(self, request: Any) -> Any:
        """Predicted time against workers for the report panel (evlog.viewer.report_panel.dashboard_what_if)."""
        st, run = await self._view(request)
        from .report_panel import dashboard_what_if

        loading = self.loading()
        state = loading.get("state") if loading else None
        return self._json(await self._run((run, "what-if", state), dashboard_what_if, st, self.source, loading))

    async def _profile(self, request: Any) -> Any:
        """A flame graph of the task profile: per prefix (``label``), one worker's, or one task span's."""
        st, run = await self._view(request)
        from evlog.data.panels.flame import flame

        q = request.query
        worker, label, span = q.get("worker") or None, q.get("label") or None, q.get("span") or None
        return self._json(await self._run((run, "profile", worker, label, span), flame, st, worker, label, span))

    async def _fine(self, request: Any) -> Any:
        """Dask's fine performance metrics of the run, or of one Dask span (``span``), in ``unit``."""
        st, run = await self._view(request)
        span, unit = request.query.get("span") or None, request.query.get("unit") or "seconds"
        return self._json(await self._run((run, "fine", span, unit), fine_metrics, st, span, unit))

    async def _stream(self, request: Any) -> Any:
        """Server-sent events: one ``update`` per store change or status change (at most two a second),
        a comment every 15 s to keep proxies from closing the stream; ``retry: 5000`` tells the browser
        to reconnect after 5 s if the server goes away."""
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
                v = (self.store.version, self.status_version)
                if v != sent:
                    data = json.dumps({"version": v[0], "status": v[1]})
                    await resp.write(f"event: update\ndata: {data}\n\n".encode())
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
