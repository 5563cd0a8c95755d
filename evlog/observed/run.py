"""One run of evlog-instrument: its folder, its stats file, its summary.

The run is prepared once, by the process that owns it (the launched Python program itself, or the
launcher when the command is not Python): settings problems are reported once, the run folder is
created, other instrumentors are scanned, and all of it is published in the environment that every
child inherits. The launcher stays light (no settings, no SDK, no metadata scan) so start-up is cheap.
Each process appends its counters to the stats file at exit; the launcher sums them for the summary.
"""
from __future__ import annotations

import os
import re
import signal

from evlog import stats


def default_run_dir(cwd: str, service: str, environ=None) -> str:
    """./evlog-runs/<UTC time>-<service>/, made unique, created readable by the user alone. <service>
    is the resource's service.name when the user set one (``user_service_name``), else ``service``."""
    import time

    service = user_service_name(os.environ if environ is None else environ) or service
    service = re.sub(r"[^A-Za-z0-9_.-]+", "_", service) or "run"
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = os.path.join(cwd, "evlog-runs")
    os.makedirs(base, mode=0o700, exist_ok=True)
    n = 0
    while True:
        path = os.path.join(base, f"{stamp}-{service}" + (f"-{n + 1}" if n else ""))
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            n += 1


def user_service_name(environ) -> str | None:
    """The service name the user set: OTEL_SERVICE_NAME, else service.name in OTEL_RESOURCE_ATTRIBUTES
    (the spec's precedence, as the resource evlog builds has it)."""
    from evlog.observed.resource import user_attributes

    return user_attributes(environ).get("service.name", "").strip() or None


def prepare(settings, environ, service: str):
    """Report problems, create the run folder, scan instrumentors; publish in ``environ``. Returns settings."""
    from evlog import notices

    for p in settings.problems:
        notices.warn_once(f"config-{p}", p)
    from evlog import destinations

    for p in destinations.unknown_exporters(settings):  # the run's exporter process, which builds them, is quiet then
        notices.warn_once(f"config-{p}", p)
    environ["EVLOG_CONFIG_REPORTED"] = "1"
    environ["EVLOG_PREPARED"] = "1"
    if settings.exporters.run_folder and not settings.sdk_disabled:
        run_dir = settings.run_dir
        try:
            if run_dir:
                os.makedirs(run_dir, mode=0o700, exist_ok=True)
            else:
                run_dir = default_run_dir(os.getcwd(), service, environ)
        except OSError as exc:
            run_dir = run_dir or os.path.join(os.getcwd(), "evlog-runs")
            notices.warn_once(f"runfolder-{exc.errno}", f"cannot create the run folder {run_dir}: "
                              f"{exc.strerror or exc}; telemetry will be dropped")
        environ["EVLOG_RUN_DIR"] = run_dir
        settings = settings.with_overrides(run_dir=run_dir)
    try:
        from evlog.observed import other_instrumentors as others

        found = others.scan_cached()
        if found:
            import json

            environ[others.ENV] = json.dumps(found)
    except Exception:
        pass
    write_info(settings, environ.get("EVLOG_STATS_FILE"))
    return settings


def write_info(settings, path: str | None) -> None:
    """The run's description for the launcher's summary, as the stats file's info line."""
    if not path:
        return
    from evlog import destinations

    info = {
        "info": True,
        "summary": settings.summary and not settings.sdk_disabled,
        "where": destinations.describe(settings),
        "run_dir": settings.run_dir if settings.exporters.run_folder else None,
    }
    stats.append_line(path, info)


def summary(path: str, killed_by: int | None = None, exporter_killed: bool = False) -> str:
    """The one-paragraph summary from the stats file ('' when there is nothing to say); ``killed_by``:
    the signal that ended the program, if one did; ``exporter_killed``: the launcher had to kill the run's
    exporter process at its time limit."""
    rows = stats.read_all(path)
    info = next((r for r in rows if r.get("info")), None)
    if info is None or not info.get("summary"):
        return ""
    from evlog import process_count

    total: dict[str, int] = {}
    exporters = {r.get("pid") for r in rows if r.get("exporter.processes")}
    rows = [r for r in rows if not r.get("info") and "relay" not in r]  # the run's and the console relay's notes
    for r in rows:
        for k, v in r.items():
            if k not in ("pid", "time") and isinstance(v, int):
                total[k] = total.get(k, 0) + v
    spans = total.get("traces.exported", 0)
    events = total.get("logs.exported", 0)
    points = total.get("metrics.exported", 0)
    dropped = sum(v for k, v in total.items() if k.endswith(".failed") or k.startswith("dropped."))
    console_dropped = total.get("console.dropped", 0)
    processes = process_count.describe(*process_count.count_stats(total))  # those whose telemetry was exported
    text = (
        f"evlog: {spans:,} spans, {events:,} events and logs, {points:,} metric points "
        f"from {processes} -> {info.get('where')}"
    )
    if dropped:
        text += f"; {dropped:,} dropped (could not be exported)"
    if console_dropped:
        text += f"; {console_dropped:,} console lines dropped (the run's exporter process was gone or too far behind)"
    if exporter_killed and not exporters:  # it could not count what it held: say so, uncounted
        text += "; what the run's exporter process still held is dropped, uncounted (it was stopped at its time limit)"
    if killed_by and killed_by not in (signal.SIGTERM, signal.SIGINT):  # those two flush on the way out
        text += (f"; the program was killed by {signal.Signals(killed_by).name}: what it made since its "
                 f"last export (at most about 1 s) is lost")
    if info.get("run_dir") and spans + events + points:
        text += f"\nevlog: see them with: {view_command(info['run_dir'])}"
    return text + "\n"


def view_command(run_dir: str) -> str:
    """The command that shows a run folder (with the viewer's install first, if it is missing)."""
    view = f"evlog view {_shell_path(run_dir)}"
    from evlog.version import DISTRIBUTION

    return view if _viewer_installed() else f"python -m pip install '{DISTRIBUTION}[view]' && {view}"


def _viewer_installed() -> bool:
    """Is what `evlog view` needs (the view extra) importable here? Looked up, not imported."""
    import importlib.util

    try:
        return importlib.util.find_spec("aiohttp") is not None
    except (ImportError, ValueError):
        return False


def _shell_path(path: str) -> str:
    rel = os.path.relpath(path)
    p = path if rel.startswith("..") else rel
    return p if re.match(r"^[\w@%+=:,./-]+$", p) else "'" + p.replace("'", "'\\''") + "'"
