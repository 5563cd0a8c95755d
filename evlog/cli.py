"""`evlog`: view | serve | story | events | summary | report.

- view [RUN_DIR]: the dashboard for a run folder (the newest under ./evlog-runs by default),
  following it while the run goes on.
- serve: an OTLP receiver (gRPC, HTTP protobuf and JSON) storing into SQLite, with the dashboard on
  its HTTP port: what OTEL_EXPORTER_OTLP_ENDPOINT points at when there is no collector.
- summary, story KEY, events [TOPIC]: read a run folder or a database (--db) and print.
- report: why a run took as long as it did (evlog.report), as text, JSON or one offline HTML page.

Exit codes: 0 done; 1 the data or the network said no (no such run folder, not an evlog database,
port taken, unknown task key); 2 bad usage.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sqlite3
import sys
import tempfile
import threading
from typing import Any

DEFAULT_DB = "evlog.sqlite"
RUNS = "evlog-runs"


class CLIError(Exception):
    """A clear message for the user; exit status 1."""


def _err(text: str) -> None:
    sys.stderr.write(f"evlog: {text}\n")


# -------------------------------------------------------------------------------------------------
# opening what the user named


def _open(args: argparse.Namespace):
    """The Store for RUN_DIR or --db (a run folder is read into memory); problems go to stderr."""
    from evlog.data.run_reader import RunFolder, RunFolderError, newest_run
    from evlog.data.store import Store, StoreError

    if getattr(args, "db", None):
        if args.run_dir:
            raise CLIError("give a run folder or --db, not both")
        try:
            return Store(args.db, create=False), args.db
        except StoreError as e:
            raise CLIError(str(e)) from None
    try:
        path = args.run_dir or newest_run(RUNS)
        rf = RunFolder(path)
        store = Store(None)
        rf.load_into(store)
    except RunFolderError as e:
        raise CLIError(str(e)) from None
    _report_problems(rf)
    return store, rf.path


def _report_problems(rf, start: int = 0) -> int:
    for p in rf.problems[start:]:
        _err(p)
    shown = len(rf.problems)
    if rf.problem_count > shown and start <= shown:
        _err(f"... and {rf.problem_count - shown} more problems in {rf.path}")
    return shown


def _when(ns: int | None, date: bool = True) -> str:
    if not ns:
        return "-"
    t = datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.%f" if date else "%H:%M:%S.%f")[:-3]


def _table(rows: list[list[str]], out=None) -> None:
    out = out or sys.stdout
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n")


def _msg(body: Any) -> str:
    if isinstance(body, str):
        return body
    return json.dumps(body, separators=(", ", ": "), default=str)


# -------------------------------------------------------------------------------------------------
# summary, story, events


def cmd_summary(args: argparse.Namespace) -> int:
    from evlog.data.panels.fine_metrics import dask_spans
    from evlog.process_count import plus_exporters

    store, where = _open(args)
    s = store.summary()
    spans = dask_spans(store)  # the Dask spans the program named (distributed.span)
    if args.json:
        print(json.dumps({"source": where, **s, "dask_spans": [  # times in ns, as the summary's
            {"id": x["id"], "name": x["name"], "start": round(x["start"] * 1e9), "end": round(x["end"] * 1e9),
             "wall_s": x["wall_s"]} for x in spans]}))
        return 0
    span = ""
    if s["start"] and s["end"]:
        span = f"{_when(s['start'])} .. {_when(s['end'])} UTC ({(s['end'] - s['start']) / 1e9:,.3f} s)"
    print(where)
    for label, value, note in (
        ("spans", s["spans"], f"({s['span_events']:,} span events, {s['tasks']:,} task keys)"),
        ("events", s["events"], ""),
        ("logs", s["logs"], ""),
        ("metric points", s["metric_points"], ""),
        ("processes", s["processes"],
         f"{plus_exporters(s['exporters'])} ({s['hosts']:,} host{'s' if s['hosts'] != 1 else ''})".lstrip()),
        ("traces", s["traces"], _computations(s.get("computations") or 0)),
    ):
        print(f"{label:<14}{value:>12,}  {note}".rstrip())
    print(f"{'time range':<14}{span or '-':>12}")
    if spans:
        print(f"{'Dask spans':<14}{len(spans):>12,}")
        _table([["  " * (x["depth"] + 1) + x["label"], f"{x['wall_s']:,.3f} s", _when(int(x["start"] * 1e9))]
                for x in spans])
    return 0


def _computations(n: int) -> str:
    """A big Dask computation is split into several traces (docs/dask.md): the client calls, beside them."""
    return f"({n:,} Dask computation{'s' if n != 1 else ''})" if n else ""


def cmd_story(args: argparse.Namespace) -> int:
    store, where = _open(args)
    story = store.story(args.key)
    if args.json:
        print(json.dumps(story, default=str))
        return 0 if story else 1
    if not story:
        known = store.task_spans(key=args.key)
        raise CLIError(f"no transitions recorded for task {args.key!r} in {where}"
                       + (" (its spans have no events)" if known else ""))
    rows = [["time (UTC)", "start", "finish", "stimulus", "worker", "process"]]
    for e in story:
        if e["start"] is None and e["finish"] is None:  # an exception's text where the report shows it
            rows.append([_when(e["time"]), f"[{e['event']}]", "", e["stimulus"] or e.get("message") or "", e["worker"],
                         e["process"]])
        else:
            rows.append([_when(e["time"]), str(e["start"]), str(e["finish"]), str(e["stimulus"] or ""),
                         e["worker"], e["process"]])
    _table(rows)
    return 0


def cmd_events(args: argparse.Namespace) -> int:
    # one positional: a topic, unless it names an existing folder (then it is the run folder)
    if args.topic and not args.run_dir and not args.db and os.path.isdir(args.topic):
        args.run_dir, args.topic = args.topic, None
    store, where = _open(args)
    # every event: a topic's (dask.log_event, evlog.log_event) under its topic, any other (evlog.metadata,
    # torch's, the bridge's) under its event name; groups in name order, each oldest first
    events = store.events(args.topic, limit=args.limit, every=True)
    for e in events:
        e["group"] = e["topic"] if e["topic"] is not None else e["event_name"]
    events.sort(key=lambda e: e["group"])  # stable: time order within a group
    if args.json:
        print(json.dumps([{"time": e["time"] / 1e9, "topic": e["group"], "event_name": e["event_name"],
                           "msg": e["body"], "process": e["process"]} for e in events], default=str))
        return 0
    if not events:
        topics = ", ".join(t for t, _ in store.topics(every=True))
        if args.topic:
            _err(f"no events with topic {args.topic!r} in {where}"
                 + (f" (topics and event names: {topics})" if topics else ""))
        else:
            _err(f"no events in {where}")
        return 0
    _table([[_when(e["time"]), e["group"], _msg(e["body"]), e["process"]] for e in events])
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from evlog.report.command import ReportError, run

    try:
        return run(args.run_dir, args.db, args.format, args.output, RUNS, args.run, args.what_if or [])
    except ReportError as e:
        raise CLIError(str(e)) from None


# -------------------------------------------------------------------------------------------------
# view and serve


def _check_host(host: str, token: str | None) -> None:
    from evlog.viewer.server import is_loopback

    if not is_loopback(host) and not token:
        raise CLIError(f"--host {host} is not a loopback address: anyone who reaches it could read this "
                       "telemetry. Give --token SECRET too (the dashboard will ask for it), or bind 127.0.0.1.")


def _url(host: str, port: int) -> str:
    h = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"http://{h}:{port}/"


def _stop_on_signal() -> threading.Event:
    """An event SIGINT and SIGTERM set from now on: armed before the lines that tell a user (or a test)
    the server is up, so a signal that follows them at once stops it cleanly."""
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda *_: stop.set())
    return stop


# what each server command imports when it starts serving (the `view` extra), checked before it starts
_VIEW_EXTRAS = {"view": ("aiohttp",), "serve": ("aiohttp", "grpc", "opentelemetry.proto")}


def _need_view_extras(command: str) -> None:
    """One clear message, not a traceback, when the `view` extra is missing: its modules are imported
    only once the server starts."""
    import importlib

    from evlog.version import DISTRIBUTION

    for module in _VIEW_EXTRAS[command]:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise CLIError(f"evlog {command} needs the viewer extras: pip install '{DISTRIBUTION}[view]' ({e})") from None


def _serve_token(args: argparse.Namespace) -> str | None:
    """The token of --token, or read once from --token-file; one clear message for a bad one."""
    from evlog.data import bearer

    if args.token_file is not None:
        args.token = _read_token_file(args.token_file)
        what = f"the token in --token-file {args.token_file}"
    else:
        what = "--token"
    if args.token is None:
        return None
    problem = bearer.valid(args.token)
    if problem:
        raise CLIError(f"{what} {problem}")
    return args.token


def _read_token_file(path: str) -> str:
    """The token in ``path``: a file its owner alone may read (0600 or stricter), not empty."""
    import stat

    try:
        with open(path, "rb") as f:  # a pipe is fine too: --token-file <(pass show evlog)
            mode = os.fstat(f.fileno()).st_mode
            if mode & 0o077:
                raise CLIError(f"--token-file {path} is open to its group or others (mode {stat.S_IMODE(mode):04o}); "
                               f"make it its owner's alone: chmod 600 {path}")
            raw = f.read(64 * 1024)
    except OSError as e:
        raise CLIError(f"cannot read --token-file {path}: {e.strerror or e}") from None
    token = raw.decode("utf-8", "replace").strip()  # what is not a token's is named by bearer.valid
    if not token:
        raise CLIError(f"--token-file {path} is empty")
    return token


def _send_with(receiver: Any, args: argparse.Namespace) -> str:
    """How to point an exporter at this server: its endpoints, and with a token, the header that carries it."""
    from evlog.data import bearer

    line = f"export with OTEL_EXPORTER_OTLP_ENDPOINT={receiver.grpc_endpoint}"
    if args.token_file is not None:
        encoded = bearer.encoded(args.token) != args.token
        line += (" and OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20<token> (<token>: the contents of "
                 f"{args.token_file}{', percent-encoded' if encoded else ''})")
    elif args.token:
        line += f" and OTEL_EXPORTER_OTLP_HEADERS={bearer.otlp_headers(args.token)}"
    return (line + f" (or {receiver.http_endpoint} with OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf); "
            "Ctrl+C to stop")


def cmd_serve(args: argparse.Namespace) -> int:
    token = _serve_token(args)
    _check_host(args.host, token)
    _need_view_extras("serve")
    from evlog.data.receiver import ListenError, OTLPReceiver
    from evlog.data.store import Ingestor, Store, StoreError, decode_for_store
    from evlog.viewer.server import Dashboard

    box: dict = {}
    receiver = OTLPReceiver(lambda signal, rows: box["ingestor"].submit(signal, rows), host=args.host,
                            grpc_port=args.grpc_port, http_port=args.http_port, max_body=args.max_body,
                            extra_routes=lambda app: box["dash"].install(app), decode_proto=decode_for_store,
                            notice=lambda text: print(f"evlog serve: {text}", file=sys.stderr, flush=True),
                            token=token)
    try:
        receiver.check_ports()  # a taken port: one line, and no database made
    except ListenError as e:
        raise CLIError(_listen_error(e)) from None
    made = args.db and not os.path.exists(args.db)
    try:
        store = Store(args.db)
    except StoreError as e:
        raise CLIError(str(e)) from None
    ingestor = box["ingestor"] = Ingestor(store)
    dash = box["dash"] = Dashboard(store, token=token, source=f"OTLP receiver, storing into {store.path}",
                                   extra_status=lambda: _receiver_status(receiver, ingestor))
    ingestor.listeners.append(dash.notify)
    try:
        receiver.start()
    except OSError as e:  # taken since check_ports(): leave nothing behind either
        ingestor.close()
        store.close()
        if made:
            for path in (store.path, store.path + "-wal", store.path + "-shm"):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        raise CLIError(_listen_error(e) if isinstance(e, ListenError) else f"cannot listen: {e}") from None
    url = _url(args.host, receiver.http_port)
    stop = _stop_on_signal()
    print(f"evlog serve: storing into {store.path}", flush=True)
    print(f"evlog serve: OTLP/gRPC on {args.host}:{receiver.grpc_port}, OTLP/HTTP on {args.host}:{receiver.http_port}"
          + (", taking exports that carry the token only" if token else ""), flush=True)
    print(f"evlog serve: dashboard at {url}" + (" (it will ask for the token)" if token else ""), flush=True)
    print(f"evlog serve: {_send_with(receiver, args)}", flush=True)
    try:
        while not stop.wait(3600):
            pass
    finally:
        receiver.stop()
        ingestor.close(timeout=30)
        dash.close()
        st = receiver.stats()
        print(f"evlog serve: stopped; stored {ingestor.stored['traces']:,} spans, {ingestor.stored['logs']:,} "
              f"log records, {ingestor.stored['metrics']:,} metric points; {st['rejected']:,} requests rejected"
              + (f", {st['refused']:,} refused for want of the token" if token else ""), flush=True)
        store.close()
    return 0


def _listen_error(e: Any) -> str:
    flag = "--grpc-port" if e.transport == "grpc" else "--http-port"
    return f"{e}; choose another port with {flag}, or stop what listens there"


def _receiver_status(receiver: Any, ingestor: Any) -> dict:
    st = receiver.stats() if receiver is not None else {}
    return {"requests": sum(st.get("requests", {}).values()), "rejected": st.get("rejected", 0),
            "refused": st.get("refused", 0),
            "sink_errors": st.get("sink_errors", 0), "pending_rows": ingestor.pending(),
            "refused_rows": ingestor.refused_rows, "write_errors": ingestor.write_errors}


VIEW_PENDING = 20_000  # decoded rows `evlog view` holds while the store writes them (a few MB each thousand)


def cmd_view(args: argparse.Namespace) -> int:
    _check_host(args.host, args.token)
    from evlog.data.run_reader import RunFolder, RunFolderError, newest_run
    from evlog.data.store.json_spans import columns

    try:
        path = args.run_dir or newest_run(RUNS)
        rf = RunFolder(path, keep_traces=columns)  # traces lines stored as they are, with their columns
    except RunFolderError as e:
        raise CLIError(str(e)) from None
    _need_view_extras("view")
    import asyncio
    import gc

    from evlog.data import heap, otlp_decode
    from evlog.data.store import Ingestor, Store
    from evlog.viewer.server import Dashboard

    tmp = tempfile.mkdtemp(prefix="evlog-view-")
    store = Store(os.path.join(tmp, "view.sqlite"), indexes=False)  # made once the folder is read
    # the reader waits for the writer rather than holding decoded rows: a folder of a million spans is read
    # in the memory of VIEW_PENDING rows
    ingestor = Ingestor(store, max_pending_rows=VIEW_PENDING, max_batch_rows=VIEW_PENDING // 2)
    # how far the folder is read: "loading" until everything in it when `view` started is stored, then
    # "live" (following the run) or "loaded"; read, total: bytes of its files (compressed ones as they are)
    progress = {"state": "loading", "read": 0, "total": rf.bytes_total, "rows": 0}
    dash = Dashboard(store, token=args.token, source=f"run folder {rf.path}",
                     extra_status=lambda: {"pending_rows": ingestor.pending(), "corrupt_lines": rf.problem_count,
                                           "loading": {**progress, "pending_rows": ingestor.pending()}})
    ingestor.listeners.append(dash.notify)
    stop = threading.Event()
    # no garbage collection while the folder is read: its lines decode to trees without cycles, freed as
    # they are stored, and the passes their allocations set off took a sixth of the reading's CPU
    gc.disable()

    def follow() -> None:
        shown = 0
        while not stop.is_set():
            batches: list = []
            try:
                batches = rf.poll()
                progress.update(read=rf.bytes_read, total=rf.bytes_total, rows=rf.rows)
                for sig, rows in batches:
                    ingestor.submit(sig, rows, timeout=None)
                if rf.problems[shown:]:
                    shown = _report_problems(rf, shown)
            except Exception as e:  # the follower must not die silently: say why, keep going
                _err(f"reading {rf.path}: {type(e).__name__}: {e}")
            if batches or rf.moved:
                continue
            if progress["state"] == "loading":
                while not ingestor.flush(1.0) and not stop.is_set():
                    pass
                store.make_indexes()
                progress["state"] = "live" if args.follow else "loaded"
                gc.enable()
                otlp_decode.forget()  # the strings the reading shared: the store has them now
                heap.give_back()  # what reading freed, before a report panel is made on top of it
                dash.status_changed()
            if not args.follow:
                return
            stop.wait(1.0)

    follower = threading.Thread(target=follow, name="evlog-view-follow", daemon=True)
    follower.start()

    async def run() -> None:
        from aiohttp import web

        app = dash.make_app()
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, args.host, args.port)
        try:
            await site.start()
        except OSError as e:
            await runner.cleanup()
            raise CLIError(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
        port = runner.addresses[0][1] if runner.addresses else args.port
        print(f"evlog view: {rf.path}", flush=True)
        print(f"evlog view: dashboard at {_url(args.host, port)}"
              + (" (it will ask for the token)" if args.token else "") + "; Ctrl+C to stop", flush=True)
        done = asyncio.Event()
        loop = asyncio.get_running_loop()
        for s in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(s, done.set)
        await done.wait()
        await runner.cleanup()

    try:
        asyncio.run(run())
    finally:
        stop.set()
        follower.join(5)
        ingestor.close(timeout=5)
        dash.close()
        store.close()
        for name in os.listdir(tmp):
            try:
                os.unlink(os.path.join(tmp, name))
            except OSError:
                pass
        try:
            os.rmdir(tmp)
        except OSError:
            pass
    return 0


# -------------------------------------------------------------------------------------------------
# argparse


def _port(v: str) -> int:
    try:
        p = int(v)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {v!r}") from None
    if not 0 <= p <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range: {p}")
    return p


def _size(v: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    s = v.strip().lower().rstrip("b")
    mult = units.get(s[-1:], 1)
    try:
        n = int(float(s[:-1] if s[-1:] in units else s) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {v!r} (e.g. 32M)") from None
    if n <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {v!r}")
    return n


def _shape(v: str):
    from evlog.report.whatif_run import parse_shape

    try:
        return parse_shape(v)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="evlog", description="Look at what evlog recorded: a live dashboard, "
                                "an OTLP receiver with SQLite storage, and task stories and events on the console.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def source(sp: argparse.ArgumentParser, run_dir: bool = True) -> None:
        if run_dir:
            sp.add_argument("run_dir", nargs="?", metavar="RUN_DIR",
                            help="a run folder (default: the newest under ./evlog-runs)")
        sp.add_argument("--db", metavar="PATH", help="read an `evlog serve` database instead of a run folder")
        sp.add_argument("--json", action="store_true", help="print JSON")

    v = sub.add_parser("view", help="serve the dashboard for a run folder")
    v.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run folder (default: the newest under ./evlog-runs)")
    v.add_argument("--port", type=_port, default=0, help="port (default: a free one; the URL is printed)")
    v.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    v.add_argument("--token", help="secret the page asks for; required with a non-loopback --host")
    v.add_argument("--no-follow", dest="follow", action="store_false",
                   help="read the folder once instead of following a run that is still writing")
    v.set_defaults(fn=cmd_view)

    s = sub.add_parser("serve", help="OTLP receiver storing into SQLite, with the dashboard")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    s.add_argument("--http-port", type=_port, default=4318, help="OTLP/HTTP and dashboard port (default 4318)")
    s.add_argument("--grpc-port", type=_port, default=4317, help="OTLP/gRPC port (default 4317)")
    s.add_argument("--db", default=DEFAULT_DB, metavar="PATH", help=f"SQLite file (default ./{DEFAULT_DB})")
    secret = s.add_mutually_exclusive_group()
    secret.add_argument("--token", help="secret every OTLP export must carry (authorization: Bearer TOKEN) and "
                        "the page asks for; required with a non-loopback --host")
    secret.add_argument("--token-file", metavar="PATH", help="read the token from PATH (its owner's alone: "
                        "mode 0600), so it is not on the command line")
    s.add_argument("--max-body", type=_size, default=32 << 20, metavar="SIZE",
                   help="largest export request accepted, e.g. 32M (default); larger gets 413")
    s.set_defaults(fn=cmd_serve)

    sm = sub.add_parser("summary", help="counts: spans, events, metric points, processes, traces, time range")
    source(sm)
    sm.set_defaults(fn=cmd_summary)

    st = sub.add_parser("story", help="a task's transitions in time order, across processes")
    st.add_argument("key", metavar="KEY", help="the task key")
    source(st)
    st.set_defaults(fn=cmd_story)

    ev = sub.add_parser("events", help="every event, by topic (dask.log_event, evlog.log_event), else by "
                        "event name (evlog.metadata, torch's, the bridge's), oldest first")
    ev.add_argument("topic", nargs="?", metavar="TOPIC", help="only this topic (or event name)")
    source(ev)
    ev.add_argument("--limit", type=int, default=None, help="at most this many")
    ev.set_defaults(fn=cmd_events)

    rp = sub.add_parser("report", help="why the run took as long as it did: critical path, time by prefix, "
                        "stragglers, failures, workers, advice")
    rp.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run folder (default: the newest under ./evlog-runs)")
    rp.add_argument("--db", metavar="PATH", help="read an `evlog serve` database instead of a run folder")
    rp.add_argument("--run", metavar="ID", help="with --db: the run (its evlog.run.id) to report on (default: the newest)")
    rp.add_argument("--format", choices=("text", "json", "html"), default="text", help="text (default), json or html")
    rp.add_argument("-o", "--output", metavar="FILE", help="write to FILE (required for html; default stdout)")
    rp.add_argument("--what-if", action="append", type=_shape, metavar="workers=N[,threads=T]",
                    help="predict the Dask computations' time on N workers of T threads (default T: as "
                    "recorded) by replaying the recorded graph; processes=N for process pools; repeatable")
    rp.set_defaults(fn=cmd_report)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except CLIError as e:
        _err(str(e))
        return 1
    except sqlite3.DatabaseError as e:  # a database that opened but is damaged further in
        _err(f"{getattr(args, 'db', None) or 'the database'}: damaged database ({e})")
        return 1
    except BrokenPipeError:  # `evlog events | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
